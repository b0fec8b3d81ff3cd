package reflector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Resource is what an informer caches.
type Resource string

const (
	ResourcePods   Resource = "pods"
	ResourceEvents Resource = "events"
)

// Key identifies one shared informer. Two requests with equal keys share
// one informer.
type Key struct {
	Resource Resource
	// Namespace is the namespace watched; "" (metav1.NamespaceAll) watches
	// all namespaces.
	Namespace     string
	LabelSelector string
	FieldSelector string
}

func (k Key) String() string {
	ns := k.Namespace
	if ns == "" {
		ns = "*"
	}
	return fmt.Sprintf("%s/%s[%s|%s]", k.Resource, ns, k.LabelSelector, k.FieldSelector)
}

// DefaultComponentLabel selects user server pods, as KubeSpawner does.
const DefaultComponentLabel = "component=singleuser-server"

// Options configure a Registry. Client or Config is required.
type Options struct {
	// Client talks to the API server. Default: built from Config.
	Client kubernetes.Interface
	// Config builds Client when Client is nil. client-go's default rate
	// limit (QPS 5, burst 10) would throttle a hub to about five pod
	// creations a second; a Config with QPS 0 and Burst 0 gets QPS 50 and
	// burst 100 here. Set them explicitly to choose.
	Config *rest.Config
	// PodLabelSelector selects the pods Pods caches. Default:
	// DefaultComponentLabel. Pods without it are never cached.
	PodLabelSelector string
	// MaxEventsPerPod bounds the events kept per pod; the oldest are
	// dropped first. Default: 100. Negative means no bound.
	MaxEventsPerPod int
	// Registerer, when set, receives the registry's metrics.
	Registerer prometheus.Registerer
	// Clock stamps health times. Default: the real clock.
	Clock clock.PassiveClock
}

// Registry hands out shared informers, one per Key, reference-counted: the
// first holder starts an informer, later holders share it, and the last
// Release (or Close) stops it. A Registry is safe for concurrent use.
type Registry struct {
	client   kubernetes.Interface
	podSel   string
	maxEvent int
	clock    clock.PassiveClock
	reg      prometheus.Registerer
	metrics  *collector
	// noWatchList is set once the API server has refused a streaming
	// initial list (its WatchList gate is off: 1.33 by default): informers
	// made afterwards list and watch instead of asking again.
	noWatchList atomic.Bool

	mu sync.Mutex // guards entries and closed
	// entries are the running informers.
	entries map[Key]*entry
	closed  bool
	// subs are the open subscriptions by pod namespace/name.
	subs map[string]map[*Subscription]struct{}
	// subsMu guards subs. It is separate from mu because every informer
	// event takes it to wake subscribers.
	subsMu sync.Mutex
}

// entry is one running informer and its holders.
type entry struct {
	key      Key
	informer cache.SharedIndexInformer
	health   *health
	// events is the index of an event informer, built by its store;
	// nil for pods. Events have no client-go informer: store is what
	// their reflector (refl) lists and watches into.
	events *eventIndex
	store  *eventStore
	refl   *cache.Reflector
	// uids maps a pod informer's pods by uid, built by its handler; nil
	// for events.
	uids *podUIDs
	// observers are the functions Pods.Observe added; the pod handler
	// calls them (unused for events).
	observers observers
	refs      int // guarded by Registry.mu
	cancel    context.CancelFunc
	done      chan struct{} // closed when the informer has stopped
	// handled is the Registry's handler on the informer: it has synced
	// once the informer has and the handler has seen the first list (the
	// event index, the uid map, subscriptions and observers are built
	// from it, and lag the informer's store by the handler's queue).
	handled cache.ResourceEventHandlerRegistration
	// synced is set once handled has synced (which it never undoes), so
	// that a read after that checks one atomic, not the informer's locks.
	synced atomic.Bool
}

// New creates a Registry. It starts nothing until an informer is asked for.
func New(opts Options) (*Registry, error) {
	client := opts.Client
	if client == nil {
		if opts.Config == nil {
			return nil, errors.New("reflector: Options needs a Client or a Config")
		}
		cfg, err := DetectStalls(opts.Config)
		if err != nil {
			return nil, err
		}
		if cfg.QPS == 0 && cfg.Burst == 0 {
			cfg.QPS, cfg.Burst = 50, 100
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("reflector: building a client: %w", err)
		}
	}
	r := &Registry{
		client:   client,
		podSel:   opts.PodLabelSelector,
		maxEvent: opts.MaxEventsPerPod,
		clock:    opts.Clock,
		entries:  map[Key]*entry{},
		subs:     map[string]map[*Subscription]struct{}{},
	}
	if r.podSel == "" {
		r.podSel = DefaultComponentLabel
	}
	if r.maxEvent == 0 {
		r.maxEvent = 100
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if opts.Registerer != nil {
		r.reg, r.metrics = opts.Registerer, &collector{r: r}
		if err := r.reg.Register(r.metrics); err != nil {
			return nil, fmt.Errorf("reflector: registering metrics: %w", err)
		}
	}
	return r, nil
}

// ErrClosed is returned by Pods and Events after Close.
var ErrClosed = errors.New("reflector: registry closed")

// Close stops every informer of the registry and waits until they have
// stopped; it unregisters the registry's metrics. From then on every read
// of a handle still held returns ErrReleased (releasing it is harmless),
// and Pods and Events return ErrClosed. Calling Close more than once is
// harmless.
func (r *Registry) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	entries := r.entries
	r.entries = map[Key]*entry{}
	r.mu.Unlock()
	for _, e := range entries {
		e.cancel()
	}
	for _, e := range entries {
		<-e.done
	}
	if r.metrics != nil {
		r.reg.Unregister(r.metrics)
	}
}

// PodLabelSelector is the label selector of the registry's pod informers.
func (r *Registry) PodLabelSelector() string { return r.podSel }

// acquire returns the running informer for key, starting it if needed.
// The informer outlives ctx: ctx only provides the logger.
func (r *Registry) acquire(ctx context.Context, key Key) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("reflector: watching %s: %w", key, ErrClosed)
	}
	if e, ok := r.entries[key]; ok {
		e.refs++
		return e, nil
	}
	e := &entry{key: key, refs: 1, done: make(chan struct{}), health: newHealth(r.clock)}
	logger := logr.FromContextOrDiscard(ctx).WithValues("informer", key.String())
	runCtx, cancel := context.WithCancel(logr.NewContext(context.WithoutCancel(ctx), logger))
	e.cancel = cancel
	switch key.Resource {
	case ResourcePods:
		e.informer = r.newInformer(key, e.health)
		// One handler per informer, however many holders: it wakes
		// subscribers. Handlers must be fast; notify never blocks.
		e.uids = newPodUIDs()
		reg, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.podChanged(e, nil, obj, false) },
			UpdateFunc: func(old, obj any) { r.podChanged(e, old, obj, false) },
			DeleteFunc: func(obj any) { r.podChanged(e, nil, obj, true) },
		})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("reflector: watching %s: %w", key, err)
		}
		e.handled = reg
		_ = e.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
			e.health.watchError(err)
			logger.Error(err, "list or watch failed; client-go retries with backoff", "errors", e.health.status().WatchErrors)
		})
	case ResourceEvents:
		// No informer store: the reflector writes into the bounded
		// event index through eventStore, which keeps only the events of
		// the Registry's pods (see eventStore).
		e.events = newEventIndex(r.maxEvent)
		e.store = newEventStore(e.events, r.podCached, r.notifyEvent)
		lw := r.listWatch(key, e.health, logger)
		e.refl = cache.NewReflectorWithOptions(r.watchListSemantics(lw), &corev1.Event{}, e.store,
			cache.ReflectorOptions{Name: key.String(), Logger: &logger})
	}
	r.entries[key] = e
	// The informer goroutine is owned by the entry: release stops it and
	// waits for it.
	go func() {
		defer close(e.done)
		if e.refl != nil {
			e.refl.RunWithContext(runCtx)
			return
		}
		e.informer.RunWithContext(runCtx)
	}()
	return e, nil
}

// hasSynced reports whether e's first list has reached its handler (pods)
// or its store (events).
func (e *entry) hasSynced() bool {
	if e.store != nil {
		return e.store.hasSynced()
	}
	return e.handled.HasSynced()
}

// syncedChan is closed once hasSynced is true.
func (e *entry) syncedChan() <-chan struct{} {
	if e.store != nil {
		return e.store.synced
	}
	return e.handled.HasSyncedChecker().Done()
}

// release drops one hold on key's informer and stops it, waiting until it
// has stopped, when that was the last.
func (r *Registry) release(e *entry) {
	r.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && r.entries[e.key] == e { // after Close, entries no longer has e
		delete(r.entries, e.key)
	}
	r.mu.Unlock()
	if last {
		e.cancel()
		<-e.done
	}
}

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

// podKey is how subscriptions and indexes name a pod.
func podKey(namespace, name string) string { return namespace + "/" + name }

// eventFieldSelector selects the events of pods.
var eventFieldSelector = fields.OneTermEqualSelector("involvedObject.kind", "Pod").String()

// handle is one holder's hold on an entry.
type handle struct {
	r        *Registry
	e        *entry
	once     sync.Once
	released atomic.Bool
	obsMu    sync.Mutex                               // guards observed and handlers
	observed []*observer                              // added with Pods.Observe, removed at Release
	handlers []cache.ResourceEventHandlerRegistration // added with Pods.OnChange, removed at Release
}

func (h *handle) release() {
	h.once.Do(func() {
		h.obsMu.Lock()
		h.released.Store(true) // under obsMu: Observe adds nothing after this
		h.obsMu.Unlock()
		h.removeObservers()
		h.r.release(h.e)
	})
}

// waitSynced returns ErrReleased once the handle is released or its
// informer stopped (by Registry.Close), else waits until the informer
// has delivered its first list, or ctx ends.
func (h *handle) waitSynced(ctx context.Context) error {
	if h.released.Load() {
		return ErrReleased
	}
	return waitSynced(ctx, h.e)
}

// waitSynced waits until e's first list has been delivered, to the
// store and to the Registry's handler, or ctx ends, or e stops
// (ErrReleased).
func waitSynced(ctx context.Context, e *entry) error {
	select {
	case <-e.done:
		return ErrReleased
	default:
	}
	if e.synced.Load() {
		return nil // the common case
	}
	if e.hasSynced() {
		e.synced.Store(true)
		return nil
	}
	select {
	case <-e.syncedChan():
		return nil
	case <-e.done:
		return ErrReleased
	case <-ctx.Done():
		return fmt.Errorf("reflector: waiting for %s to sync: %w (last watch error: %v)", e.key, ctx.Err(), e.health.status().LastError)
	}
}

// Status returns the health of every running informer.
func (r *Registry) Status() map[Key]Status {
	// Counting a large cache takes a while: do it outside the lock that
	// the informers' handlers need to wake subscribers.
	r.mu.Lock()
	entries := maps.Clone(r.entries)
	r.mu.Unlock()
	out := make(map[Key]Status, len(entries))
	for k, e := range entries {
		out[k] = e.status()
	}
	return out
}

func (e *entry) status() Status {
	s := e.health.status()
	if e.store != nil {
		s.Synced = e.store.hasSynced()
		s.Objects = e.events.len()
		return s
	}
	s.Synced = e.informer.HasSynced()
	s.Objects = len(e.informer.GetIndexer().ListKeys())
	return s
}
