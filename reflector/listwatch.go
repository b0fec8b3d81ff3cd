package reflector

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// newInformer is the pod informer for key, not yet running: its store
// holds *Pod, made by updateTransform from what listWatch reads.
func (r *Registry) newInformer(key Key, h *health) cache.SharedIndexInformer {
	lw := r.listWatch(key, h, logr.Discard())
	// As client-go's generated informers do: a client that cannot stream
	// the initial list (a fake clientset) is listed instead.
	inf := cache.NewSharedIndexInformerWithOptions(r.watchListSemantics(lw), &corev1.Pod{}, cache.SharedIndexInformerOptions{
		Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		ObjectDescription: key.String(),
	})
	// The transform must be set before the informer runs.
	_ = inf.SetTransform(updateTransform(inf.GetIndexer()))
	return inf
}

// watchListSemantics is lw as an informer's or reflector's source: with
// client-go's streaming initial list (WatchList) unless the client cannot
// stream (a fake clientset) or the API server has refused it before.
func (r *Registry) watchListSemantics(lw *cache.ListWatch) cache.ListerWatcher {
	if r.noWatchList.Load() {
		return listThenWatch{lw}
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, r.client)
}

// listThenWatch is a ListWatch the reflector lists and then watches.
type listThenWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells client-go's reflector not to ask
// for a streaming list (k8s.io/client-go/util/watchlist).
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// watchListRefused reports whether err is an API server's refusal of the
// streaming initial list that o asked for: 422 Invalid on
// sendInitialEvents, which a server with the WatchList gate off answers
// ("sendInitialEvents is forbidden for watch unless the WatchList feature
// gate is enabled").
func watchListRefused(o metav1.ListOptions, err error) bool {
	if o.SendInitialEvents == nil || !*o.SendInitialEvents || !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil {
			for _, c := range d.Causes {
				if strings.Contains(c.Field, "sendInitialEvents") {
					return true
				}
			}
		}
	}
	return strings.Contains(err.Error(), "sendInitialEvents")
}

// listWatch lists and watches key's resource, recording each call's
// outcome in h. log receives the failures of informers without a watch
// error handler (events').
func (r *Registry) listWatch(key Key, h *health, log logr.Logger) *cache.ListWatch {
	var list func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	var watchFn func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	switch key.Resource {
	case ResourcePods:
		pods := r.client.CoreV1().Pods(key.Namespace)
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }
		watchFn = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) }
		if rc := r.restClient(); rc != nil {
			// Pods are decoded field by field, only what the cache keeps.
			if kc, err := keptPodClient(rc); err == nil {
				rc = kc
			}
			list, watchFn = uncompressed(rc, "pods", key.Namespace, func() runtime.Object { return &corev1.PodList{} })
		}
	case ResourceEvents:
		events := r.client.CoreV1().Events(key.Namespace)
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return events.List(ctx, o) }
		watchFn = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return events.Watch(ctx, o) }
		if rc := r.restClient(); rc != nil {
			list, watchFn = uncompressed(rc, "events", key.Namespace, func() runtime.Object { return &corev1.EventList{} })
		}
	}
	failed := func(what string, err error) {
		if err != nil {
			log.Error(err, what+" failed; client-go retries with backoff", "errors", h.status().WatchErrors)
		}
	}
	// An API server away for long is logged when it goes, then every
	// 30 tries (about 30 s), not every second.
	failedAgain := func(what string, err error, n int) {
		if n == 1 || n%30 == 0 {
			log.Error(err, "the API server cannot be reached; the "+what+" is tried again every second", "tries", n, "errors", h.status().WatchErrors)
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = key.LabelSelector, key.FieldSelector
			var obj runtime.Object
			err := untilReachable(ctx, func() error {
				var err error
				obj, err = list(ctx, o)
				h.attempt(callList, err)
				return err
			}, func(err error, n int) { failedAgain("list", err, n) })
			failed("list", err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = key.LabelSelector, key.FieldSelector
			var w watch.Interface
			refused := false
			err := untilReachable(ctx, func() error {
				var err error
				w, err = watchFn(withWatchHealth(ctx, h), o)
				if err != nil && watchListRefused(o, err) {
					refused = true
					return err
				}
				h.attempt(callWatch, err)
				return err
			}, func(err error, n int) { failedAgain("watch", err, n) })
			if refused {
				// Not a failure: client-go lists at once instead.
				if !r.noWatchList.Swap(true) {
					log.V(1).Info("the API server does not serve streaming lists (its WatchList gate is off); informers list and watch instead", "informer", key.String())
				}
				return w, err
			}
			failed("watch", err)
			if err != nil {
				return w, err
			}
			return watchWithHealth(w, h), nil
		},
	}
}

// unreachableRetry is how often an informer's list or watch call is
// made again while the API server cannot be reached (untilReachable).
const unreachableRetry = time.Second

// untilReachable makes call, and while it fails because the API server
// cannot be reached (a refused or reset connection, a failed dial),
// makes it again every unreachableRetry (each failure recorded by call
// itself, and reported to again with its count), until it succeeds,
// fails otherwise, or ctx ends.
//
// client-go's reflector would retry such a call itself, but with a
// backoff that doubles up to 30 s, is jittered up to twice that, and is
// reset only after two minutes without failures: after an outage an
// informer could stay blind for up to a minute once its API server is
// back, and longer after each further outage. Holding the call here
// instead keeps that backoff at its start, so an informer resumes within
// about unreachableRetry of its API server answering, however long or
// often it was away. A server that answers with an error (403, 410, 500)
// is left to client-go's handling.
func untilReachable(ctx context.Context, call func() error, again func(err error, n int)) error {
	for n := 1; ; n++ {
		err := call()
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		again(err, n)
		t := time.NewTimer(unreachableRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// unreachable reports whether err says the API server could not be
// reached at all, rather than that it answered with an error.
func unreachable(err error) bool {
	var op *net.OpError
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || errors.As(err, &op) && op.Op == "dial"
}

// updateTransform is TransformPod for the informer whose store is
// cached: a pod the cache already holds is made with its cached version
// (newPod). The transform runs with client-go's queue locked and takes
// only the store's read lock, which the informer never holds while it
// waits for the queue's.
func updateTransform(cached cache.Store) cache.TransformFunc {
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		var prev *Pod
		if old, exists, err := cached.GetByKey(podKey(pod.Namespace, pod.Name)); err == nil && exists {
			prev, _ = old.(*Pod)
		}
		return newPod(pod, prev), nil
	}
}

// restClient is the client's core/v1 REST client, or nil when it has
// none that speaks HTTP (a fake clientset).
func (r *Registry) restClient() *rest.RESTClient {
	if rc, ok := r.client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil && rc.Client != nil {
		return rc
	}
	return nil
}

// uncompressed lists and watches resource in namespace ("" for all)
// asking for responses without gzip, as kube-scheduler and
// kube-controller-manager do (rest.Config.DisableCompression): Go's HTTP
// transport asks for gzip by default, and the API server then compresses
// large lists and every streamed initial list (a watch that carries all
// the pod events afterwards, with WatchListCompression), which costs CPU
// at both ends and saves nothing on a cluster network. A header on the
// informer's own requests, rather than on the caller's client, leaves
// the hub's other requests as it configured them.
func uncompressed(rc *rest.RESTClient, resource, namespace string, newList func() runtime.Object) (
	func(context.Context, metav1.ListOptions) (runtime.Object, error),
	func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	req := func(o *metav1.ListOptions) *rest.Request {
		// Protobuf unless the client's config chose a content type, as
		// the typed client asks for core types (the pod informers'
		// client, keptPodClient, always asks for protobuf).
		r := rc.Get().UseProtobufAsDefault().Namespace(namespace).Resource(resource).
			VersionedParams(o, scheme.ParameterCodec).SetHeader("Accept-Encoding", "identity")
		if o.TimeoutSeconds != nil {
			// As the typed client: the server's timeout is also the client's.
			r = r.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
		}
		return r
	}
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		out := newList()
		err := req(&o).Do(ctx).Into(out)
		return out, err
	}
	watchFn := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.Watch = true
		return req(&o).Watch(ctx)
	}
	return list, watchFn
}
