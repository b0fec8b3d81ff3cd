package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

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
	// traceID is the trace of the server's latest start or stop, for
	// its log lines ("" without one).
	traceID string
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
	// opEnded is when the last operation ended (clearOpLocked), from
	// which resync times the drop of its stream: an operation may end
	// without changing the phase (a start or resume detached when the
	// term ends leaves the server starting), so changed cannot time it.
	opEnded time.Time
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
		kv := []any{"user", e.key.user, "server", e.key.server, "from", e.status.Phase, "to", p, "reason", e.status.Reason, "url", e.status.URL}
		if e.traceID != "" {
			kv = append(kv, "trace_id", e.traceID)
		}
		log := m.log
		if m.recovering.Load() {
			log = log.V(1)
		}
		log.Info("phase", kv...)
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

// clearOpLocked (e.mu held) records that op has ended on e, unless a
// later operation has replaced it: every operation ends here.
func (m *Manager) clearOpLocked(e *entry, op *operation) {
	if e.op == op {
		e.op = nil
		e.opEnded = m.opts.Clock.Now()
	}
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
