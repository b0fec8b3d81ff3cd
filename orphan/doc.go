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
// holds, not a LIST; a large cache is judged on several cores, and the
// result is what a LIST would give. Orphans are returned sorted by kind,
// namespace and name.
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
// Cleanup deletes with what List saw as preconditions: an object
// re-created since List is skipped, never deleted. It honours DryRun, a
// minimum age (DefaultMinAge: a server being started right now is never
// touched), the kinds to delete (claims and namespaces only when asked
// for) and a concurrency limit, treats an object already gone as such (two
// Cleanups of one list delete each object once), and reports every orphan
// as deleted, skipped with the reason, or failed with the error.
//
// Options that cannot be meant are errors wrapping ErrInvalidOptions, never
// a guess: a kind not in AllKinds, a negative MinAge other than NoMinAge,
// a nil Known, an orphan listed in another cluster than Cleanup's, a
// SweeperCluster without a Name or a Client, two of one Name.
//
// A Sweeper runs List and Cleanup on an interval, with metrics, and with
// client-go leader election so that of several hub replicas only one
// sweeps. A sweep whose Known set is empty fails with ErrEmptyKnown and
// deletes nothing unless AllowEmptyKnown is set. Under leader election a
// sweep loop stops (and is waited for) before its sweeper campaigns again
// or releases the Lease on shutdown, so two replicas never sweep at once.
// List, Cleanup and a Sweeper are safe for concurrent use.
//
// # Several clusters
//
// A hub whose servers live in several clusters, each server in one at a
// time, says where with Known.AddIn, and lists each cluster with its own
// client, naming it in Options.Cluster; every orphan found carries that
// name (Orphan.Cluster). A pod, secret or service of a known server the
// hub records in another cluster is an orphan of the cluster listed, with
// ReasonOtherCluster and Orphan.ServerCluster naming where the server
// lives: what moving a server leaves behind. It is not an orphan of the
// cluster the server lives in. A claim of a known user is never an orphan
// in any cluster: a moved server's old claim holds its user's data. A
// user namespace is judged by the pods of the cluster listed. A server
// added with no cluster (Add, or AddIn with "": a placement the hub has
// not resolved) counts as living in every cluster, as everything does
// when Options.Cluster is "": with one cluster nothing changes.
//
// Cleanup deletes only orphans listed in the cluster CleanupOptions.Cluster
// names: one listed in another cluster is an error wrapping
// ErrInvalidOptions, returned before anything is deleted, so that an
// orphan listed in one cluster is never deleted through another's client.
// Cleanup is called once per cluster, with its client and its orphans.
//
// A Sweeper given SweeperOptions.Clusters sweeps each of them with its own
// client on every sweep, with the one Known set (an empty one fails the
// sweep with ErrEmptyKnown before any cluster is listed). A cluster whose
// sweep fails, its API server down, does not stop the others: their
// orphans are still deleted, and the sweep's error joins a *ClusterError
// naming each cluster that failed. The metrics carry a cluster label on
// every series (SweeperCluster.Name; List.Cluster, by default "", for a
// Sweeper of one cluster, which Prometheus stores as no label), and
// spawnkit_orphans_sweep_failures_total counts each cluster's failed
// sweeps. The Lease of leader election lives in SweeperOptions.Client's
// cluster, by default the first of Clusters.
package orphan
