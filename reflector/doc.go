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
// it returns the context's error, never a wrong answer. Lookups are index
// lookups: a pod by namespace/name or uid, a pod's events by involved
// object (namespace/name or uid), oldest first.
//
// Objects returned are the cache's own: read-only. DeepCopy before
// changing one. Before entering the cache, objects are trimmed
// (TransformPod, TransformEvent): a cached pod keeps its metadata (without
// managedFields), node name, container names, images and ports, and its
// whole status; a cached event keeps its involved object, reason, message,
// type, count, source component and timestamps. For a realistic spawnkit
// pod this cuts the cache's cost per pod to about 38% (BenchmarkHeapPerPod).
//
// # Bounded events
//
// Events are watched with the field selector involvedObject.kind=Pod. The
// event cache keeps at most Options.MaxEventsPerPod events per pod (the
// newest), and drops a pod's events when a pod informer of the same
// registry sees the pod deleted. Both work by removing entries from the
// informer's index; should client-go relist (after a long disconnection),
// removed events that still exist on the server come back until the
// server's event TTL (one hour by default) expires them.
//
// # Health
//
// A cache is never silently frozen. client-go's reflector retries failed
// lists and watches with backoff for as long as the informer runs; each
// failure is counted, logged through the go-logr logger of the ctx that
// started the informer, and visible in Status: LastSuccess, LastError,
// WatchErrors and Healthy (synced, and the latest list or watch call
// succeeded). While the API server is unreachable reads keep answering
// from the last state; Healthy says it may be stale. With
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
//
// # Client rate limits
//
// client-go's default client rate limit (QPS 5, burst 10) caps a hub at
// about five pod creations per second, whatever the API server could take.
// When Options.Config leaves QPS and Burst at zero, New uses QPS 50 and
// burst 100; a hub that builds its own Client should choose such values
// too (the informers themselves need only a few requests each).
//
// Registry, Pods, Events and Subscription are safe for concurrent use.
package reflector
