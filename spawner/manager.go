package spawner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Phase is where a managed server is in the Manager's state machine:
//
//	stopped ──Spawn──▶ starting ──ready──▶ running
//	   ▲                  │ │                 │
//	   │                  │ └──fails──▶ failed ◀── exits, is evicted,
//	   │                  │                 │      OOM-killed, deleted
//	   └──── stopping ◀───┴──Stop───────────┴──── (and from running)
//
// Spawn of a starting or running server changes nothing; Stop of a
// starting server cancels the start first. Every transition happens under
// the server's lock.
type Phase string

const (
	PhaseStopped  Phase = "stopped"
	PhaseStarting Phase = "starting"
	PhaseRunning  Phase = "running"
	PhaseStopping Phase = "stopping"
	PhaseFailed   Phase = "failed"
)

// ServerStatus is a managed server's state. It is JSON-serialisable.
type ServerStatus struct {
	User   string `json:"user"`
	Server string `json:"server"` // "" is the user's default server
	Phase  Phase  `json:"phase"`
	URL    string `json:"url,omitempty"`
	Ready  bool   `json:"ready"`
	// ExitCode follows KubeSpawner's poll: nil while the server is
	// starting or running (or stopping), the notebook container's exit
	// code once it exited, 1 when its pod is gone.
	ExitCode  *int       `json:"exit_code"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	// Reason and Message say why the server failed or stopped: a
	// *StartError's reason (ErrImagePull, Timeout, Cancelled, ...), or
	// Exited, OOMKilled, Evicted, PodDeleted, Unschedulable.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	State   State  `json:"state"`
}

// ServerOf returns the server a status is about.
func (st ServerStatus) ServerOf() naming.Server {
	return naming.Server{Username: st.User, Servername: st.Server, UserID: st.State.UserID}
}

// SpawnOptions are what a hub passes for one start.
type SpawnOptions struct {
	// UserOptions select a profile and its options (see Config.Resolve).
	UserOptions map[string]string
	// Env, Cmd, Args, SSL and UserID are passed on as StartOptions.
	Env       []corev1.EnvVar
	Cmd, Args []string
	SSL       *SSL
	UserID    int64
}

// ReasonUnschedulable is the reason of a start ended by
// UnschedulableTimeout.
const ReasonUnschedulable = "Unschedulable"

// Manager errors.
var (
	// ErrNotFound: the Manager knows no such server.
	ErrNotFound = errors.New("spawner: no such server")
	// ErrBusy: the server is stopping (or, for Spawn, being deleted by
	// DeleteForever); try again when it has stopped.
	ErrBusy = errors.New("spawner: the server is stopping")
	// ErrNotRunning: the Manager is not running (Start has not been
	// called, or has returned).
	ErrNotRunning = errors.New("spawner: the manager is not running (call Start)")
	// ErrNotLeader: this replica is a standby; the leader runs servers.
	ErrNotLeader = errors.New("spawner: this manager is not the leader")
	// ErrUnschedulable ends a start whose pod stayed unschedulable for
	// UnschedulableTimeout.
	ErrUnschedulable = errors.New("the pod could not be scheduled within the manager's UnschedulableTimeout")
	// ErrShutdown is the cause with which a shutting-down Manager cancels
	// its operations. It wraps ErrDetach: starts in flight leave their
	// pods for the next Manager to resume.
	ErrShutdown = fmt.Errorf("spawner: the manager is shutting down: %w", ErrDetach)
)

// ManagerOptions configure NewManager. Client and Registry are required;
// the zero value of every other field means its default.
type ManagerOptions struct {
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Config is the base configuration; Spawn resolves profiles on it.
	Config Config
	Hooks  Hooks
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
	State  State
}

func (o *ManagerOptions) defaults() {
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

// Manager is a controller for a hub's servers, built only on the
// Spawner's exported API: background starts with an event stream per
// server, phases driven by pod informer events through a rate-limited
// workqueue, recovery of every server from the cluster when it starts, a
// status-change stream (Watch), and optional leader election. A Manager
// is safe for concurrent use.
type Manager struct {
	opts    ManagerOptions
	base    *base
	metrics *managerMetrics
	// reconciles counts the servers the workers reconciled (tests check
	// that a spawn costs none).
	reconciles atomic.Int64

	mu      sync.Mutex // guards servers, run, leading, watchers
	servers map[serverKey]*entry
	// run is the context of the running controller; nil when not
	// running. Operations derive from it, so a shutdown cancels them
	// with ErrShutdown.
	run      context.Context
	leading  bool
	watchers map[*watcher]struct{}
	// log is Start's logger (from its ctx), with "manager" as its name.
	log logr.Logger
	// ready is closed once Start has recovered the servers in the
	// cluster (or, as a standby, synced); calls wait for it.
	ready chan struct{}
	// ops counts background operations, waited for by Start on return.
	// closing (guarded by mu) is set by Start before it waits for them:
	// from then on no operation begins, so none outlives Start.
	ops     sync.WaitGroup
	closing bool

	queue workqueue.TypedRateLimitingInterface[serverKey]
	pods  *reflector.Pods
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
	sp      *Spawner
	status  ServerStatus
	stream  *Stream // the current (or last) operation's progress
	op      *operation
	changed time.Time // when the phase last changed, for retention
	// forgotten is set when the entry leaves the Manager; a caller that
	// still holds it looks the server up again.
	forgotten bool
	// readyVersion is the pod version the last start or resume found
	// ready, while the phase is still the one set from it: see runStart.
	readyVersion string
}

// operation is a start, resume or stop in flight.
type operation struct {
	kind   string // "start", "resume", "stop"
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// NewManager creates a Manager; Start runs it.
func NewManager(opts ManagerOptions) (*Manager, error) {
	opts.defaults()
	b, err := newBase(Options{Client: opts.Client, Registry: opts.Registry, Config: opts.Config, Hooks: opts.Hooks, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, base: b, servers: map[serverKey]*entry{}, watchers: map[*watcher]struct{}{}, ready: make(chan struct{}),
		log: logr.Discard()}
	if opts.ConcurrentSpawnLimit > 0 {
		m.slots = make(chan struct{}, opts.ConcurrentSpawnLimit)
	}
	m.metrics = newManagerMetrics(m)
	if opts.Registerer != nil {
		if err := m.metrics.register(opts.Registerer); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Config returns the Manager's base configuration (with defaults).
func (m *Manager) Config() Config { return m.base.cfg }

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
	if m.run == nil {
		return ErrNotRunning
	}
	return nil
}

// leaderContext is waitReady for calls that change servers: it also
// needs leadership, and returns the controller's context.
func (m *Manager) leaderContext(ctx context.Context) (context.Context, error) {
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leading {
		return nil, ErrNotLeader
	}
	return m.run, nil
}

// lookup returns the entry of s, or nil.
func (m *Manager) lookup(s naming.Server) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.servers[keyOf(s)]
}

// entryFor returns the entry of s, creating a stopped one.
func (m *Manager) entryFor(s naming.Server) (*entry, error) {
	return m.entryWith(s, nil)
}

// entryWith is entryFor with a fresh Spawner of s (nil: made here) for a
// new entry, so that a caller that made one already (Spawn's probe) does
// not render the names twice.
func (m *Manager) entryWith(s naming.Server, fresh *Spawner) (*entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.servers[keyOf(s)]; ok {
		return e, nil
	}
	sp := fresh
	if sp == nil {
		var err error
		if sp, err = m.base.newSpawner(s); err != nil {
			return nil, err
		}
	}
	e := &entry{key: keyOf(s), sp: sp, stream: nil, changed: m.opts.Clock.Now()}
	e.status = ServerStatus{User: s.Username, Server: s.Servername, Phase: PhaseStopped, State: sp.State()}
	m.servers[e.key] = e
	return e, nil
}

// setPhase changes e's phase (e.mu held) and tells the watchers.
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

// Spawn starts a server in the background and returns at once with its
// status; Events follows the start and Watch or Status report its
// outcome. A server that is already starting or running is not touched:
// Spawn returns its status and started false. A server that is stopping,
// or that DeleteForever is deleting, is ErrBusy. Bad user options fail here (*ProfileError), before
// anything is created. The start outlives ctx and ends with the Manager
// (detached, for the next Manager to resume) or with Stop.
func (m *Manager) Spawn(ctx context.Context, s naming.Server, opts SpawnOptions) (ServerStatus, bool, error) {
	run, err := m.leaderContext(ctx)
	if err != nil {
		return ServerStatus{}, false, err
	}
	if e := m.lookup(s); e != nil {
		// Starting or running: the current status, whatever the options.
		if st := m.statusOf(e); st.Phase == PhaseStarting || st.Phase == PhaseRunning {
			return st, false, nil
		}
	}
	sopts := StartOptions{UserOptions: opts.UserOptions, Env: opts.Env, Cmd: opts.Cmd, Args: opts.Args, SSL: opts.SSL, UserID: opts.UserID}
	if sopts.UserID == 0 {
		sopts.UserID = s.UserID
	}
	// Bad user options, and anything else a start could only fail on
	// later, fail here: before the Manager knows the server.
	probe, err := m.base.newSpawner(s)
	if err != nil {
		return ServerStatus{}, false, err
	}
	// fresh is the probe while it holds no state of an entry's: then it
	// can become a new entry's Spawner.
	fresh := probe
	if e := m.lookup(s); e != nil {
		probe.LoadState(e.sp.State())
		fresh = nil
	}
	// The rendering is kept for the start, which then renders only if
	// the names in use change meanwhile.
	startID, st := newStartID(), probe.State()
	objs, err := plan(ctx, s, &probe.b.cfg, &probe.names, &st, &sopts, startID)
	if err != nil {
		return ServerStatus{}, false, &StartError{Server: s, Step: StepPlan, Reason: ReasonInvalid, Err: err}
	}
	sopts.planned = &planned{objects: objs, startID: startID, server: s, names: namesOf(st)}
	e, err := m.entryWith(s, fresh)
	if err != nil {
		return ServerStatus{}, false, err
	}
	e.mu.Lock()
	if e.forgotten {
		// Retention removed it meanwhile: start over on a new entry.
		e.mu.Unlock()
		return m.Spawn(ctx, s, opts)
	}
	defer e.mu.Unlock()
	switch e.status.Phase {
	case PhaseStarting, PhaseRunning:
		return e.status, false, nil
	case PhaseStopping:
		return e.status, false, ErrBusy
	}
	if e.op != nil {
		// DeleteForever is deleting the server.
		return e.status, false, fmt.Errorf("%w: server %q of user %q is being deleted", ErrBusy, s.Servername, s.Username)
	}
	if e.sp.isClosed() {
		return ServerStatus{}, false, ErrNotRunning
	}
	op := m.beginOpLocked(run, e, "start")
	if op == nil {
		return ServerStatus{}, false, ErrNotRunning
	}
	now := m.opts.Clock.Now()
	e.status.StartedAt, e.status.ReadyAt, e.status.ExitCode = &now, nil, nil
	e.status.URL, e.status.Reason, e.status.Message = "", "", ""
	e.stream = NewStream()
	m.setPhaseLocked(e, PhaseStarting)
	sopts.OnProgress, sopts.inlineProgress = e.stream.Publish, true
	stream, sp := e.stream, e.sp
	m.metrics.spawnsInFlight.Inc()
	go m.runStart(e, op, sp, stream, func(ctx context.Context) (string, error) {
		if err := m.takeSlot(ctx, e, stream); err != nil {
			reason := ReasonCancelled
			if errors.Is(err, ErrDetach) {
				reason = ReasonDetached
			}
			return "", &StartError{Server: sp.Server(), Step: StepPlan, Reason: reason, Err: err}
		}
		defer m.giveSlot()
		return sp.Start(ctx, sopts)
	})
	return e.status, true, nil
}

// beginOpLocked registers an operation on e (e.mu held), with a context
// derived from the controller's.
// It returns nil, and registers nothing, once the Manager is shutting
// down.
func (m *Manager) beginOpLocked(run context.Context, e *entry, kind string) *operation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing || m.run == nil {
		return nil
	}
	ctx, cancel := context.WithCancelCause(run)
	op := &operation{kind: kind, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	e.op = op
	e.readyVersion = ""
	m.ops.Add(1)
	return op
}

// runStart runs a start or resume and applies its outcome. It owns the
// operation and ends with it.
func (m *Manager) runStart(e *entry, op *operation, sp *Spawner, stream *Stream, do func(ctx context.Context) (string, error)) {
	defer m.ops.Done()
	defer close(op.done)
	defer op.cancel(nil)
	// podChanged skipped the pod's changes while the start ran: the
	// server is reconciled from the cache once it has ended (after the
	// phase below is set and the operation is gone), unless it succeeded
	// and the cache still holds the very version it found ready (settled,
	// below). Not a detached start (the
	// Manager is shutting down or lost its leadership): its pod, if any,
	// is the next leader's to follow and judge; a follower learns of it
	// from the pod's next change or the resync, as before.
	detached, settled := false, false
	defer func() {
		if !detached && !settled {
			m.enqueue(e.key)
		}
	}()
	began := m.opts.Clock.Now()
	url, err := do(op.ctx)
	if op.kind == "start" {
		m.metrics.spawnsInFlight.Dec()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.op == op {
		e.op = nil
	}
	if err == nil && e.status.Phase == PhaseStopping {
		// The start succeeded just as Stop cancelled it: Stop owns the
		// phase and is deleting the pod; stopping never goes back to
		// running.
		m.metrics.observeSpawn(op.kind, "failed", ReasonCancelled, m.opts.Clock.Now().Sub(began))
		return
	}
	if err == nil {
		now := m.opts.Clock.Now()
		e.status.URL, e.status.ReadyAt = url, &now
		m.metrics.observeSpawn(op.kind, "ready", "", now.Sub(began))
		m.setPhaseLocked(e, PhaseRunning)
		settled = m.settledLocked(e, sp)
		return
	}
	var serr *StartError
	reason := ""
	if errors.As(err, &serr) {
		reason = serr.Reason
	}
	if errors.Is(err, ErrUnschedulable) {
		reason = ReasonUnschedulable
	}
	m.metrics.observeSpawn(op.kind, "failed", reason, m.opts.Clock.Now().Sub(began))
	switch {
	case reason == ReasonDetached:
		// The Manager is shutting down: the pod is left starting for the
		// next Manager, and this one reports what it knows.
		detached = true
		stream.Close()
		return
	case e.status.Phase == PhaseStopping:
		// Stop cancelled the start and now owns the phase.
		return
	}
	e.status.Reason, e.status.Message = reason, err.Error()
	e.status.ExitCode = intPtr(1)
	m.setPhaseLocked(e, PhaseFailed)
}

// settledLocked (e.mu held, the operation just ended) reports whether
// the informer's store still holds the version of the pod that sp's start
// or resume found ready, and then records it in e.readyVersion. The store
// changes before the informer's handler runs, so no later version can
// have reached podChanged: every later one finds the operation gone and
// is reconciled, and podChanged lets that version itself pass when its
// notification comes after this. A start that succeeded thus costs no
// reconcile; any other outcome is reconciled.
func (m *Manager) settledLocked(e *entry, sp *Spawner) bool {
	uid, version, ns, name := sp.readyPod()
	if version == "" || m.pods == nil {
		return false
	}
	// Operations begin only once the Manager is ready (its informer has
	// synced), so this read never waits under e.mu.
	pod, ok, err := m.pods.GetByKey(context.Background(), reflector.PodKey(ns, name))
	if err != nil || !ok || pod.UID != uid || pod.ResourceVersion != version {
		return false
	}
	e.readyVersion = version
	return true
}

func intPtr(i int) *int { return &i }

// takeSlot waits for a start slot, reporting the queue position.
func (m *Manager) takeSlot(ctx context.Context, e *entry, stream *Stream) error {
	if m.slots == nil {
		return nil
	}
	select {
	case m.slots <- struct{}{}:
		return nil
	default:
	}
	m.waitingMu.Lock()
	m.waiting = append(m.waiting, e)
	pos := len(m.waiting)
	m.waitingMu.Unlock()
	defer func() {
		m.waitingMu.Lock()
		m.waiting = slices.DeleteFunc(m.waiting, func(w *entry) bool { return w == e })
		m.waitingMu.Unlock()
	}()
	stream.Publish(ProgressEvent{Message: fmt.Sprintf("Waiting for a start slot (%d starts in flight; position %d in the queue)", cap(m.slots), pos),
		Time: m.opts.Clock.Now()})
	select {
	case m.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (m *Manager) giveSlot() {
	if m.slots != nil {
		<-m.slots
	}
}

// StopOptions for the Manager are the Spawner's: Now for grace 0.

// Stop stops a server: a start in flight is cancelled (its pod deleted,
// its stream ends with reason Cancelled), then the pod is deleted and
// Stop waits, bounded by ctx, until it is gone. Stopping a stopped server
// is success; a Stop while another Stop runs waits for it. Unknown
// servers are ErrNotFound.
func (m *Manager) Stop(ctx context.Context, s naming.Server, opts StopOptions) (ServerStatus, error) {
	if _, err := m.leaderContext(ctx); err != nil {
		return ServerStatus{}, err
	}
	e := m.lookup(s)
	if e == nil {
		return ServerStatus{}, fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
	}
	e.mu.Lock()
	if e.op != nil && (e.status.Phase == PhaseStopping || e.op.kind == "delete") {
		// Another Stop, or DeleteForever of this stopped server: wait.
		done := e.op.done
		e.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return m.statusOf(e), context.Cause(ctx)
		}
		return m.statusOf(e), nil
	}
	prev := e.op
	m.mu.Lock()
	run := m.run
	m.mu.Unlock()
	var op *operation
	if run != nil {
		op = m.beginOpLocked(run, e, "stop")
	}
	if op == nil {
		e.mu.Unlock()
		return ServerStatus{}, ErrNotRunning
	}
	if prev != nil {
		prev.cancel(ErrStartCancelled)
	}
	stream := NewStream()
	e.stream = stream
	m.setPhaseLocked(e, PhaseStopping)
	sp := e.sp
	e.mu.Unlock()

	defer m.ops.Done()
	defer close(op.done)
	defer op.cancel(nil)
	opts.OnProgress = stream.Publish
	err := sp.Stop(ctx, opts)
	if prev != nil {
		<-prev.done // the start has cleaned up and returned
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.op == op {
		e.op = nil
	}
	if err != nil {
		e.status.Reason, e.status.Message = "StopFailed", err.Error()
		m.setPhaseLocked(e, PhaseFailed)
		return e.status, err
	}
	e.status.URL, e.status.ReadyAt = "", nil
	e.status.ExitCode = intPtr(1) // as KubeSpawner's poll: no pod
	e.status.Reason, e.status.Message = "Stopped", "stopped by the hub"
	m.setPhaseLocked(e, PhaseStopped)
	return e.status, nil
}

// DeleteForever deletes a stopped server's claim (see
// Spawner.DeleteForever) and forgets the server. A server that is not
// stopped or failed is ErrBusy.
func (m *Manager) DeleteForever(ctx context.Context, s naming.Server) error {
	run, err := m.leaderContext(ctx)
	if err != nil {
		return err
	}
	e := m.lookup(s)
	if e == nil {
		return fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
	}
	e.mu.Lock()
	if p := e.status.Phase; p != PhaseStopped && p != PhaseFailed || e.op != nil {
		e.mu.Unlock()
		return fmt.Errorf("%w: stop server %q of user %q before deleting it", ErrBusy, s.Servername, s.Username)
	}
	// The deletion is an operation: a Spawn meanwhile is ErrBusy rather
	// than a start whose claim is deleted under it, or whose Spawner is
	// closed when the server is forgotten.
	op := m.beginOpLocked(run, e, "delete")
	if op == nil {
		e.mu.Unlock()
		return ErrNotRunning
	}
	sp := e.sp
	e.mu.Unlock()
	defer m.ops.Done()
	defer close(op.done)
	defer op.cancel(nil)
	err = sp.DeleteForever(ctx)
	if err == nil {
		m.forget(e) // before the operation ends: nothing can start on e
	}
	e.mu.Lock()
	if e.op == op {
		e.op = nil
	}
	e.mu.Unlock()
	return err
}

// forget removes an entry that is still idle (stopped or failed, no
// operation) and closes its Spawner.
func (m *Manager) forget(e *entry) {
	e.mu.Lock()
	if e.forgotten || e.op != nil || (e.status.Phase != PhaseStopped && e.status.Phase != PhaseFailed) {
		e.mu.Unlock()
		return
	}
	e.forgotten = true
	m.mu.Lock() // lock order: an entry's lock, then the Manager's
	if m.servers[e.key] == e {
		delete(m.servers, e.key)
	}
	m.mu.Unlock()
	e.mu.Unlock()
	e.sp.Close()
}

func (m *Manager) statusOf(e *entry) ServerStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// Status reports one server from the Manager's state (no API call).
// Unknown servers are ErrNotFound. Before Start has recovered the
// cluster's servers it returns ErrNotRunning rather than a wrong answer.
func (m *Manager) Status(s naming.Server) (ServerStatus, error) {
	select {
	case <-m.ready:
	default:
		return ServerStatus{}, ErrNotRunning
	}
	e := m.lookup(s)
	if e == nil {
		return ServerStatus{}, fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
	}
	return m.statusOf(e), nil
}

// Poll checks a server against the cache with KubeSpawner's poll
// contract (running: ExitCode nil; exited: its code; gone: 1), updates
// the Manager's state with what it finds, and returns the status. A
// stopped pod is deleted when delete_stopped_pods is on.
func (m *Manager) Poll(ctx context.Context, s naming.Server) (ServerStatus, error) {
	if err := m.waitReady(ctx); err != nil {
		return ServerStatus{}, err
	}
	e := m.lookup(s)
	if e == nil {
		return ServerStatus{}, fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
	}
	if err := m.observe(ctx, e); err != nil {
		return m.statusOf(e), err
	}
	return m.statusOf(e), nil
}

// List reports every server the Manager knows, sorted by user and
// server; never nil.
func (m *Manager) List() []ServerStatus {
	m.mu.Lock()
	entries := make([]*entry, 0, len(m.servers))
	for _, e := range m.servers {
		entries = append(entries, e)
	}
	m.mu.Unlock()
	out := make([]ServerStatus, 0, len(entries))
	for _, e := range entries {
		out = append(out, m.statusOf(e))
	}
	slices.SortFunc(out, func(a, b ServerStatus) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out
}

// Events streams the server's current (or last) operation from its
// beginning, ending with its final event; the channel closes then or
// when ctx ends. Any number of readers each get the whole stream.
// Unknown servers are ErrNotFound; a server with no operation yet gives a
// closed channel.
func (m *Manager) Events(ctx context.Context, s naming.Server) (<-chan ProgressEvent, error) {
	return m.EventsFrom(ctx, s, 0)
}

// EventsFrom is Events starting after the first n events (to resume a
// stream a client has read n events of).
func (m *Manager) EventsFrom(ctx context.Context, s naming.Server, n int) (<-chan ProgressEvent, error) {
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	e := m.lookup(s)
	if e == nil {
		return nil, fmt.Errorf("%w: server %q of user %q", ErrNotFound, s.Servername, s.Username)
	}
	e.mu.Lock()
	st := e.stream
	e.mu.Unlock()
	if st == nil {
		ch := make(chan ProgressEvent)
		close(ch)
		return ch, nil
	}
	return st.Events(ctx, n), nil
}
