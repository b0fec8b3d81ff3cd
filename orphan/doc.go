// Package orphan finds and safely deletes the objects no server of a hub
// owns: pods, claims, secrets, services and user namespaces left behind by
// bugs, a database reset or rollback, or a change of name template or
// namespace.
//
// # Who decides
//
// The hub supplies the servers it knows (Known: user, server name, and
// whether it should be running); List computes the difference with the
// cluster, and Cleanup deletes what the caller chooses. Neither side needs
// the other's internals.
//
// # Finding and attributing
//
// Objects are found by spawnkit's label (DefaultSelector) and mapped to a
// server through the annotations that hold the raw user and server names
// (naming.Annotations) — never by re-rendering today's templates — so
// objects named by an old template or living in an old namespace are still
// found and attributed. Objects without the label are never looked at;
// objects with it but without the annotations are reported as
// unattributed and left alone unless asked for.
//
// With Options.Registry, pods come from a shared informer the hub already
// holds, not a LIST. Each pod is visited once, and a large cache is
// judged, and its orphans sorted, on several cores at once (at most
// GOMAXPROCS, and at most 8); docs/performance.md has the figures.
// Orphans are returned sorted by kind, namespace and name.
//
// The rules: a pod of an unknown server, or of a server the hub believes
// stopped, is an orphan. A claim belongs to its user: a claim of a known
// user is never an orphan, one of an unknown user is. A secret or service
// is an orphan when its server is unknown or its owning pod is gone. A user
// namespace is an orphan when its user is unknown and no spawnkit pod is
// left in it.
//
// # Deleting safely
//
// Cleanup deletes with the UID and resourceVersion List saw as
// preconditions: an object re-created or changed since List is skipped,
// never deleted. It honours DryRun, a minimum age (DefaultMinAge: a server
// being started right now is never touched), the kinds to delete (claims
// and namespaces only when asked for) and a concurrency limit, treats an
// object already gone as such, and reports every orphan as deleted,
// skipped with the reason, or failed with the error.
//
// Options that cannot be meant are errors wrapping ErrInvalidOptions, never
// a guess: a kind not in AllKinds, a negative MinAge other than NoMinAge,
// a nil Known.
//
// A Sweeper runs List and Cleanup on an interval, with metrics, and with
// client-go leader election so that of several hub replicas only one
// sweeps. A sweep whose Known set is empty fails with ErrEmptyKnown and
// deletes nothing unless AllowEmptyKnown is set. Under leader election a
// sweep loop stops (and is waited for) before its sweeper campaigns again
// or releases the Lease on shutdown, so two replicas never sweep at once.
// List, Cleanup and a Sweeper are safe for concurrent use.
package orphan
