package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// SpawnOptions are what a hub passes for one start; they become the
// start's spawner.StartOptions.
type SpawnOptions struct {
	// UserOptions select a profile and its options (see
	// kubespawner.Config.Resolve).
	UserOptions map[string]string
	// Attributes are the KubeSpawner options the hub set on its Spawner
	// (see spawner.StartOptions.Attributes).
	Attributes map[string]any
	// Env is what the hub's single-user server needs (API token, URLs).
	Env []corev1.EnvVar
	// Cmd replaces the configuration's cmd when not nil; Args are
	// appended to it.
	Cmd, Args []string
	// SSL turns on internal SSL for this start.
	SSL *spawner.SSL
	// UserID is the hub's id of the user. Default: the server's UserID.
	UserID int64
	// Hub names the hub that starts the server (spawner.StartOptions.Hub):
	// Status.State.Hub says it from the moment Spawn accepts the start.
	Hub string
	// HubNamespace is the namespace the hub runs in (the source of
	// {hubnamespace}); HubVersion, when set, is written as the
	// hub.jupyter.org/jupyterhub-version annotation. See
	// spawner.StartOptions.
	HubNamespace, HubVersion string
	// Config, when set, is the configuration of this start in place of
	// the Manager's (a hub's own KubeSpawner configuration, as the
	// spawner-service takes it): placement resolves its profiles, and
	// the server's Spawner comes from a Factory of it in the target
	// cluster, sharing that cluster's client and informers. Trust stays
	// the Manager's: a start whose namespace the Manager's configuration
	// does not trust for the server (its own, its profiles',
	// retired_namespaces) is refused, and so is a Config whose
	// component_label differs. A cluster with its own Config
	// (Cluster.Config) does not take one. Running servers are not
	// touched: a server started under another Config keeps its pod, and
	// its next start uses the new one (removing the pod it left under
	// other names, as after a configuration change).
	Config *kubespawner.Config
	// Admit, when set, is called with the start's objects before
	// anything is created (the caller's policy); an error refuses the
	// start, as bad user options are (a *spawner.StartError at step
	// plan).
	Admit func(*spawner.Objects) error
}

func (o *SpawnOptions) startOptions(s naming.Server) spawner.StartOptions {
	sopts := spawner.StartOptions{UserOptions: o.UserOptions, Attributes: o.Attributes, Env: o.Env, Cmd: o.Cmd, Args: o.Args, SSL: o.SSL,
		UserID: o.UserID, HubNamespace: o.HubNamespace, HubVersion: o.HubVersion, Hub: o.Hub}
	if sopts.UserID == 0 {
		sopts.UserID = s.UserID
	}
	return sopts
}

// Spawn starts a server in the background and returns with its status
// once the start is in the cluster: its pod created (so that a new leader
// or a restarted Manager resumes it), or queued behind
// ConcurrentSpawnLimit, or ended, or after at most 5 seconds (an API
// server that does not take the create), or when ctx ends. Events follows
// the start and Watch or Status report its outcome. A server that is already starting or running is not touched:
// Spawn returns its status and started false. A server that is stopping,
// or that DeleteForever is deleting, is ErrBusy. Bad user options fail
// here (a *spawner.StartError at step plan wrapping the
// *kubespawner.ProfileError), before anything is created and before the
// Manager knows the server. The start outlives ctx and ends with the
// Manager's term (detached, for the next leader to resume) or with Stop.
func (m *Manager) Spawn(ctx context.Context, s naming.Server, opts SpawnOptions) (Status, bool, error) {
	if err := m.waitLeading(ctx); err != nil {
		return Status{}, false, err
	}
	known := m.lookup(s)
	var prev *cell
	var knownSp *spawner.Spawner
	if known != nil {
		known.mu.Lock()
		phase, split, c := known.status.Phase, known.splitBrain, known.cell
		knownSp = known.sp
		view := m.viewLocked(known)
		known.mu.Unlock()
		if split != "" {
			return view, false, fmt.Errorf("%w: %s", ErrSplitBrain, split)
		}
		if phase == PhaseStarting || phase == PhaseRunning {
			return view, false, nil
		}
		if view.Phase == PhaseUnknown && view.Reason == ReasonClusterUnavailable {
			// Seeded in a cluster not looked at since Start, or away: it
			// may run there (retired or not), and a start elsewhere
			// would be a second copy.
			return view, false, fmt.Errorf("manager: server %q of user %q may run in cluster %q, which has not been seen since the Manager started: %w",
				s.Servername, s.Username, c.name, &ClusterUnavailableError{Cluster: c.name, Since: m.opts.Clock.Now()})
		}
		prev = c
	}

	// Placement: which cluster the start goes to (the one cluster, at no
	// cost, unless the configuration names clusters).
	target := m.cells[0]
	if m.multi || m.configNamesClusters() || opts.Config != nil {
		var err error
		if target, err = m.place(ctx, s, opts, prev); err != nil {
			return Status{}, false, err
		}
	}
	if err := m.checkElsewhere(ctx, s, target); err != nil {
		return Status{}, false, err
	}

	// Plan: the start's objects, rendered by the server's Spawner (the
	// entry's, or a new one of the target cluster's Factory for this
	// start's configuration, which becomes the entry's).
	factory, err := m.factoryFor(target, opts.Config)
	if err != nil {
		return Status{}, false, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
	}
	sp, fresh := (*spawner.Spawner)(nil), (*spawner.Spawner)(nil)
	if known != nil && prev == target && knownSp.Factory() == factory {
		sp = knownSp
	} else {
		if sp, err = factory.New(s); err != nil {
			return Status{}, false, err
		}
		fresh = sp
		if known != nil && prev == target {
			// Another configuration than the entry's Spawner has: the
			// plan (and Admit) must see what that Spawner knew, the claim
			// in use above all, as the start will (startLocked hands it
			// over again under the entry's lock).
			fresh.LoadState(knownSp.State())
		}
	}
	sopts := opts.startOptions(s)
	plan, err := sp.Plan(ctx, sopts)
	if err == nil && opts.Config != nil && !target.factory.TrustsNamespace(s, plan.Names.Namespace) {
		err = fmt.Errorf("manager: the start's configuration puts server %q of user %q in namespace %q, which the Manager's configuration does not trust for it (its namespace, a profile's, or retired_namespaces)",
			s.Servername, s.Username, plan.Names.Namespace)
	}
	if err == nil && opts.Admit != nil {
		err = opts.Admit(plan)
	}
	if err != nil {
		if fresh != nil && known != nil {
			fresh.Close()
		}
		return Status{}, false, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
	}
	sopts.Plan = plan

	// Entry: the server's state machine, locked from here to the start.
	e, err := m.lockedEntry(s, target, fresh)
	if err != nil {
		return Status{}, false, err
	}
	op, st, started, err := m.startLocked(ctx, e, startRequest{server: s, opts: sopts, target: target, fresh: fresh})
	if fresh != nil && fresh != e.sp {
		fresh.Close() // the entry was made meanwhile, with its own
	}
	e.mu.Unlock()
	if !started || err != nil {
		return st, started, err
	}
	// Durable before accepted: Spawn returns once the pod exists (a new
	// leader, or this Manager restarted, resumes it from there), or once
	// the start waits in the queue for a slot or has ended, or after
	// durableWait (an API server that does not take the create), or when
	// ctx ends. A start that is only in memory when this process dies is
	// lost, and the hub's next call finds the server unknown. The wait is
	// in real time: it bounds I/O, not the Manager's own timing.
	timer := time.NewTimer(durableWait)
	defer timer.Stop()
	select {
	case <-op.created:
	case <-op.queued:
	case <-op.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return m.statusOf(e), true, nil
}

// durableWait bounds how long Spawn waits for the pod's create: a start
// normally creates it within milliseconds of being accepted.
const durableWait = 5 * time.Second

// startRequest is a start Spawn has planned, for startLocked.
type startRequest struct {
	server naming.Server
	// opts are the start's options, with its plan.
	opts spawner.StartOptions
	// target is the cluster placement picked.
	target *cell
	// fresh is the Spawner that planned the start, when Spawn made one
	// (a new server, another cluster or configuration); nil when the
	// entry's Spawner planned it.
	fresh *spawner.Spawner
}

// startLocked begins the start of e (e.mu held) and returns its
// operation, or the status to answer with when nothing began.
func (m *Manager) startLocked(ctx context.Context, e *entry, req startRequest) (*operation, Status, bool, error) {
	s, sopts, target, fresh := req.server, req.opts, req.target, req.fresh
	if e.splitBrain != "" {
		return nil, m.viewLocked(e), false, fmt.Errorf("%w: %s", ErrSplitBrain, e.splitBrain)
	}
	switch e.status.Phase {
	case PhaseStarting, PhaseRunning:
		return nil, m.viewLocked(e), false, nil
	case PhaseStopping:
		return nil, m.viewLocked(e), false, fmt.Errorf("%w: server %q of user %q is stopping", ErrBusy, s.Servername, s.Username)
	}
	if e.op != nil {
		return nil, m.viewLocked(e), false, fmt.Errorf("%w: server %q of user %q is being deleted", ErrBusy, s.Servername, s.Username)
	}
	switch {
	case e.cell != target:
		// Placed in another cluster than it last ran in: it moves, with
		// a Spawner of the target's (the one that planned the start).
		if err := m.moveLocked(e, target, s, fresh); err != nil {
			return nil, m.viewLocked(e), false, err
		}
	case fresh != nil && fresh != e.sp && fresh.Factory() != e.sp.Factory():
		// Another configuration than the entry's Spawner has (a hub's,
		// or none after one): the Spawner that planned the start takes
		// over, with what the old one knew (names in use, the claim),
		// so that the start finds and removes a pod left under them.
		fresh.LoadState(e.sp.State())
		old := e.sp
		e.sp = fresh
		old.Close()
	}

	// Start: in the background, on the entry's Spawner (Start renders
	// again only if the plan was made by another Spawner whose names in
	// use differ).
	op, opCtx := m.beginOpLocked(ctx, e, opStart)
	if op == nil {
		return nil, Status{}, false, ErrNotLeader
	}
	opCtx, span := m.opSpan(opCtx, phase.OpSpawn, s, target.name)
	e.traceID = phase.TraceID(opCtx)
	now := m.opts.Clock.Now()
	e.hub, e.hubSet = sopts.Hub, true
	e.seeded = false
	e.status.StartedAt, e.status.ReadyAt, e.status.ExitCode = &now, nil, nil
	e.status.URL, e.status.Reason, e.status.Message = "", "", ""
	e.stream = spawner.NewStream()
	m.setPhaseLocked(e, PhaseStarting)
	sopts.Progress = e.stream
	sopts.OnPodCreated = op.markCreated
	sopts.OnPhase = m.metrics.phaseObserver(target.name)
	stream, esp := e.stream, e.sp
	m.metrics.spawnsInFlight.Inc()
	go m.runStart(opCtx, e, startJob{op: op, cluster: e.cell.name, sp: esp, stream: stream, span: span, do: func(ctx context.Context) (string, error) {
		// A Stop (Cancelled) or the end of the term (Detached) while
		// the start waits or checks: nothing was made.
		ended := func(err error) error {
			reason := spawner.ReasonCancelled
			if errors.Is(err, spawner.ErrDetach) {
				reason = spawner.ReasonDetached
			}
			return &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: reason, Err: err}
		}
		if err := m.takeSlot(ctx, target, e, op, stream); err != nil {
			return "", ended(err)
		}
		defer m.giveSlot(target)
		if err := m.checkElsewhere(ctx, s, target); err != nil {
			if ctx.Err() != nil {
				return "", ended(context.Cause(ctx))
			}
			return "", &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: ReasonInOtherCluster, Err: err}
		}
		o := sopts
		sopts.Plan = nil // the start owns the plan now
		return esp.Start(ctx, o)
	}})
	return op, m.viewLocked(e), true, nil
}

// startJob is a start or resume for runStart, with what it runs on as
// it was when it began (under e.mu).
type startJob struct {
	op      *operation
	cluster string // the server's cluster, for metrics
	sp      *spawner.Spawner
	stream  *spawner.Stream
	// span is the operation's (non-recording when not traced): runStart
	// ends it.
	span trace.Span
	// do runs the start or resume; it returns the server's URL.
	do func(ctx context.Context) (string, error)
}

// runStart runs a start or resume and applies its outcome. It owns the
// operation and ends it.
func (m *Manager) runStart(ctx context.Context, e *entry, job startJob) {
	op, cluster, sp, stream := job.op, job.cluster, job.sp, job.stream
	defer m.endOp(op)
	if job.span != nil {
		defer job.span.End()
	}
	// podChanged skipped the pod's changes while the start ran: the
	// server is reconciled from the cache once it has ended (after the
	// phase below is set and the operation is gone), unless it succeeded
	// and the cache still holds the very version it found ready
	// (settled). Not a detached start (the Manager is shutting down or
	// lost its lease): its pod is the next leader's to follow and judge.
	detached, settled := false, false
	defer func() {
		if !detached && !settled {
			m.enqueue(e.key)
		}
	}()
	m.metrics.starts.WithLabelValues(string(op.kind), cluster).Inc()
	began := m.opts.Clock.Now()
	url, err := job.do(ctx)
	if op.kind == opStart {
		m.metrics.spawnsInFlight.Dec()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m.clearOpLocked(e, op)
	if err == nil && e.status.Phase == PhaseStopping {
		// The start succeeded just as Stop cancelled it: Stop owns the
		// phase and is deleting the pod; stopping never goes back to
		// running.
		m.metrics.observeSpawn(op.kind, "failed", spawner.ReasonCancelled, m.opts.Clock.Now().Sub(began), cluster)
		return
	}
	if err == nil {
		now := m.opts.Clock.Now()
		e.status.URL, e.status.ReadyAt = url, &now
		m.metrics.observeSpawn(op.kind, "ready", "", now.Sub(began), cluster)
		m.setPhaseLocked(e, PhaseRunning)
		settled = m.settledLocked(ctx, e, sp)
		return
	}
	var serr *spawner.StartError
	var reason spawner.Reason
	if errors.As(err, &serr) {
		reason = serr.Reason
	}
	if errors.Is(err, ErrUnschedulable) {
		reason = ReasonUnschedulable
	}
	m.metrics.observeSpawn(op.kind, "failed", reason, m.opts.Clock.Now().Sub(began), cluster)
	if job.span != nil {
		m.tracer.Fail(job.span, string(reason), err)
	}
	switch {
	case reason == spawner.ReasonDetached:
		// The term ended: the pod is left starting for the next leader,
		// and this replica reports what it knows.
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
func (m *Manager) settledLocked(ctx context.Context, e *entry, sp *spawner.Spawner) bool {
	ready, ok := sp.ReadyPod()
	pods := e.cell.podSet()
	if !ok || pods == nil {
		return false
	}
	// Operations begin only once the Manager is ready (its informer has
	// synced), so this read never waits under e.mu; the operation's
	// context has ended by now, its values are all it gives.
	pod, ok, err := pods.GetByKey(context.WithoutCancel(ctx), ready.Namespace, reflector.PodKey(ready.Namespace, ready.Name))
	if err != nil || !ok || pod.UID != ready.UID || pod.ResourceVersion != ready.ResourceVersion {
		return false
	}
	e.readyVersion = ready.ResourceVersion
	return true
}
