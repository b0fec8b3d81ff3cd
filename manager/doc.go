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
// It watches every namespace a server can be in: the configured one,
// each a profile names and each retired_namespaces names (all, with
// enable_user_namespaces or a templated retired namespace), so a server
// a profile put elsewhere, or one started before the namespace changed,
// is recovered and stopped after a restart. Only a pod in a trusted
// place with its server's records is believed (see the spawner
// package's trust model), whatever today's pod_name_template: a pod
// elsewhere claiming a server is ignored, logged and counted
// (spawnkit_manager_untrusted_pods_total), and New refuses a profile
// option that lets users type the namespace. Seed takes a hub's saved
// State at any time (a hub sends it when the Manager may not know the
// server): a pod at its names is adopted, a State naming an untrusted
// place or another server's pod is ErrStateRefused. A cluster that
// takes no more starts but still runs servers stays listed with
// Cluster.Retired.
// When Start's ctx ends, starts in flight are cancelled with ErrShutdown,
// which wraps spawner.ErrDetach: no pod is deleted, and the next Manager
// resumes them; a start accepted whose pod does not exist yet first
// creates it (within the term's grace, at most 10 seconds), so that a
// graceful shutdown loses no accepted start. With LeaderElection, replicas are active/passive on a
// Lease: only the holder changes servers (the others return ErrNotLeader
// from Spawn, Stop and DeleteForever, answer Status, List and Poll, and
// keep their informers warm), a standby takes over within the lease
// duration, and at once after a graceful shutdown. Those calls wait for
// recovery but never for the Lease, so a hub waits for it itself:
// WaitLeading returns once this replica leads (at once without
// LeaderElection, a moment after Start when the Lease is free, up to
// LeaseDuration when a replica that went away without releasing it held
// it), ErrNotLeader when its ctx ends first, and ErrNotRunning when
// Start has returned; Start's error then says why. A term ends as a
// shutdown does, and the Lease is released (or left to expire) only after
// every operation of the term has ended: starts detached once their pods
// exist, stops and deletions finished or, after the margin between RenewDeadline and
// LeaseDuration, cancelled. A Lease that cannot be used (a namespace that
// does not exist, a missing RBAC rule) is an error from Start, naming the
// verb, resource and namespace. Stopped and failed servers are forgotten
// after Retention.
//
// # Several clusters
//
// With Options.Clusters a Manager runs servers in several named
// clusters, each with its own client (and rate limits), Registry,
// informers and health; the first is the default. A server's cluster is
// chosen when it starts, in this order: Options.Placement (which must
// pick among the clusters the resolved profile names, if it names any);
// else the profile's kubernetes_cluster, a name or a list tried in order,
// the first available taking the start; else the cluster the server last
// ran in (its claim, and with it its files, is there); else the default.
// A start whose every candidate is unavailable fails at once with a
// *ClusterUnavailableError naming the cluster. A name that is no cluster
// is ErrNoSuchCluster naming the clusters there are (so is any
// kubernetes_cluster on a Manager without Clusters): New refuses a base
// configuration, listed profile or choice that names one, fallbacks
// included (a misspelt fallback would hide until the first choice is
// down); a ProfileListFunc's profiles, known only per start, are refused
// by Spawn, every name checked before one is picked. Each cluster may have
// a base configuration of its own (Cluster.Config, typically
// Options.Config.Override with a pod_connect_ip the hub can reach, or
// services_enabled), under the profile's overrides: a pod IP in another
// cluster is usually not routable from the hub.
//
// Every object of a server carries its cluster's name (label
// spawnkit.io/cluster), as do its State (so a hub database restored
// from a backup still finds it) and Status. A (user, server name) lives
// in one cluster at a time: Spawn of a running server with a profile
// that names another cluster changes nothing; Spawn is refused
// (ErrBusy, naming the pod) while a pod of the server exists in another
// cluster, one still terminating after a Stop included; a start that
// waited for a slot (ConcurrentSpawnLimit) checks again before it
// creates anything, and if a pod of the server has appeared elsewhere
// meanwhile it fails with ReasonInOtherCluster, having made nothing, and
// the Manager follows that pod. A stopped server started with a profile
// that names another cluster moves there, and its claim in the old
// cluster is kept (its files are there) until DeleteForever, which needs
// every cluster available and answering (it asks each API server before
// it deletes anything, so a cluster gone within ClusterDownAfter is
// found too, and the error names it) and deletes the server's claims in
// each. A server found in two clusters at
// once (a restored database, another hub, an operator's copy) is a split
// brain: Status reports PhaseUnknown with ReasonSplitBrain naming both
// pods, Spawn, Stop and DeleteForever return ErrSplitBrain (which wraps
// ErrBusy), nothing in either cluster is touched, and once one pod is
// gone the Manager follows the other. Trust stays per object and per
// cluster, as with one cluster.
//
// A cluster is unavailable once its informers have failed, without a
// success, for Options.ClusterDownAfter and its API server does not
// answer GET /version (an answer counts as a success: a cluster that has
// just come back is not marked down again by one slow answer). Its starting, running and stopping servers are
// then reported PhaseUnknown with ReasonClusterUnavailable (never failed
// or stopped: nothing is deleted or forgotten, and Watch reports the
// change), starts placed on it fail fast, and Stop of its servers
// returns ErrClusterUnavailable; the other clusters start, stop and
// report as before. When it answers again its servers are reconciled
// from its informers and come back as they are. Health.Clusters reports
// each cluster; Health.Degraded names the unavailable ones, which do not
// make Ready fail while one cluster serves. Recovery waits for every
// cluster's informers, but a cluster that has not synced 30 s after the
// first one is held unavailable and its servers are recovered as soon as
// it answers; one that does not answer Start's version check at all is
// unavailable at once (its version is checked when it answers; one too
// old stays unavailable, Health's Refused saying why), so a restart
// while a cluster is away serves the others within moments. A seeded
// server (Options.Seed) of a cluster not seen since Start is reported
// PhaseUnknown, not stopped, until that cluster's cache has been looked
// at. A server the hub neither seeded nor asks about cannot be known to
// be in such a cluster: a start of it goes where placement puts it, and
// if the cluster then shows a pod of it, that is a split brain, reported
// and left alone. Refusing every such start instead would let one
// cluster's outage stop new starts in all the others; a hub only starts
// a server it believes stopped, and one that records State can seed it.
//
// ConcurrentSpawnLimit is per cluster: starts waiting in one cluster (an
// API server away, slow image pulls there) never hold back another's,
// and a queued start's progress names the cluster whose slot it waits
// for.
//
// Informers retry an API server that cannot be reached every second
// (see the reflector package), so a cluster's servers are followed again
// within about a second of its return, however long it was away.
//
// # Observability
//
// Every phase change is logged through the logr logger of Start's ctx
// (name "manager"; keys user, server, from, to, reason, url). With
// Options.Registerer the Manager exports
// spawnkit_manager_spawn_duration_seconds{kind,outcome,cluster},
// spawnkit_manager_starts_total{kind,cluster},
// spawnkit_manager_failures_total{reason,cluster},
// spawnkit_manager_servers{phase,cluster} (phase unknown included),
// spawnkit_manager_spawns_in_flight,
// spawnkit_manager_queue_depth{queue="reconcile"|"start"},
// spawnkit_manager_untrusted_pods_total, and with several clusters
// spawnkit_manager_cluster_up{cluster} and
// spawnkit_manager_split_brains_total. The label cluster is "" without
// Options.Clusters.
//
// A Manager is safe for concurrent use; Start runs once.
package manager
