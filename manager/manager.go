package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// Options configure New. Client and Registry are required; the zero
// value of every other field means its default.
type Options struct {
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Config is the base configuration; Spawn resolves profiles on it.
	Config spawner.Config
	Hooks  spawner.Hooks
	// ResyncInterval is how often every server is checked against the
	// cache even without a pod event: a backstop, with up to 10% jitter.
	// It never lists from the API server. Default: 5 minutes.
	ResyncInterval time.Duration
	// Retention is how long a stopped or failed server stays in the
	// Manager (Status, Events) before it is forgotten. Default: 10
	// minutes.
	Retention time.Duration
	// UnschedulableTimeout fails a start whose pod has been unschedulable
	// this long (reason Unschedulable). Default: 0, meaning only
	// start_timeout ends it.
	UnschedulableTimeout time.Duration
	// ConcurrentSpawnLimit bounds the starts in flight (JupyterHub's
	// concurrent_spawn_limit); more wait in a queue and report their
	// position as progress. Default: 100. Negative means no bound.
	ConcurrentSpawnLimit int
	// Workers is the number of goroutines reconciling pod changes.
	// Default: 2.
	Workers int
	// LeaderElection, when set, makes replicas active/passive: only the
	// holder of the Lease runs servers; the others answer Status, List
	// and Poll from the cluster and take over within the lease duration.
	LeaderElection *LeaderElection
	// Seed are servers a hub already keeps state for (its database). A
	// seeded server whose pod exists is recovered from the pod, whose
	// record wins (it is what actually runs); a seeded server without a
	// pod starts as stopped with the seeded names.
	Seed []Seed
	// AdoptKubeSpawner is the KubeSpawner compatibility mode for a hub
	// migrating from KubeSpawner: besides its own pods, the Manager adopts
	// pods labelled app.kubernetes.io/managed-by=kubespawner (with the
	// configured component label, singleuser-server by default) that
	// carry KubeSpawner's hub.jupyter.org/username (and servername)
	// annotations. Such a pod has no StateAnnotation: the server's state
	// is its name and namespace, the port its "notebook-port" container
	// port (else Config's port). It is then recovered, polled and stopped
	// like any other server. Default: false, KubeSpawner's pods are left
	// alone.
	AdoptKubeSpawner bool
	// Registerer, when set, receives the Manager's metrics.
	Registerer prometheus.Registerer
	// Clock drives resync, retention and timestamps. Default: real.
	Clock clock.WithTicker
}

// Seed is a server a hub keeps state for.
type Seed struct {
	Server naming.Server
	State  spawner.State
}

func (o *Options) defaults() {
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = 5 * time.Minute
	}
	if o.Retention <= 0 {
		o.Retention = 10 * time.Minute
	}
	if o.ConcurrentSpawnLimit == 0 {
		o.ConcurrentSpawnLimit = 100
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Manager is a controller for a hub's servers, built only on the spawner
// package's exported API. A Manager is safe for concurrent use.
type Manager struct {
	opts    Options
	factory *spawner.Factory
	cfg     spawner.Config // the factory's, defaulted
	lease   *leaseConfig   // nil without LeaderElection
	metrics *metrics
	// reconciles counts the servers the workers reconciled (tests check
	// that a spawn costs none).
	reconciles atomic.Int64
	// resyncs counts the resync passes (tests wait for them).
	resyncs atomic.Int64
	// untrustedSeen are the UIDs of pods already reported as claiming a
	// server where its configuration does not put it (trusted).
	untrustedMu   sync.Mutex
	untrustedSeen map[types.UID]struct{}

	mu      sync.Mutex // guards the fields below, up to ready
	servers map[serverKey]*entry
	// started is set by Start, which runs once.
	started bool
	// running is true from Start's set-up to its shutdown.
	running bool
	// leading is true while this replica runs servers: during a term of
	// its lease, or from recovery to shutdown without LeaderElection.
	// Operations begin only while it is set.
	leading bool
	// ops are the operations in flight; opsDone counts them. No
	// operation begins once leading is unset, so a term's end can wait
	// for them.
	ops      map[*operation]struct{}
	opsDone  sync.WaitGroup
	watchers map[*watcher]struct{}
	queue    workqueue.TypedRateLimitingInterface[serverKey]
	pods     *podSet
	// log is Start's logger (from its ctx), with "manager" as its name.
	log logr.Logger

	// leaseMu guards leaseErr and leaseErrSince: the last failed call on
	// the Lease (Health), reported by the elector's goroutine.
	leaseMu       sync.Mutex
	leaseErr      error
	leaseErrSince time.Time
	// busy counts workers inside a reconcile; lastTurn is when a worker
	// last took or finished one (UnixNano): Live's stall check.
	busy     atomic.Int32
	lastTurn atomic.Int64

	// ready is closed once Start has recovered the servers in the
	// cluster; calls wait for it.
	ready chan struct{}

	slots chan struct{} // start slots (ConcurrentSpawnLimit)
	// waiting counts starts queued for a slot, for their position.
	waitingMu sync.Mutex
	waiting   []*entry
}

type serverKey struct{ user, server string }

func keyOf(s naming.Server) serverKey { return serverKey{s.Username, s.Servername} }

// entry is one server; mu guards its fields.
type entry struct {
	mu      sync.Mutex
	key     serverKey
	sp      *spawner.Spawner
	status  Status
	stream  *spawner.Stream // the current (or last) operation's progress
	op      *operation
	changed time.Time // when the phase last changed, for retention
	// forgotten is set when the entry leaves the Manager; a caller that
	// still holds it looks the server up again.
	forgotten bool
	// readyVersion is the pod version the last start or resume found
	// ready, while the phase is still the one set from it: see runStart.
	readyVersion string
}

// opKind is what an operation does.
type opKind string

const (
	opStart  opKind = "start"
	opResume opKind = "resume"
	opStop   opKind = "stop"
	opDelete opKind = "delete"
)

// starts reports whether the operation follows a pod to readiness.
func (k opKind) starts() bool { return k == opStart || k == opResume }

// operation is a start, resume, stop or deletion in flight. Its context
// belongs to the goroutine that runs it; cancel ends it.
type operation struct {
	kind   opKind
	cancel context.CancelCauseFunc
	done   chan struct{}
	// created is closed once a start's pod exists in the cluster (at
	// once for a resume): from then on a new leader or a restarted
	// Manager finds and resumes it, so a term's end may detach it.
	// queued is closed when a start has to wait for a start slot.
	created, queued         chan struct{}
	createdOnce, queuedOnce sync.Once
}

func (op *operation) markCreated() { op.createdOnce.Do(func() { close(op.created) }) }
func (op *operation) markQueued()  { op.queuedOnce.Do(func() { close(op.queued) }) }

func (op *operation) isCreated() bool {
	select {
	case <-op.created:
		return true
	default:
		return false
	}
}

// maxUntrustedSeen bounds the pods remembered as reported untrusted.
const maxUntrustedSeen = 10000

// New creates a Manager; Start runs it. The configuration is checked
// here, once, for every server the Manager will run, and so is
// LeaderElection.
func New(opts Options) (*Manager, error) {
	opts.defaults()
	f, err := spawner.NewFactory(spawner.Options{Client: opts.Client, Registry: opts.Registry, Config: opts.Config, Hooks: opts.Hooks, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	if _, _, open := f.Namespaces(); open != "" {
		return nil, fmt.Errorf("manager: %s lets the user type the namespace (\"{value}\" in its namespace override): the Manager can neither watch nor trust a namespace it cannot list in advance", open)
	}
	m := &Manager{opts: opts, factory: f, cfg: f.Config(), servers: map[serverKey]*entry{}, ops: map[*operation]struct{}{},
		untrustedSeen: map[types.UID]struct{}{},
		watchers:      map[*watcher]struct{}{}, ready: make(chan struct{}), log: logr.Discard()}
	if opts.LeaderElection != nil {
		if m.lease, err = opts.LeaderElection.config(opts.Client, m.cfg.Namespace, m.observeLease); err != nil {
			return nil, err
		}
	}
	if opts.ConcurrentSpawnLimit > 0 {
		m.slots = make(chan struct{}, opts.ConcurrentSpawnLimit)
	}
	m.metrics = newMetrics(m)
	if opts.Registerer != nil {
		if err := m.metrics.register(opts.Registerer); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Config returns the Manager's base configuration (with defaults).
func (m *Manager) Config() spawner.Config { return m.cfg }

// Factory returns the Factory the Manager makes its Spawners with, for a
// hub that plans or inspects servers the way the Manager does.
func (m *Manager) Factory() *spawner.Factory { return m.factory }

// WaitReady waits, bounded by ctx, until Start has recovered the
// cluster's servers: from then on Status, List and Watch report them. It
// is ErrNotRunning if ctx ends first or the Manager is not running (Start
// failed or returned). Every other call waits for this itself; a hub
// calls it to hold its own readiness back.
func (m *Manager) WaitReady(ctx context.Context) error { return m.waitReady(ctx) }

// waitReady waits, bounded by ctx, until the Manager runs and has
// recovered the cluster's servers.
func (m *Manager) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotRunning, context.Cause(ctx))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return ErrNotRunning
	}
	return nil
}

// waitLeading is waitReady for calls that change servers: they also
// need this replica to lead.
func (m *Manager) waitLeading(ctx context.Context) error {
	if err := m.waitReady(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leading {
		return ErrNotLeader
	}
	return nil
}

// lookup returns the entry of s, or nil.
func (m *Manager) lookup(s naming.Server) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.servers[keyOf(s)]
}

// entries is every entry the Manager knows now.
func (m *Manager) entries() []*entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*entry, 0, len(m.servers))
	for _, e := range m.servers {
		out = append(out, e)
	}
	return out
}

// entryFor returns the entry of s, creating a stopped one.
func (m *Manager) entryFor(s naming.Server) (*entry, error) {
	return m.entryWith(s, nil)
}

// entryWith is entryFor with a Spawner of s for a new entry (nil: made
// here), so that Spawn, which made one to plan with, does not name the
// server twice.
func (m *Manager) entryWith(s naming.Server, sp *spawner.Spawner) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.servers[keyOf(s)]; ok {
		return e, nil
	}
	if sp == nil {
		var err error
		if sp, err = m.factory.New(s); err != nil {
			return nil, err
		}
	}
	e := &entry{key: keyOf(s), sp: sp, changed: m.opts.Clock.Now()}
	e.status = Status{User: s.Username, Server: s.Servername, Phase: PhaseStopped, State: sp.State()}
	m.servers[e.key] = e
	return e, nil
}

// lockedEntry is entryWith, returning the entry locked: never one that
// retention has forgotten meanwhile.
func (m *Manager) lockedEntry(s naming.Server, sp *spawner.Spawner) (*entry, error) {
	for {
		e, err := m.entryWith(s, sp)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		if !e.forgotten {
			return e, nil
		}
		e.mu.Unlock()
		sp = nil // it may have been the forgotten entry's
	}
}

// setPhaseLocked changes e's phase (e.mu held) and tells the watchers.
func (m *Manager) setPhaseLocked(e *entry, p Phase) {
	if e.status.Phase != p {
		e.changed = m.opts.Clock.Now()
	}
	if e.status.Phase != p && m.log.Enabled() { // the arguments cost allocations
		m.log.Info("phase", "user", e.key.user, "server", e.key.server, "from", e.status.Phase, "to", p,
			"reason", e.status.Reason, "url", e.status.URL)
	}
	e.status.Phase = p
	e.status.Ready = p == PhaseRunning
	e.status.State = e.sp.State()
	m.notify(e.status)
}

// beginOpLocked registers an operation on e (e.mu held) and returns it
// with its context, derived from parent's values but not its
// cancellation: the operation ends when it is done or cancelled. It
// returns nil, and registers nothing, unless this replica leads.
func (m *Manager) beginOpLocked(parent context.Context, e *entry, kind opKind) (*operation, context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leading {
		return nil, nil
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	op := &operation{kind: kind, cancel: cancel, done: make(chan struct{}), created: make(chan struct{}), queued: make(chan struct{})}
	if kind == opResume {
		op.markCreated()
	}
	e.op = op
	e.readyVersion = ""
	m.ops[op] = struct{}{}
	m.opsDone.Add(1)
	return op, ctx
}

// endOp unregisters op once it has ended (e.mu not held).
func (m *Manager) endOp(op *operation) {
	op.cancel(nil)
	close(op.done)
	m.mu.Lock()
	delete(m.ops, op)
	m.mu.Unlock()
	m.opsDone.Done()
}

func (m *Manager) statusOf(e *entry) Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func notFound(s naming.Server) error {
	return fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
}

func intPtr(i int) *int { return &i }

var errAlreadyStarted = errors.New("manager: a Manager runs once; create a new one")
