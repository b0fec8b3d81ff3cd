// Package reflector hands out shared, reference-counted pod and event
// informers, built on client-go's SharedIndexInformer.
//
// Registry.Pods and Registry.Events return handles on informers keyed by
// (resource, namespace, label selector, field selector). The first
// request starts an informer, later ones share it, and the last Release
// stops it and waits until it has stopped; an event informer's last
// Release leaves it running for two minutes, for the next start to share,
// then stops it. Every goroutine the package starts is owned by an
// informer (or its stop timer) and ends with it.
//
// # Reads
//
// Every read (Get, GetByUID, List, ForPod, ForUID) first waits for the
// informer's initial list, bounded by its ctx, so a read never reports a
// live pod as missing because the cache was still empty; with an ended ctx
// it returns the context's error, never a wrong answer. The wait (and
// WaitForSync) ends once the list is in the store and the Registry's
// handler, which feeds the event index, the uid map, subscriptions and
// Observe functions, has seen all of it. GetByUID never misses a pod the
// store holds, even one the handler has not seen yet. ForPod and ForUID
// return a pod's events oldest first.
//
// Pods.Observe calls a function for every pod change, in the informer's
// order, from the Registry's one handler, with no replay of pods cached
// before it; once its remove function returns, the function is not called
// again. Pods.OnChange registers a client-go event handler of its own.
// Objects returned are the cache's own, shared by every reader: read-only.
//
// # The cache contract
//
// A pod informer caches a compact *Pod, not a *corev1.Pod: Get, GetByKey,
// GetByUID, List, Observe and OnChange all hand out *Pod. A cached pod
// keeps
//
//   - its namespace, name, uid, resourceVersion, creation and deletion
//     timestamps;
//   - all its labels, and of its annotations only those under
//     hub.jupyter.org/ and spawnkit.dev/;
//   - spec.nodeName and its containers' ports (container, port name and
//     number; not init containers');
//   - of its status the phase, reason, message, podIP and hostIP; the
//     PodReady and PodScheduled conditions (status, reason, message, last
//     transition); and each container's and init container's name, ready,
//     restartCount and state (waiting: reason and message; running:
//     startedAt; terminated: exit code, signal, reason, message, startedAt
//     and finishedAt).
//
// Everything else is dropped. A cached pod shares no memory with the pod
// it was made from, but cached pods share interned strings with each
// other, and an update that changes neither uid, labels nor kept
// annotations shares them with the version it replaces: one more reason a
// cached pod is read-only. The pod informers decode only the kept fields
// from the wire, and the result is the Pod that NewPod makes of the whole
// pod; TransformPod is idempotent. A cached event keeps its involved
// object, reason, message, type, count, source component and timestamps.
//
// A *Pod implements metav1.ObjectMetaAccessor, so client-go's keys,
// namespace index, resource version comparison and tombstones
// (cache.DeletedFinalStateUnknown) work on it. Hooks given a cached pod
// get this compact Pod; code that builds or changes a pod gets a whole
// *corev1.Pod, never a cached one.
//
// The informers ask for uncompressed responses and for client-go's
// streaming initial list (WatchList). An API server that refuses WatchList
// (its gate off) is answered by a plain list at once; the Registry takes
// that refusal as the server's answer, not as a failure (no watch error),
// and its later informers do not ask again.
//
// # Bounded events
//
// Events (involvedObject.kind=Pod) are listed and watched into spawnkit's
// event store, with no informer store behind it. Per pod it indexes at
// most Options.MaxEventsPerPod events, the newest; an event updated in
// place keeps its one slot. Only the events of pods a pod informer of the
// same Registry caches are indexed; those of other pods are held, a
// bounded number oldest first dropped, until their pod appears. Where no
// synced pod informer covers the namespace, every pod's events are
// indexed. When a pod informer sees a pod deleted, its events leave the
// index and a bounded number of deleted uids is remembered, so a relist
// does not bring them back; an event the server deleted leaves the index.
//
// # Health
//
// A cache is never silently frozen. Each failed list or watch is counted
// once, logged through the logger of the ctx that started the informer,
// and visible in Status (LastSuccess, LastError, WatchErrors, Healthy:
// synced and the latest call succeeded). While the API server is away,
// reads answer from the last state and Healthy says it may be stale. A
// list or watch that cannot reach the API server at all is retried at a
// short fixed interval instead of client-go's growing backoff, so the
// cache converges soon after the server answers again, however often it
// was away. A connection that stops forwarding without closing is found
// by an HTTP/2 health check (DetectStalls, which New applies to
// Options.Config) and watched again from the resourceVersion it had, so
// no change is lost. A watch that ends with 410 Gone makes the informer
// unhealthy until its relist succeeds. A refusal (Forbidden,
// Unauthorized) stays in Status.Denied until a call of the refused kind
// succeeds. With Options.Registerer the same figures are exported as
// Prometheus metrics.
//
// # Subscriptions
//
// Registry.Subscribe(namespace, name) returns a Subscription whose channel
// is woken whenever that pod or one of its events changes, in any informer
// of the registry. Wake-ups are coalesced and never block an informer: a
// subscriber reads the current state from the cache after each wake-up.
// SubscribeIf lets a function decide which adds and updates wake it
// (deletions always do), and Subscription.OnEvent which events do.
// Subscription.Seen reports the pods of the name an informer has had,
// woken or not.
//
// # Lifecycle
//
// Registry.Close stops every informer and waits until each has stopped.
// A handle's reads return ErrReleased after its Release or after Close,
// and its Release removes the functions it added with Observe and
// OnChange; Pods and Events return ErrClosed after Close.
//
// Registry, Pods, Events and Subscription are safe for concurrent use.
package reflector
