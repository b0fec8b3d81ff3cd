package manager

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// reconcile brings one server's phase in line with its pod in the cache,
// adopting servers the Manager does not know yet.
func (m *Manager) reconcile(ctx context.Context, key serverKey) error {
	m.reconciles.Add(1)
	m.mu.Lock()
	e := m.servers[key]
	m.mu.Unlock()
	if !m.multi {
		if e == nil {
			pod, err := m.findPod(ctx, m.cells[0], key)
			if err != nil || pod == nil {
				return err
			}
			return m.adopt(ctx, m.cells[0], pod)
		}
		return m.observe(ctx, e)
	}
	found, err := m.podsOf(ctx, key, false)
	if err != nil {
		return err
	}
	switch {
	case len(found) > 1:
		return m.splitBrain(key, found)
	case e == nil && len(found) == 1:
		return m.adopt(ctx, found[0].cell, found[0].pod)
	case e == nil:
		return nil
	}
	e.mu.Lock()
	wasSplit := e.splitBrain != ""
	e.splitBrain = ""
	if len(found) == 1 && found[0].cell != e.cell && e.op == nil {
		// Its only pod is in another cluster than the Manager thought
		// (moved by the operator, restored, or what a split brain left).
		srv := naming.Server{Username: key.user, Servername: key.server, UserID: e.status.State.UserID}
		if err := m.moveLocked(e, found[0].cell, srv, nil); err != nil {
			e.mu.Unlock()
			return err
		}
		e.status.Phase = PhaseStopped // so that adopt loads the pod's record
	}
	if wasSplit {
		m.notify(m.viewLocked(e))
	}
	// An operation in flight in the server's own cluster (a start
	// waiting for its slot, a stop) while its only pod is elsewhere: the
	// operation owns the entry, and its end reconciles the server again
	// (a start checks for that pod before it creates anything). Adopting
	// now would only ask for this reconcile again, at once.
	away := len(found) == 1 && found[0].cell != e.cell
	e.mu.Unlock()
	switch {
	case away:
		return nil
	case len(found) == 1:
		return m.adopt(ctx, found[0].cell, found[0].pod)
	}
	return m.observe(ctx, e)
}

// observe polls one server's pod from the cache and applies what it
// finds, unless an operation in flight owns the phase: a running server
// whose pod exited, ended, was evicted or deleted becomes failed (or
// stopped, for exit code 0); a pod found running makes the server
// running, and one found starting is resumed (when leading).
func (m *Manager) observe(ctx context.Context, e *entry) error {
	e.mu.Lock()
	if op := e.op; op != nil {
		e.mu.Unlock()
		if op.kind.starts() {
			m.checkUnschedulable(ctx, e, op)
		}
		return nil
	}
	sp := e.sp
	e.mu.Unlock()
	st, err := sp.PollCache(ctx)
	if err != nil {
		if errors.Is(err, spawner.ErrClosed) {
			return nil
		}
		return err
	}
	m.apply(ctx, e, st, sp)
	if !st.Running && st.Phase != "" {
		// The pod exited: now (a hub watching for failures learns of it
		// without waiting for an API call) Poll deletes it, with
		// delete_stopped_pods.
		if _, err := sp.Poll(ctx); err != nil && !errors.Is(err, spawner.ErrClosed) {
			return err
		}
	}
	return nil
}

// apply records what a poll found, unless an operation began meanwhile.
func (m *Manager) apply(ctx context.Context, e *entry, st spawner.Status, sp *spawner.Spawner) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.op != nil {
		return // an operation began meanwhile and owns the phase
	}
	if e.seeded {
		// The cluster's cache has been looked at: the phase below is
		// what it holds, no longer a guess.
		e.seeded = false
		defer func() { m.notify(m.viewLocked(e)) }()
	}
	phase := e.status.Phase
	switch {
	case st.Running && st.Ready:
		if phase != PhaseRunning || e.status.URL != st.URL {
			e.status.URL, e.status.ExitCode, e.status.Reason, e.status.Message = st.URL, nil, "", ""
			if e.status.ReadyAt == nil && !st.ReadySince.IsZero() {
				t := st.ReadySince
				e.status.ReadyAt = &t
			}
			m.setPhaseLocked(e, PhaseRunning)
		}
	case st.Running:
		// Pending, or running but not ready.
		if phase == PhaseRunning {
			return // a container restarting: still the same server
		}
		if phase == PhaseStopping || st.Deleting {
			return // a pod on its way out is never resumed
		}
		e.status.ExitCode, e.status.Reason, e.status.Message = nil, "", ""
		op, opCtx := m.beginOpLocked(ctx, e, opResume)
		if op == nil {
			// A standby, or a term ending: the leader resumes it.
			m.setPhaseLocked(e, PhaseStarting)
			return
		}
		stream := spawner.NewStream()
		e.stream = stream
		stream.Publish(spawner.ProgressEvent{Message: "Found the server starting; following it.", Time: m.opts.Clock.Now()})
		m.setPhaseLocked(e, PhaseStarting)
		// No OnPhase: a resumed start's phases before the resume were
		// timed (and observed) by the start that began them, if anyone.
		go m.runStart(opCtx, e, startJob{op: op, cluster: e.cell.name, sp: sp, stream: stream, do: func(ctx context.Context) (string, error) {
			return sp.Resume(ctx, spawner.StartOptions{Progress: stream})
		}})
	default:
		if phase == PhaseRunning || phase == PhaseStarting {
			e.status.ExitCode = intPtr(st.ExitCode)
			e.status.URL, e.status.Reason, e.status.Message = "", st.Reason, st.Message
			m.metrics.failures.WithLabelValues(string(st.Reason), e.cell.name).Inc()
			if st.ExitCode == 0 && st.Reason == spawner.ReasonExited {
				m.setPhaseLocked(e, PhaseStopped)
			} else {
				m.setPhaseLocked(e, PhaseFailed)
			}
		}
	}
}

// checkUnschedulable ends a start whose pod has been unschedulable for
// longer than UnschedulableTimeout.
func (m *Manager) checkUnschedulable(ctx context.Context, e *entry, op *operation) {
	limit := m.opts.UnschedulableTimeout
	if limit <= 0 {
		return
	}
	st := e.sp.State()
	e.mu.Lock()
	c := e.cell
	e.mu.Unlock()
	pod, ok, err := c.podSet().Get(ctx, st.Namespace, st.PodName)
	if err != nil || !ok {
		return
	}
	if c := pod.Scheduled; unschedulable(pod) {
		since := m.opts.Clock.Since(c.LastTransitionTime.Time)
		if since >= limit {
			op.cancel(fmt.Errorf("%w (%s): %s", ErrUnschedulable, limit, c.Message))
			return
		}
		m.queue.AddAfter(e.key, limit-since)
	}
}

// unschedulable reports whether the scheduler found no node for pod.
func unschedulable(pod *reflector.Pod) bool {
	return pod.Scheduled.Status == corev1.ConditionFalse && pod.Scheduled.Reason == corev1.PodReasonUnschedulable
}
