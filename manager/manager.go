package manager

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/kubespawner"
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
	Config kubespawner.Config
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
	// this long (reason Unschedulable), whatever an autoscaler says.
	// Default: 0, meaning only the configuration's bounds end it
	// (unschedulable_timeout, which waits for an autoscaler on its way,
	// pending_timeout and start_timeout).
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
	// TracerProvider, when set, receives a span per start
	// (spawnkit.spawn: its wait for a start slot, then the Spawner's
	// spawnkit.start with a child per phase) and per stop, under the span
	// of the ctx given to Spawn or Stop; HashNames hashes the names made
	// from the user's (spawner.Options). nil: no spans.
	TracerProvider trace.TracerProvider
	HashNames      bool
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
	tracer *phase.Tracer // nil: no spans
	// recovering is set while recover adopts the servers it finds: their
	// phase lines are then at V(1), and one summary line says the rest.
	recovering atomic.Bool
	opts       Options
	// cells are the clusters, the default first; byName finds them.
	cells  []*cell
	byName map[string]*cell
	// multi is true with several clusters: only then are servers
	// indexed across clusters (claims) and placed.
	multi   bool
	claims  claimIndex
	factory *spawner.Factory   // the default cluster's
	cfg     kubespawner.Config // the factory's, defaulted
	lease   *leaseConfig       // nil without LeaderElection
	metrics *metrics
	// reconciles counts the servers the workers reconciled (tests check
	// that a spawn costs none).
	reconciles atomic.Int64
	// resyncs counts the resync passes (tests wait for them).
	resyncs atomic.Int64
	// streamKept is the const streamKept (shorter in tests).
	streamKept time.Duration
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
	// cluster, or once its set-up has failed (running unset): calls wait
	// for it. Start alone closes it, in one place.
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

// New creates a Manager; Start runs it. The configuration is checked
// here, once, for every server the Manager will run, and so is
// LeaderElection.
func New(opts Options) (*Manager, error) {
	opts.defaults()
	cells, err := newCells(&opts)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, cells: cells, streamKept: streamKept, byName: map[string]*cell{}, multi: len(opts.Clusters) > 0,
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
	m.tracer = phase.NewTracer(opts.TracerProvider, opts.HashNames)
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
func (m *Manager) Config() kubespawner.Config { return m.cfg }

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
