package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// Stop stops a server: a start in flight is cancelled (its pod deleted,
// its stream ends with reason Cancelled), then the pod is deleted and
// Stop waits, bounded by ctx, until it is gone. Stopping a stopped server
// is success; a Stop while another Stop runs waits for it. Unknown
// servers are ErrNotFound. opts.OnProgress, when set, receives the
// stop's progress, which Events streams too.
func (m *Manager) Stop(ctx context.Context, s naming.Server, opts spawner.StopOptions) (Status, error) {
	if err := m.waitLeading(ctx); err != nil {
		return Status{}, err
	}
	e := m.lookup(s)
	if e == nil {
		return Status{}, m.unknown(s)
	}
	e.mu.Lock()
	if split := e.splitBrain; split != "" {
		view := m.viewLocked(e)
		e.mu.Unlock()
		return view, fmt.Errorf("%w: %s", ErrSplitBrain, split)
	}
	if m.multi {
		if err := e.cell.unavailableErr(); err != nil {
			// Nothing can be deleted there now; the server is not
			// failed for it. A stopped server stays stopped.
			view, idle := m.viewLocked(e), e.op == nil
			e.mu.Unlock()
			if idle && (view.Phase == PhaseStopped || view.Phase == PhaseFailed) {
				return view, nil
			}
			return view, fmt.Errorf("manager: stopping server %q of user %q: %w", s.Servername, s.Username, err)
		}
	}
	if e.op != nil && (e.status.Phase == PhaseStopping || e.op.kind == opDelete) {
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
	op, opCtx := m.beginOpLocked(ctx, e, opStop)
	if op == nil {
		e.mu.Unlock()
		return Status{}, ErrNotLeader
	}
	if prev != nil {
		prev.cancel(spawner.ErrStartCancelled)
	}
	stream := spawner.NewStream()
	e.stream = stream
	e.traceID = phase.TraceID(ctx)
	m.setPhaseLocked(e, PhaseStopping)
	sp, cluster := e.sp, e.cell.name
	e.mu.Unlock()

	defer m.endOp(op)
	// The stop runs on the caller's ctx, and ends too if the term ends
	// before it does (see lead).
	stopCtx, stopDone := context.WithCancelCause(ctx)
	defer stopDone(nil)
	defer context.AfterFunc(opCtx, func() { stopDone(context.Cause(opCtx)) })()
	opts.Progress = stream
	began := m.opts.Clock.Now()
	err := sp.Stop(stopCtx, opts)
	m.metrics.observeStop(err, m.opts.Clock.Since(began), cluster)
	if prev != nil {
		<-prev.done // the start has cleaned up and returned
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m.clearOpLocked(e, op)
	if err != nil {
		e.status.Reason, e.status.Message = ReasonStopFailed, err.Error()
		m.setPhaseLocked(e, PhaseFailed)
		return m.viewLocked(e), err
	}
	e.status.URL, e.status.ReadyAt = "", nil
	e.status.ExitCode = intPtr(1) // as KubeSpawner's poll: no pod
	e.status.Reason, e.status.Message = ReasonStopped, "stopped by the hub"
	m.setPhaseLocked(e, PhaseStopped)
	return m.viewLocked(e), nil
}

// DeleteForever deletes a stopped server's claim (see
// spawner.Spawner.DeleteForever), waits until it is gone, and forgets the
// server: once it returns nil, Status is ErrNotFound. A server that
// is not stopped or failed is ErrBusy. A server the Manager does not know
// (forgotten after Retention, as a hub's user deleted weeks after their
// last stop is) is not ErrNotFound: its claim, named by the
// configuration, is deleted all the same, as KubeSpawner's
// delete_forever does.
func (m *Manager) DeleteForever(ctx context.Context, s naming.Server) error {
	if err := m.waitLeading(ctx); err != nil {
		return err
	}
	// A server the Manager does not know (stopped long ago, forgotten
	// after Retention, or never started by this replica) is deleted as
	// KubeSpawner deletes it: the claim named by the configuration, with
	// the owner checks of spawner.Spawner.DeleteForever.
	e, err := m.lockedEntry(s, m.cells[0], nil)
	if err != nil {
		return err
	}
	if split := e.splitBrain; split != "" {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrSplitBrain, split)
	}
	if m.multi {
		// Its claims may be in any cluster (a moved server keeps its old
		// one): every cluster must be available, or nothing is deleted.
		for _, c := range m.cells {
			if err := c.unavailableErr(); err != nil {
				e.mu.Unlock()
				return fmt.Errorf("manager: deleting server %q of user %q: %w", s.Servername, s.Username, err)
			}
		}
	}
	if p := e.status.Phase; p != PhaseStopped && p != PhaseFailed || e.op != nil {
		doing := string(p)
		if e.op != nil && e.op.kind == opDelete {
			doing = "being deleted"
		}
		e.mu.Unlock()
		return fmt.Errorf("%w: server %q of user %q is %s: stop it, and let the stop end, before deleting it", ErrBusy, s.Servername, s.Username, doing)
	}
	// The deletion is an operation: a Spawn meanwhile is ErrBusy rather
	// than a start whose claim is deleted under it, or whose Spawner is
	// closed when the server is forgotten.
	op, opCtx := m.beginOpLocked(ctx, e, opDelete)
	if op == nil {
		e.mu.Unlock()
		return ErrNotLeader
	}
	sp := e.sp
	e.mu.Unlock()
	defer m.endOp(op)
	delCtx, delDone := context.WithCancelCause(ctx)
	defer delDone(nil)
	defer context.AfterFunc(opCtx, func() { delDone(context.Cause(opCtx)) })()
	if m.multi {
		// And every cluster must answer now: a cluster gone within
		// ClusterDownAfter is not marked yet, and a deletion that fails
		// half way would delete the claims of some clusters and report
		// an error. (A cluster lost between this and its deletion still
		// can; the error names it, the server is kept, and a retry
		// deletes what is left.)
		if err = m.pingAll(delCtx); err != nil {
			err = fmt.Errorf("manager: deleting server %q of user %q: nothing deleted: %w", s.Servername, s.Username, err)
		}
	}
	if err == nil {
		err = sp.DeleteForever(delCtx)
	}
	if err == nil && m.multi {
		err = m.deleteElsewhere(delCtx, s, e)
	}
	if err == nil {
		m.forget(e, true) // before the operation ends: nothing can start on e
	}
	e.mu.Lock()
	m.clearOpLocked(e, op)
	e.mu.Unlock()
	return err
}

// forget removes an entry that is idle (stopped or failed, and with no
// operation but, for DeleteForever, its own) and closes its Spawner.
func (m *Manager) forget(e *entry, deleting bool) {
	e.mu.Lock()
	busy := e.op != nil && !(deleting && e.op.kind == opDelete)
	if e.forgotten || busy || (e.status.Phase != PhaseStopped && e.status.Phase != PhaseFailed) {
		e.mu.Unlock()
		return
	}
	e.forgotten = true
	m.mu.Lock() // lock order: an entry's lock, then the Manager's
	if m.servers[e.key] == e {
		delete(m.servers, e.key)
	}
	m.mu.Unlock()
	sp := e.sp // read under e.mu: a reconcile holding e may still move it
	e.mu.Unlock()
	sp.Close()
}

// pingAll asks every cluster's API server, at once, whether it answers:
// nil when all do, else a *ClusterUnavailableError for each that does
// not.
func (m *Manager) pingAll(ctx context.Context) error {
	m.mu.Lock()
	log := m.log
	m.mu.Unlock()
	errs := make([]error, len(m.cells))
	var wg sync.WaitGroup
	now := time.Now()
	for i, c := range m.cells {
		wg.Go(func() {
			if err := c.ping(ctx, log); err != nil {
				errs[i] = &ClusterUnavailableError{Cluster: c.name, Since: now, Err: err}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deleteElsewhere deletes the claims a server has in the clusters other
// than its own (where it ran before it moved), with the same owner
// checks, each through that cluster's own Spawner.
func (m *Manager) deleteElsewhere(ctx context.Context, s naming.Server, e *entry) error {
	e.mu.Lock()
	own := e.cell
	e.mu.Unlock()
	for _, c := range m.cells {
		if c == own {
			continue
		}
		sp, err := c.factory.New(s)
		if err != nil {
			return fmt.Errorf("manager: cluster %q: %w", c.name, err)
		}
		err = sp.DeleteForever(ctx)
		sp.Close()
		if err != nil {
			return fmt.Errorf("manager: deleting server %q of user %q in cluster %q: %w", s.Servername, s.Username, c.name, err)
		}
	}
	return nil
}
