// Package manager runs a hub's user servers as a controller: many
// servers, one state machine each, driven by pod informer events, with
// recovery from the cluster, a status stream, optional leader election
// and Prometheus metrics. It is built only on the spawner package's
// exported API (a Factory, Spawner.Plan, StartOptions.Progress,
// PollCache, ReadyPod), which a Go hub can use the same way.
//
// # State machine
//
// Each server has a Phase (stopped → starting → running → stopping →
// stopped, and failed with a reason), and every transition happens under
// the server's lock. Spawn plans the start (bad user options fail there,
// before the Manager knows the server), then starts it in the background
// and returns once its pod exists (at most a few seconds; at once for a
// start queued behind ConcurrentSpawnLimit), so that an accepted start is
// in the cluster, where a new leader or a restarted Manager resumes it;
// Spawn of a starting or running server returns its
// status and starts nothing; Spawn of a stopping server is ErrBusy. Stop
// of a starting server cancels the start, then deletes the pod and waits
// until it is gone; a second Stop waits for the first. DeleteForever of a
// stopped server deletes its claim (spawner.Spawner.DeleteForever) and
// forgets it. Unknown servers are ErrNotFound; before Start has recovered
// the cluster, calls wait for it (bounded by their ctx) or, for Status,
// return ErrNotRunning rather than a wrong answer. Starts beyond
// ConcurrentSpawnLimit wait in a queue and report their position.
//
// # Following the cluster
//
// Pod informer events drive phases through a rate-limited workqueue: a
// running server whose container exits, or whose pod is OOM-killed,
// evicted or deleted, becomes failed (stopped, for exit code 0) with the
// exit code and reason, before any API call. A jittered resync is a
// backstop that reads only the cache: the Manager holds its pod informer
// for its lifetime, so nothing relists in steady state. While a start
// runs its pod is the start's to follow (an unschedulable pod is still
// checked against UnschedulableTimeout); when it ends the server is
// reconciled from the cache, unless the cache still holds the pod
// version the start found ready. Watch streams every status change in
// order per server; Events replays a server's current operation's
// progress to any number of readers.
//
// # Recovery, shutdown and leader election
//
// Start first checks the API server's version (spawner.CheckServerVersion:
// older than 1.32 is refused, naming the version). It then recovers every
// server from the State its pod records (and seeded
// servers without a pod as stopped), resuming starts found in flight.
// It watches every namespace a server can be in: the configured one and
// each a profile names (all, with enable_user_namespaces), so a server a
// profile put elsewhere is recovered and stopped after a restart. Only a
// pod where the configuration puts its server is believed (see the
// spawner package's trust model): a pod elsewhere claiming a server is
// ignored, logged and counted (spawnkit_manager_untrusted_pods_total),
// and New refuses a profile option that lets users type the namespace.
// When Start's ctx ends, starts in flight are cancelled with ErrShutdown,
// which wraps spawner.ErrDetach: no pod is deleted, and the next Manager
// resumes them; a start accepted whose pod does not exist yet first
// creates it (within the term's grace, at most 10 seconds), so that a
// graceful shutdown loses no accepted start. With LeaderElection, replicas are active/passive on a
// Lease: only the holder changes servers (the others return ErrNotLeader
// from Spawn, Stop and DeleteForever, answer Status, List and Poll, and
// keep their informers warm), a standby takes over within the lease
// duration, and at once after a graceful shutdown. A term ends as a
// shutdown does, and the Lease is released (or left to expire) only after
// every operation of the term has ended: starts detached once their pods
// exist, stops and deletions finished or, after the margin between RenewDeadline and
// LeaseDuration, cancelled. A Lease that cannot be used (a namespace that
// does not exist, a missing RBAC rule) is an error from Start, naming the
// verb, resource and namespace. Stopped and failed servers are forgotten
// after Retention.
//
// # Observability
//
// Every phase change is logged through the logr logger of Start's ctx
// (name "manager"; keys user, server, from, to, reason, url). With
// Options.Registerer the Manager exports
// spawnkit_manager_spawn_duration_seconds{kind,outcome},
// spawnkit_manager_failures_total{reason}, spawnkit_manager_servers{phase},
// spawnkit_manager_spawns_in_flight,
// spawnkit_manager_queue_depth{queue="reconcile"|"start"} and
// spawnkit_manager_untrusted_pods_total.
//
// A Manager is safe for concurrent use; Start runs once.
package manager
