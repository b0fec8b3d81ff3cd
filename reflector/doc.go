// Package reflector hands out shared, reference-counted pod and event
// informers, built on client-go's SharedIndexInformer.
//
// A hub with 10,000 user servers needs one pod informer per namespace (or
// one for all namespaces), not 10,000: Registry.Pods and Registry.Events
// return handles on informers keyed by (resource, namespace, label
// selector, field selector). The first request starts an informer, later
// ones share it, and the last Release stops it and waits until it has
// stopped. Every goroutine the package starts is owned by an informer
// entry and ends with it.
//
// # Reads
//
// Every read (Get, GetByUID, List, ForPod, ForUID) first waits for the
// informer's initial list, bounded by its ctx, so a read never reports a
// live pod as missing because the cache was still empty; with an ended ctx
// it returns the context's error, never a wrong answer. The wait (and
// WaitForSync) ends once the list is in the store and the Registry's
// handler has seen all of it too: the event index, the uid map,
// subscriptions and Observe functions are fed by that handler, which runs
// a little behind the store. Lookups are index
// lookups: a pod by namespace/name (Get, or GetByKey with a key built
// once by PodKey, which allocates nothing), a pod by uid (a map the pod
// informer's handler builds; since the handler runs just after the store
// changes, a uid the map has not seen yet is found by a scan, so GetByUID
// never misses a cached pod), a pod's events by involved object
// (namespace/name or uid), oldest first.
//
// Pods.OnChange and Pods.Observe call a function for every pod change.
// OnChange is a client-go event handler of its own, replaying the pods
// already cached first. Observe is for controllers on a hot path: its
// functions run in the Registry's one handler on the informer, in the
// informer's order, with no replay and no listener goroutines of their
// own; once its remove function returns, the function is not called
// again.
//
// Objects returned are the cache's own, shared by every reader:
// read-only.
//
// # The cache contract
//
// Before entering the cache, objects are trimmed to what spawnkit and its
// documented hooks read (TransformPod, TransformEvent). A pod informer
// caches a compact *Pod, not a *corev1.Pod: Get, GetByKey, GetByUID, List
// and OnChange all hand out *Pod. A cached pod keeps
//
//   - its namespace, name, uid, resourceVersion, creation and deletion
//     timestamps;
//   - all its labels (so that any label selector still matches), and of
//     its annotations only those under two prefixes: hub.jupyter.org/
//     (the owner's user and server names) and spawnkit.dev/ (the
//     recorded State and the start id);
//   - spec.nodeName and the ports of its containers (container, port
//     name and number; not init containers'), which a KubeSpawner pod's
//     URL is built from;
//   - of its status the phase, reason, message, podIP and hostIP; the
//     PodReady and PodScheduled conditions (status, reason, message, last
//     transition), the only conditions spawnkit reads; and each container's
//     and init container's name, ready, restartCount and state (waiting:
//     reason and message; running: startedAt; terminated: exit code,
//     signal, reason, message, startedAt and finishedAt).
//
// Everything else is dropped: owner references, finalizers,
// managedFields, other annotations, images, env, volumes, resources,
// probes, podIPs, the other conditions, container ids and last
// termination states, and the rest of the spec and status.
//
// A cached pod shares no memory with the pod it was made from. Cached pods
// share memory with each other: strings that many pods share (the
// namespace, label and annotation keys, label values, reasons, container
// and port names) are interned, and an update of a cached pod whose uid,
// labels and kept annotations are unchanged (a status change) shares the
// name, uid, labels and annotations of the cached version it replaces.
// This is one more reason a cached pod is read-only.
//
// A cached event keeps its involved object, reason, message, type, count,
// source component and timestamps.
//
// Pods handed to hooks from the cache (spawner's PodURL) are these
// compact pods; a hook that needs more of a pod reads it from the API
// server. Code that builds or changes a pod (spawner's ModifyPod and
// AfterPodCreated) gets a whole *corev1.Pod, never a cached one.
//
// client-go reads a cached Pod through meta.Accessor (Pod implements
// metav1.ObjectMetaAccessor): the store's namespace/name keys, the
// namespace index, the resource version comparison of updates and the
// tombstones (cache.DeletedFinalStateUnknown) of pods whose deletion a
// relist discovers all work on it, and OnChange unwraps such tombstones.
// The pod transform passes a *Pod through unchanged, so client-go may
// hand it an object twice.
//
// The informers list and watch in protobuf and ask for responses without
// gzip (Accept-Encoding: identity), as kube-scheduler and
// kube-controller-manager do: the API server otherwise compresses large
// lists and every streamed initial list together with the watch that
// follows it, which costs CPU at both ends and saves nothing on a cluster
// network. Only the informers' own requests are affected, not the rest
// of the client's.
//
// The informers ask for client-go's streaming initial list (WatchList)
// where the client can stream. An API server whose WatchList gate is off
// (1.33's default; 1.32 and 1.34 on serve it) refuses that request (422
// on sendInitialEvents) and client-go lists at once instead; the
// Registry takes that refusal as the server's answer, not as a failure
// (no watch error, nothing logged but at V(1)), and the informers it
// starts afterwards list and watch without asking again.
//
// The pod informers also decode only what the cache keeps: their lists
// and watches go through a REST client of their own (the client's
// transport, credentials and rate limiter, always asking for protobuf,
// even when the client's rest.Config chose JSON) whose decoder reads a
// pod's kept fields on the wire and skips the rest, instead of building a
// whole *corev1.Pod and dropping most of it in the transform; the result
// is the same cached Pod that NewPod makes of the whole pod. Their watch
// events are the ones client-go's decoder makes, read without copying
// the object's bytes out of the frame. Status objects, JSON and other
// kinds are decoded as client-go decodes them. A fake clientset's
// informers use the typed client, and a client whose core REST client's
// URL does not end in /api/v1 is used as it is.
//
// What the compact cache and its decoder save, in time and memory per
// pod, is measured in docs/performance.md ("The reflector's cache").
//
// # Bounded events
//
// Events are watched with the field selector involvedObject.kind=Pod, by
// a client-go reflector with no informer store behind it: it lists and
// watches into spawnkit's event store, so an event costs memory only if
// it is kept. ForPod and ForUID read its index, which keeps per pod (by
// uid) at most Options.MaxEventsPerPod events, the newest; an event
// updated in place keeps its one slot. Only the events of pods a pod
// informer of the same Registry caches (the server pods its label
// selector picks) are indexed; those of any other pod are held, at most
// 1,024 in all, oldest dropped first, until their pod appears (a pod's
// first events can come before the pod), and are then indexed. Where no
// synced pod informer of the Registry covers the namespace, every pod's
// events are indexed. So memory follows the servers, not the namespace:
// 50,000 events, half about 5 server pods and half about 2,500 other
// pods, keep about 1.3 MiB, where a client-go store keeps 43 MiB
// (TestEventFloodMemoryBounded). When a pod informer of the same
// registry sees a pod deleted, its events leave the index and its uid is
// remembered (the latest 10,000 deleted pods), so that a relist, which
// delivers every event the server still has, does not bring them back;
// an event the server deleted (its TTL, one hour by default) leaves the
// index, at the watch's delete or at the next relist.
//
// # Health
//
// A cache is never silently frozen. client-go's reflector retries failed
// lists and watches with backoff for as long as the informer runs; each
// failure is counted, logged through the go-logr logger of the ctx that
// started the informer, and visible in Status: LastSuccess, LastError,
// WatchErrors and Healthy (synced, and the latest list or watch call
// succeeded); WatchErrors counts each failed call or failure client-go
// reports once. While the API server is unreachable reads keep answering
// from the last state; Healthy says it may be stale. A list or watch that
// cannot reach the API server at all (a refused or reset connection, a
// failed dial) is tried again every second, each try counted, rather
// than handed back to client-go, whose backoff doubles up to 30 s (up to
// a minute with its jitter) and resets only after two minutes without a
// failure: an informer resumes within about a second of its API server
// answering, however long or often it was away (TestAPIServerRestart:
// 188 ms after a 15 s outage, 818 ms after a second one; client-go's
// backoff alone took 22 s and then more than 40 s). A connection that
// stops forwarding without closing (a lost NAT entry) is found by an
// HTTP/2 health check within 10 s (DetectStalls, which New applies to
// Options.Config; client-go's own check takes 45 s): the broken watch is
// counted in Status, and client-go watches again on a new connection from
// the resourceVersion it had, so no change is lost. A Registry built on a
// caller's Client has that client's checks. A watch that ends with an
// error event (410 Gone: its resourceVersion was compacted away) makes the
// informer unhealthy until its relist succeeds, which client-go makes
// after a backoff without reporting the error. A refusal
// (Forbidden or Unauthorized: an RBAC verb missing) is kept in
// Status.Denied until a call of the refused kind succeeds, so a Role
// without watch, under which lists between refused watches keep the
// cache synced but late, is told apart from a blip. With
// Options.Registerer the same figures are exported as Prometheus metrics
// (spawnkit_reflector_objects, _watch_errors_total,
// _last_success_age_seconds, _healthy).
//
// # Subscriptions
//
// Registry.Subscribe(namespace, name) returns a Subscription whose channel
// is woken whenever that pod or one of its events changes, in any informer
// of the registry. Wake-ups are coalesced and never block an informer: a
// subscriber reads the current state from the cache after each wake-up.
// This is how spawnkit waits for pods without sleep loops.
// Registry.SubscribeIf lets a function decide which adds and updates wake
// the subscriber (deletions always do), and Subscription.OnEvent which
// events do: a start is woken only by changes it acts on, and a Manager's
// start has its pod's events forwarded to its progress stream from the
// handler. Subscription.Seen reports the pods of the name an informer has
// had meanwhile, woken or not, so that a subscriber whose pod's add did
// not wake it still knows a pod missing from that informer's cache was
// deleted.
//
// # Client rate limits
//
// client-go's default client rate limit (QPS 5, burst 10) caps a hub at
// about five pod creations per second, whatever the API server could take.
// When Options.Config leaves QPS and Burst at zero, New uses QPS 50 and
// burst 100; a hub that builds its own Client should choose such values
// too (the informers themselves need only a few requests each).
//
// # Lifecycle
//
// Registry.Close stops every informer and waits until each has stopped.
// A handle's reads (Get, GetByUID, List, OnChange, Observe, ForPod,
// ForUID, WaitForSync) return ErrReleased after its Release or after
// Close, and its Release removes the functions it added with Observe and
// OnChange; Pods and Events return ErrClosed after Close.
//
// Registry, Pods, Events and Subscription are safe for concurrent use.
package reflector
