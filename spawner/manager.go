package spawner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Phase is where a managed server is.
type Phase string

const (
	PhaseStarting Phase = "starting"
	PhaseRunning  Phase = "running"
	PhaseStopping Phase = "stopping"
	PhaseStopped  Phase = "stopped"
	PhaseFailed   Phase = "failed"
)

// ServerStatus is a managed server's state.
type ServerStatus struct {
	Server naming.Server
	Phase  Phase
	URL    string
	// Err is why the last operation failed (PhaseFailed).
	Err   error
	State State
}

// ManagerOptions configure NewManager. Client and Registry are required.
type ManagerOptions struct {
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Config is the base configuration; Spawn resolves profiles on it.
	Config Config
	Hooks  Hooks
	// ReconcileInterval is how often the manager compares its servers with
	// the cluster. Default: one minute.
	ReconcileInterval time.Duration
	Clock             clock.WithTicker
}

// Manager runs the servers of a hub: starts in the background with an
// event stream per server, recovery of its servers from the cluster when
// it starts (state lives in labels and annotations, so any replica can
// take over), and a periodic reconcile that notices pods that went away
// or appeared and resumes watching servers that are still starting.
// A Manager is safe for concurrent use.
type Manager struct {
	opts ManagerOptions

	mu      sync.Mutex // guards servers, running and stopping
	servers map[serverKey]*managed
	running bool
	// stopping is closed when Start's ctx ends; background operations
	// watch it. wg counts them.
	stopping chan struct{}
	wg       sync.WaitGroup
	// started is closed once Start has begun, so calls racing with a
	// Start that runs in another goroutine wait for it instead of failing.
	started     chan struct{}
	startedOnce sync.Once
}

type serverKey struct{ user, server string }

func keyOf(s naming.Server) serverKey { return serverKey{s.Username, s.Servername} }

// managed is one server; mu guards its fields.
type managed struct {
	mu      sync.Mutex
	spawner *Spawner
	status  ServerStatus
	events  *stream // the current operation's events
	busy    bool    // an operation is in flight
}

// ErrNotRunning is returned by Manager calls made after Start has ended,
// or made before it and given up (their ctx ended) waiting for it.
var ErrNotRunning = errors.New("spawner: the manager is not running (call Start)")

// ErrBusy is returned when a server already has an operation in flight.
var ErrBusy = errors.New("spawner: the server has an operation in flight")

// NewManager creates a Manager; Start runs it.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Client == nil || opts.Registry == nil {
		return nil, errors.New("spawner: ManagerOptions needs Client and Registry")
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Manager{opts: opts, servers: map[serverKey]*managed{}, started: make(chan struct{})}, nil
}

// Start recovers the servers that exist in the cluster, then reconciles
// every ReconcileInterval until ctx ends; it returns after every
// background operation has ended.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("spawner: manager already started")
	}
	m.running = true
	m.stopping = make(chan struct{})
	m.mu.Unlock()
	m.startedOnce.Do(func() { close(m.started) })
	defer func() {
		m.mu.Lock()
		close(m.stopping)
		m.running = false
		m.mu.Unlock()
		m.wg.Wait()
		m.mu.Lock()
		for _, s := range m.servers {
			s.spawner.Close()
		}
		m.mu.Unlock()
	}()
	log := logr.FromContextOrDiscard(ctx)
	if err := m.reconcile(ctx); err != nil && ctx.Err() == nil {
		log.Error(err, "recovering servers from the cluster")
	}
	ticker := m.opts.Clock.NewTicker(m.opts.ReconcileInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			if err := m.reconcile(ctx); err != nil && ctx.Err() == nil {
				log.Error(err, "reconciling servers")
			}
		}
	}
}

// opContext returns a context for a background operation that ends when
// the manager stops, and registers the operation.
func (m *Manager) opContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	select {
	case <-m.started:
	case <-ctx.Done():
		return nil, nil, ErrNotRunning
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return nil, nil, ErrNotRunning
	}
	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopping := m.stopping
	m.wg.Add(1)
	// Owned by the operation: ends with it (cancel) or with the manager.
	go func() {
		select {
		case <-stopping:
			cancel()
		case <-opCtx.Done():
		}
	}()
	return opCtx, cancel, nil
}

// entry returns the managed server for s, creating its Spawner from cfg.
func (m *Manager) entry(s naming.Server, cfg Config, env []corev1.EnvVar, ssl *SSL) (*managed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.servers[keyOf(s)]; ok {
		return e, nil
	}
	sp, err := New(s, Options{Client: m.opts.Client, Registry: m.opts.Registry, Config: cfg, Hooks: m.opts.Hooks, Env: env, SSL: ssl, Clock: m.opts.Clock})
	if err != nil {
		return nil, err
	}
	e := &managed{spawner: sp, status: ServerStatus{Server: s, Phase: PhaseStopped, State: sp.State()}}
	m.servers[keyOf(s)] = e
	return e, nil
}

// SpawnOptions are what a hub passes for one start.
type SpawnOptions struct {
	// UserOptions select a profile and its options (see Config.Resolve).
	UserOptions map[string]string
	Env         []corev1.EnvVar
	SSL         *SSL
}

// Spawn starts a server in the background and returns at once (waiting,
// bounded by ctx, for Start to have begun if it runs concurrently); Events
// follows the start and Status reports its outcome. ctx bounds nothing
// after Spawn returns (it provides the logger); the start ends with the
// manager.
func (m *Manager) Spawn(ctx context.Context, s naming.Server, opts SpawnOptions) error {
	cfg, err := m.opts.Config.Resolve(ctx, opts.UserOptions)
	if err != nil {
		return err
	}
	e, err := m.entry(s, cfg, opts.Env, opts.SSL)
	if err != nil {
		return err
	}
	opCtx, cancel, err := m.opContext(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.busy {
		e.mu.Unlock()
		cancel()
		m.wg.Done()
		return ErrBusy
	}
	// Each start takes this start's options (profile, env, SSL); the
	// names in use carry over, so a running server stays reachable.
	fresh, err := New(s, Options{Client: m.opts.Client, Registry: m.opts.Registry, Config: cfg, Hooks: m.opts.Hooks,
		Env: opts.Env, SSL: opts.SSL, Clock: m.opts.Clock})
	if err != nil {
		e.mu.Unlock()
		cancel()
		m.wg.Done()
		return err
	}
	if e.spawner != nil {
		fresh.LoadState(e.spawner.State())
		e.spawner.Close()
	}
	e.spawner = fresh
	e.busy = true
	e.status.Phase, e.status.Err, e.status.URL = PhaseStarting, nil, ""
	st := newStream()
	e.events = st
	sp := e.spawner
	e.mu.Unlock()

	go func() {
		defer m.wg.Done()
		defer cancel()
		url, err := sp.startWith(opCtx, st)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.busy = false
		e.status.State = sp.State()
		if err != nil {
			e.status.Phase, e.status.Err = PhaseFailed, err
			return
		}
		e.status.Phase, e.status.URL = PhaseRunning, url
	}()
	return nil
}

// Stop stops a server and waits for it (bounded by ctx).
func (m *Manager) Stop(ctx context.Context, s naming.Server) error {
	m.mu.Lock()
	e, ok := m.servers[keyOf(s)]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	e.mu.Lock()
	if e.busy && e.status.Phase == PhaseStarting {
		e.mu.Unlock()
		return ErrBusy
	}
	e.status.Phase = PhaseStopping
	e.mu.Unlock()
	err := e.spawner.Stop(ctx, StopOptions{})
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.status.Phase, e.status.Err = PhaseFailed, err
		return err
	}
	e.status.Phase, e.status.URL = PhaseStopped, ""
	return nil
}

// Status reports one server.
func (m *Manager) Status(s naming.Server) (ServerStatus, bool) {
	m.mu.Lock()
	e, ok := m.servers[keyOf(s)]
	m.mu.Unlock()
	if !ok {
		return ServerStatus{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status, true
}

// List reports every server the manager knows, sorted by user and server.
func (m *Manager) List() []ServerStatus {
	m.mu.Lock()
	entries := make([]*managed, 0, len(m.servers))
	for _, e := range m.servers {
		entries = append(entries, e)
	}
	m.mu.Unlock()
	out := make([]ServerStatus, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		out = append(out, e.status)
		e.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ServerStatus) int {
		if c := strings.Compare(a.Server.Username, b.Server.Username); c != 0 {
			return c
		}
		return strings.Compare(a.Server.Servername, b.Server.Servername)
	})
	return out
}

// Events streams the server's current (or last) start from its beginning,
// ending with its final event; the channel closes then or when ctx ends.
// Any number of readers each get the whole stream.
func (m *Manager) Events(ctx context.Context, s naming.Server) <-chan ProgressEvent {
	m.mu.Lock()
	e, ok := m.servers[keyOf(s)]
	m.mu.Unlock()
	if !ok {
		ch := make(chan ProgressEvent)
		close(ch)
		return ch
	}
	e.mu.Lock()
	st := e.events
	e.mu.Unlock()
	return followStream(ctx, st)
}

// reconcile compares the managed servers with the pods in the cluster:
// pods of servers the manager does not know are adopted (recovery), a
// server believed running whose pod is gone becomes stopped, and a server
// found starting is watched until it is ready or fails.
func (m *Manager) reconcile(ctx context.Context) error {
	ns := m.opts.Config.Namespace
	if m.opts.Config.EnableUserNamespaces {
		ns = metav1.NamespaceAll
	} else if ns == "" {
		ns = detectNamespace()
	}
	pods, err := m.opts.Registry.Pods(ctx, ns)
	if err != nil {
		return err
	}
	defer pods.Release()
	list, err := pods.List(ctx, metav1.NamespaceAll)
	if err != nil {
		return err
	}
	seen := map[serverKey]bool{}
	var errs []error
	for _, pod := range list {
		if pod.Labels[ManagedByLabel] != ManagedByValue || pod.DeletionTimestamp != nil {
			continue
		}
		user, ok := pod.Annotations[naming.AnnotationUsername]
		if !ok {
			continue
		}
		srv := naming.Server{Username: user, Servername: pod.Annotations[naming.AnnotationServername]}
		seen[keyOf(srv)] = true
		if err := m.adopt(ctx, srv, pod); err != nil {
			errs = append(errs, fmt.Errorf("adopting pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	m.mu.Lock()
	entries := maps.Clone(m.servers)
	m.mu.Unlock()
	for k, e := range entries {
		if seen[k] {
			continue
		}
		e.mu.Lock()
		if !e.busy && e.status.Phase == PhaseRunning {
			// The pod went away behind the hub's back.
			e.status.Phase, e.status.URL = PhaseStopped, ""
		}
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}

// adopt makes a pod found in the cluster a managed server (if it is not
// one already) and, when it is still starting, watches it.
func (m *Manager) adopt(ctx context.Context, srv naming.Server, pod *corev1.Pod) error {
	e, err := m.entry(srv, m.opts.Config, nil, nil)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.busy || e.status.Phase == PhaseRunning || e.status.Phase == PhaseStarting {
		e.mu.Unlock()
		return nil
	}
	e.spawner.LoadState(State{PodName: pod.Name, Namespace: pod.Namespace})
	e.status.State = e.spawner.State()
	if isReady(pod) {
		e.status.Phase, e.status.URL, e.status.Err = PhaseRunning, e.spawner.url(pod), nil
		e.mu.Unlock()
		return nil
	}
	if reason, msg := fatalReason(pod, e.spawner.cfg.FatalReasons); reason != "" {
		e.status.Phase, e.status.Err = PhaseFailed, fmt.Errorf("%s: container %s", reason, msg)
		e.mu.Unlock()
		return nil
	}
	// Still starting: watch it in the background.
	opCtx, cancel, err := m.opContext(ctx)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	e.busy = true
	e.status.Phase = PhaseStarting
	st := newStream()
	st.note("The hub restarted; watching the server start again.", m.opts.Clock.Now())
	e.events = st
	e.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer cancel()
		url, reason, err := e.spawner.watch(opCtx, pod)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.busy = false
		if err != nil {
			e.status.Phase, e.status.Err = PhaseFailed, fmt.Errorf("%s: %w", reason, err)
			st.finish(ProgressEvent{Progress: 100, Failed: true, Message: err.Error(), Time: m.opts.Clock.Now()})
			return
		}
		e.status.Phase, e.status.URL = PhaseRunning, url
		st.finish(ProgressEvent{Progress: 100, Ready: true, URL: url, Message: "Server ready at " + url, Time: m.opts.Clock.Now()})
	}()
	return nil
}
