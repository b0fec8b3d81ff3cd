package reflector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
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
	// creations a second; a Config with QPS 0 and Burst 0 gets no
	// client-side limit here (QPS -1: the API server's priority and
	// fairness protects it). Set them explicitly to choose a cap.
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

	// linger is eventLinger (shorter in tests; 0: stop at once).
	linger time.Duration
	// stopping counts the lingering informers stopIdle is stopping, for
	// Close to wait for.
	stopping sync.WaitGroup

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
	// idle, set while an event informer with no holder lingers (see
	// eventLinger), stops it unless a holder comes first; guarded by
	// Registry.mu.
	idle   *time.Timer
	cancel context.CancelFunc
	done   chan struct{} // closed when the informer has stopped
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
			cfg.QPS = -1
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("reflector: building a client: %w", err)
		}
	}
	r := &Registry{
		linger:   eventLinger,
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
	for _, e := range entries {
		if e.idle != nil {
			e.idle.Stop()
			e.idle = nil
		}
	}
	r.mu.Unlock()
	for _, e := range entries {
		e.cancel()
	}
	for _, e := range entries {
		<-e.done
	}
	r.stopping.Wait()
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
		if e.idle != nil {
			// A lingering informer taken again: its timer, if it
			// already fired, finds a holder and leaves it running.
			e.idle.Stop()
			e.idle = nil
		}
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
// has stopped, when that was the last. An event informer's last hold
// instead leaves it running for r.linger (eventLinger), then stops it
// without waiting (see eventLinger).
func (r *Registry) release(e *entry) {
	r.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && e.events != nil && r.entries[e.key] == e && r.linger > 0 {
		e.idle = time.AfterFunc(r.linger, func() { r.stopIdle(e) })
		r.mu.Unlock()
		return
	}
	if last && r.entries[e.key] == e { // after Close, entries no longer has e
		delete(r.entries, e.key)
	}
	r.mu.Unlock()
	if last {
		e.cancel()
		<-e.done
	}
}

// eventLinger is how long an event informer runs on after its last hold
// is released. The informer is held only while a start or resume follows
// its pod (spawner), so after a burst of starts it would otherwise keep
// every event of the burst (about 2.4 KB a server) for as long as the
// hub runs; stopped at once, a hub whose starts come one at a time would
// list the namespace's events (up to an hour of them, the API server's
// event TTL) for each start. Lingering, the starts of a busy hour share
// one list, and the memory is given back minutes after the last start.
const eventLinger = 2 * time.Minute

// stopIdle stops e, an event informer left lingering by release, unless
// a holder took it meanwhile or the Registry closed (Close stops it
// then). It runs on the timer's goroutine, which owns the stop: it waits
// until the informer has stopped, and so does Close (stopping).
func (r *Registry) stopIdle(e *entry) {
	r.mu.Lock()
	if e.refs > 0 || r.entries[e.key] != e {
		r.mu.Unlock()
		return
	}
	e.idle = nil
	delete(r.entries, e.key)
	r.stopping.Add(1)
	r.mu.Unlock()
	defer r.stopping.Done()
	e.cancel()
	<-e.done
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
