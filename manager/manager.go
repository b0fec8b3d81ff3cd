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

// Options configure New. Client and Registry (one cluster) or Clusters
// (several) are required; the zero value of every other field means its
// default.
type Options struct {
	// Client and Registry are the one cluster of a Manager without
	// Clusters: it is unnamed, and its servers' objects, State and
	// Status name no cluster.
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Clusters, instead of Client and Registry, are the clusters the
	// Manager runs servers in, each with its own client (and rate
	// limits), Registry and health; the first is the default. See
	// Cluster and the package documentation's "Several clusters".
	Clusters []Cluster
	// Placement, when set, picks a start's clusters in order of
	// preference (the first healthy one takes the start): a Go hub's
	// rule, such as the least loaded cluster or one by user. When the
	// resolved profile names clusters (kubernetes_cluster), Placement
	// picks among them (PlacementRequest.Profile): a cluster outside
	// them is an error. Without Placement, kubernetes_cluster decides,
	// else the cluster the server last ran in, else the default.
	Placement func(ctx context.Context, req PlacementRequest) ([]string, error)
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
	// position as progress. Default: 100. Negative means no bound. With
	// several clusters the bound is per cluster: starts that wait in one
	// (an API server away, slow image pulls) never hold back another's.
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
	// annotations. Such a pod has no naming.AnnotationState: the server's state
	// is its name and namespace, the port its "notebook-port" container
	// port (else Config's port), and the claim the hub's State names
	// (Seed: KubeSpawner's pvc_name). It is then recovered, polled and
	// stopped like any other server; one under another pod name than
	// today's pod_name_template is trusted only through the hub's State
	// (Seed). Default: false, KubeSpawner's pods are left alone (a Seed
	// naming one is ErrStateRefused).
	AdoptKubeSpawner bool
	// ClusterDownAfter is how long a cluster's informers must fail
	// without a success before the cluster is unavailable: its servers
	// are reported PhaseUnknown and starts and stops in it fail with
	// ErrClusterUnavailable. With several clusters only. Default: 3
	// seconds.
	ClusterDownAfter time.Duration
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
	if o.ClusterDownAfter <= 0 {
		o.ClusterDownAfter = 3 * time.Second
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
	opts Options
	// cells are the clusters, the default first; byName finds them.
	cells  []*cell
	byName map[string]*cell
	// multi is true with several clusters: only then are servers
	// indexed across clusters (claims) and placed.
	multi   bool
	claims  claimIndex
	factory *spawner.Factory // the default cluster's
	cfg     spawner.Config   // the factory's, defaulted
	lease   *leaseConfig     // nil without LeaderElection
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
	// ran is set once Start has begun running (with running); startErr
	// is Start's error once it returned. Guarded by mu.
	ran      bool
	startErr error
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
	// led is closed while leading is set (a new, open one replaces it
	// when a term ends; guarded by mu); stopped is closed when Start
	// returns. WaitLeading waits on both.
	led     chan struct{}
	stopped chan struct{}

	// waiting are the starts queued for a slot (each cluster has its
	// own, cell.slots), for their position.
	waitingMu sync.Mutex
	waiting   []*entry
}

type serverKey struct{ user, server string }

func keyOf(s naming.Server) serverKey { return serverKey{s.Username, s.Servername} }

// entry is one server; mu guards its fields.
type entry struct {
	mu  sync.Mutex
	key serverKey
	// cell is the cluster the server is in; sp is a Spawner of its
	// Factory. Both change together, under mu, only when the server is
	// idle and moves (Spawn places it elsewhere, or reconcile finds its
	// only pod in another cluster).
	cell *cell
	sp   *spawner.Spawner
	// splitBrain, when set, names the pods of this server found in more
	// than one cluster: nothing acts on it until one is gone.
	splitBrain string
	// seeded is set while the server's only record is its Seed: with
	// several clusters, a cluster not seen since Start (or unavailable)
	// may hold its pod, so it is reported unknown, not stopped, until
	// the cluster's cache has been looked at (apply) or a start begins.
	seeded  bool
	status  Status
	stream  *spawner.Stream // the current (or last) operation's progress
	op      *operation
	changed time.Time // when the phase last changed, for retention
	// forgotten is set when the entry leaves the Manager; a caller that
	// still holds it looks the server up again.
	forgotten bool
	// queuedIn is the cluster whose start slot the entry's start waits
	// for (guarded by Manager.waitingMu, not mu).
	queuedIn *cell
	// readyVersion is the pod version the last start or resume found
	// ready, while the phase is still the one set from it: see runStart.
	readyVersion string
	// hub is the Hub of the last start Spawn accepted (SpawnOptions.Hub),
	// set with hubSet: the Spawner's state records it only once the
	// start has planned, and a second hub asking meanwhile must see whose
	// start it is ("" included).
	hub    string
	hubSet bool
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
	cells, err := newCells(&opts)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, cells: cells, byName: map[string]*cell{}, multi: len(opts.Clusters) > 0,
		factory: cells[0].factory, cfg: cells[0].cfg, servers: map[serverKey]*entry{}, ops: map[*operation]struct{}{},
		untrustedSeen: map[types.UID]struct{}{},
		watchers:      map[*watcher]struct{}{}, ready: make(chan struct{}), led: make(chan struct{}), stopped: make(chan struct{}), log: logr.Discard()}
	for _, c := range cells {
		m.byName[c.name] = c
	}
	if err := m.checkClusterNames(); err != nil {
		return nil, err
	}
	m.claims.init()
	if opts.LeaderElection != nil {
		// The Lease lives in the default cluster.
		if m.lease, err = opts.LeaderElection.config(cells[0].client, m.cfg.Namespace, m.observeLease); err != nil {
			return nil, err
		}
	}
	if opts.ConcurrentSpawnLimit > 0 {
		for _, c := range cells {
			c.slots = make(chan struct{}, opts.ConcurrentSpawnLimit)
		}
	}
	m.metrics = newMetrics(m)
	if m.multi {
		// Up until found otherwise (a cluster that does not sync in
		// time, or fails, is marked down).
		for _, c := range m.cells {
			m.metrics.clusterUp(c.name, true)
		}
	}
	if opts.Registerer != nil {
		if err := m.metrics.register(opts.Registerer); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Config returns the Manager's base configuration (with defaults): the
// default cluster's.
func (m *Manager) Config() spawner.Config { return m.cfg }

// Factory returns the Factory the Manager makes its Spawners with (the
// default cluster's), for a hub that plans or inspects servers the way
// the Manager does. ClusterFactory gives another cluster's.
func (m *Manager) Factory() *spawner.Factory { return m.factory }

// ClusterFactory returns the Factory of the named cluster, or false.
func (m *Manager) ClusterFactory(name string) (*spawner.Factory, bool) {
	c, ok := m.byName[name]
	if !ok {
		return nil, false
	}
	return c.factory, true
}

// WaitReady waits, bounded by ctx, until Start has recovered the
// cluster's servers: from then on Status, List and Watch report them. It
// is ErrNotRunning if ctx ends first or the Manager is not running (Start
// failed or returned; when Start failed before it ran, wrapping Start's
// error). Every other call waits for this itself; a hub
// calls it to hold its own readiness back.
func (m *Manager) WaitReady(ctx context.Context) error { return m.waitReady(ctx) }

// WaitLeading waits, bounded by ctx, until this Manager may change
// servers: it has recovered the cluster's servers (WaitReady) and, with
// LeaderElection, holds the Lease; without LeaderElection it is
// WaitReady. A hub calls it after starting the Manager and before it
// takes requests: Spawn, Stop and DeleteForever wait for recovery but not
// for the Lease (a standby returns ErrNotLeader at once, so that a
// request sent to it can go to the leader instead of hanging), and a
// replica gains the Lease only some time after Start (at once when the
// Lease is free; LeaseDuration after the last renewal when a replica
// that is gone held it without releasing it).
//
// It returns ErrNotLeader (with ctx's cause) when ctx ends before this
// replica leads, and ErrNotRunning when the Manager is not running or
// stops while it waits (Start failed or returned). When Start failed
// before it ran (a cluster too old, a Lease this identity may not use),
// the error wraps Start's too, so a hub that waits in an errgroup beside
// Start reports why whichever returns first. Leading can end at
// any time after it returns (the lease is lost): the calls then return
// ErrNotLeader.
func (m *Manager) WaitLeading(ctx context.Context) error {
	if err := m.waitReady(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	led := m.led
	m.mu.Unlock()
	select {
	case <-led:
		return nil
	case <-m.stopped:
		return ErrNotRunning
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotLeader, context.Cause(ctx))
	}
}

// setLeadingLocked sets leading and opens or closes led with it; mu
// must be held.
func (m *Manager) setLeadingLocked(leading bool) {
	if leading == m.leading {
		return
	}
	m.leading = leading
	if leading {
		close(m.led)
	} else {
		m.led = make(chan struct{})
	}
}

// waitReady waits, bounded by ctx, until the Manager runs and has
// recovered the cluster's servers.
func (m *Manager) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotRunning, context.Cause(ctx))
	}
	m.mu.Lock()
	running, ran := m.running, m.ran
	m.mu.Unlock()
	if running {
		return nil
	}
	if !ran {
		// Start failed before it ran (ready is closed on its way out):
		// its error is moments away.
		select {
		case <-m.stopped:
		case <-ctx.Done():
			return ErrNotRunning
		}
		m.mu.Lock()
		err := m.startErr
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: Start failed: %w", ErrNotRunning, err)
		}
	}
	return ErrNotRunning
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

// entryFor returns the entry of s, creating a stopped one in cluster c.
func (m *Manager) entryFor(s naming.Server, c *cell) (*entry, error) {
	return m.entryWith(s, c, nil)
}

// entryWith is entryFor with a Spawner of s for a new entry (nil: made
// here from c's Factory), so that Spawn, which made one to plan with,
// does not name the server twice. An existing entry is returned as it is,
// in whichever cluster it is.
func (m *Manager) entryWith(s naming.Server, c *cell, sp *spawner.Spawner) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.servers[keyOf(s)]; ok {
		return e, nil
	}
	if sp == nil {
		var err error
		if sp, err = c.factory.New(s); err != nil {
			return nil, err
		}
	}
	e := &entry{key: keyOf(s), cell: c, sp: sp, changed: m.opts.Clock.Now()}
	// Stopped with no pod: exit status 1, as KubeSpawner's poll says of
	// a server without a pod (a server seeded from a hub's State whose
	// pod is gone; a start or an adoption sets its own).
	e.status = Status{User: s.Username, Server: s.Servername, Phase: PhaseStopped, State: sp.State(), ExitCode: intPtr(1)}
	m.servers[e.key] = e
	return e, nil
}

// lockedEntry is entryWith, returning the entry locked: never one that
// retention has forgotten meanwhile.
func (m *Manager) lockedEntry(s naming.Server, c *cell, sp *spawner.Spawner) (*entry, error) {
	for {
		e, err := m.entryWith(s, c, sp)
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
	m.notify(m.viewLocked(e))
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
	return m.viewLocked(e)
}

func notFound(s naming.Server) error {
	return fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
}

// unknown is the error of a call about a server the Manager does not
// know: ErrNotFound, unless (with several clusters) a cluster has not
// been seen since Start, which may hold it: then a
// *ClusterUnavailableError for each such cluster (ErrClusterUnavailable,
// not ErrNotFound), so that a hub polling a server it believes running
// keeps it rather than ending it. Once every cluster has been seen, an
// unknown server is in none of them.
func (m *Manager) unknown(s naming.Server) error {
	if !m.multi {
		return notFound(s)
	}
	var unseen []error
	now := time.Now()
	for _, c := range m.cells {
		c.mu.Lock()
		recovered, down, since := c.recovered, c.down, c.downSince
		c.mu.Unlock()
		if recovered {
			continue
		}
		if !down {
			since = now
		}
		unseen = append(unseen, &ClusterUnavailableError{Cluster: c.name, Since: since})
	}
	if len(unseen) == 0 {
		return notFound(s)
	}
	return fmt.Errorf("manager: server %q of user %q is not known, and a cluster not seen since the Manager started may hold it: %w",
		s.Servername, s.Username, errors.Join(unseen...))
}

func intPtr(i int) *int { return &i }

var errAlreadyStarted = errors.New("manager: a Manager runs once; create a new one")
