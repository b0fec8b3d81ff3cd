// Package manager runs a hub's user servers as a controller: many
// servers, one state machine each, driven by pod informer events, with
// recovery from the cluster, a status stream, optional leader election
// and Prometheus metrics. It is built only on the spawner package's
// exported API, which a Go hub can use the same way.
//
// # State machine
//
// Each server has a Phase (stopped → starting → running → stopping →
// stopped, and failed with a reason), and every transition happens under
// the server's lock. Spawn plans the start (bad user options fail there,
// before the Manager knows the server), then starts it in the background
// and returns once its pod exists, so an accepted start is in the
// cluster, where a new leader or a restarted Manager resumes it. Spawn of
// a starting or running server returns its status and starts nothing:
// concurrent Spawns of one server make one pod. Stop of a starting server
// cancels the start, then deletes the pod and waits until it is gone.
// DeleteForever of a stopped server deletes its claim, waits until it is
// gone, and forgets the server. Unknown servers are ErrNotFound; before
// Start has recovered the cluster, calls wait for it (bounded by their
// ctx) or, for Status, return ErrNotRunning rather than a wrong answer.
// Starts beyond ConcurrentSpawnLimit wait in a queue per cluster, so a
// cluster's waiting starts never hold back another's.
//
// # Following the cluster
//
// Pod informer events drive phases through a workqueue: a running server
// whose container exits, or whose pod is OOM-killed, evicted or deleted,
// becomes failed (stopped, for exit code 0) with the exit code and reason,
// and the status says so before any API call deletes the pod. A resync
// reads only the cache: nothing relists in steady state. While a start
// runs its pod is the start's to follow; when it ends the server is
// reconciled from the cache unless the cache still holds the pod version
// the start found ready. A failed status always has a reason. Watch
// streams every status change, in order, to every reader without ever
// blocking the Manager, and closes when the reader's ctx ends. Events
// replays a server's current operation's progress to any number of
// readers; its final event comes after the phase change.
//
// # Recovery
//
// Start first refuses an API server older than spawner supports, naming
// its version, before it watches anything. It then recovers every server
// from the State its pod records (and seeded servers without a pod as
// stopped), resuming starts found in flight. It watches every namespace a
// server can be in (the configured one, each a profile or
// retired_namespaces names), so a server survives a change of namespace,
// profile or pod_name_template. Only a pod in a trusted place with its
// server's records is believed (the spawner package's trust model): a pod
// elsewhere claiming a server is ignored and counted, and New refuses a
// profile option that lets users type the namespace. Seed takes a hub's
// saved State at any time: a pod at its names is adopted; a State naming
// an untrusted place or another server's pod is ErrStateRefused. With
// AdoptKubeSpawner, pods KubeSpawner made are recovered, polled and
// stopped too; without it they are left alone. Stopped and failed servers
// are forgotten after Retention.
//
// # Shutdown and leader election
//
// When Start's ctx ends, starts in flight are cancelled with ErrShutdown,
// which wraps spawner.ErrDetach: no pod is deleted and the next Manager
// resumes them; an accepted start whose pod does not exist yet first
// creates it. Start then returns nil. With LeaderElection, replicas are
// active/passive on a Lease: only the holder changes servers (the others
// return ErrNotLeader from Spawn, Stop and DeleteForever at once, answer
// Status, List and Poll, and keep their informers warm). WaitLeading
// returns once this replica leads (once recovered, without
// LeaderElection), ErrNotLeader when its ctx ends first, and ErrNotRunning
// when Start has returned, wrapping Start's error when Start failed. A term ends as a shutdown does, and the Lease is
// released only after every operation of the term has ended: starts
// detached, stops finished or, after the term's grace, cancelled. A
// LeaderElection New cannot use is an error from New; a Lease that cannot
// be used (no such namespace, no RBAC rule) is an error from Start.
//
// # Several clusters
//
// With Options.Clusters a Manager runs servers in several named clusters,
// each with its own client, Registry and health; the first is the default.
// A start's cluster is, in order: Options.Placement's choice (among the
// clusters the resolved profile names, if any); else the profile's
// kubernetes_cluster, the first available of the list; else the cluster
// the server last ran in; else the default. A name that is no cluster is
// ErrNoSuchCluster naming the clusters there are, refused by New where it
// can tell and otherwise by Spawn, before anything is made. Every object,
// State and Status of a server names its cluster. A server lives in one
// cluster at a time: Spawn is refused (ErrBusy) while a pod of it exists
// in another; a server found in two clusters is PhaseUnknown with
// ReasonSplitBrain naming both pods, its Spawn, Stop and DeleteForever
// return ErrSplitBrain, and nothing is touched. A server that moves keeps
// its claim in the old cluster until DeleteForever, which needs every
// cluster available and deletes the claims in each.
//
// A cluster is unavailable once its informers have failed for
// Options.ClusterDownAfter and its API server does not answer. Its
// servers are then PhaseUnknown with ReasonClusterUnavailable (never
// failed or stopped: nothing is deleted or forgotten), starts placed on
// it fail at once with a *ClusterUnavailableError, and Stop of its
// servers returns ErrClusterUnavailable; the other clusters go on. When
// it answers again its servers come back as they are. Health names the
// unavailable clusters (Degraded) and does not fail Ready while one
// cluster serves. A Manager started while a cluster is away serves the
// others and recovers that cluster's servers once it answers; a cluster
// too old is held unavailable, Health saying why. A seeded server of a
// cluster not seen since Start is PhaseUnknown, not stopped.
//
// # Observability
//
// With Options.Registerer the Manager exports Prometheus metrics
// (spawnkit_manager_*, with a cluster label). Health reports Live (a held
// lock or a stalled worker fails it) and Ready (recovered and serving).
//
// A Manager is safe for concurrent use; Start runs once.
package manager
