package manager

import (
	"context"
	"time"

	"github.com/go-logr/logr"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// podChanged enqueues the server a pod belongs to. It runs in the
// Registry's pod handler (Pods.Observe), which also wakes the starts'
// subscriptions, so it must not block: it reads the pod's labels and
// annotations and takes the Manager's and the entry's locks briefly
// (nothing holds them while waiting on the Registry).
//
// A server whose start (or resume) is in flight is not enqueued, unless
// its pod is unschedulable: the start owns the phase and follows the pod
// itself, so a reconcile could only check UnschedulableTimeout (observe),
// and it would cost a worker's wake-up for each of the pod's updates
// while it starts. runStart enqueues the server when the start ends, so
// a change the start did not see (the pod ended just after it was ready)
// is reconciled then, from the cache; it does not when no version after
// the one the start found ready has come by, and podChanged then lets
// that version pass too: a successful spawn costs no reconcile.
func (m *Manager) podChanged(c *cell, pod *reflector.Pod, deleted bool) {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	if !ok || !m.manages(c, pod) {
		return
	}
	if deleted {
		m.untrustedMu.Lock()
		delete(m.untrustedSeen, pod.UID)
		m.untrustedMu.Unlock()
	}
	key := serverKey{user, pod.Annotations.Get(naming.AnnotationServername)}
	if m.multi {
		m.claims.set(key, c, pod, deleted)
	}
	m.mu.Lock()
	q, e := m.queue, m.servers[key]
	m.mu.Unlock()
	if q == nil {
		return
	}
	if e != nil {
		e.mu.Lock()
		// A pod in another cluster than the server's is always looked
		// at: it may be a second copy (split brain) or where it moved.
		starting := e.op != nil && e.op.kind.starts() && e.cell == c
		// The version a start found ready, coming after the start ended:
		// the phase was set from it, a reconcile would find nothing. (A
		// deletion is never that: a relist's tombstone carries the last
		// version the cache held.)
		settled := !deleted && e.op == nil && e.readyVersion != "" && pod.ResourceVersion == e.readyVersion &&
			e.status.Phase == PhaseRunning
		e.mu.Unlock()
		if (starting && !unschedulable(pod)) || settled {
			return
		}
	}
	q.Add(key)
}

// enqueue asks the workers to reconcile a server.
func (m *Manager) enqueue(key serverKey) {
	m.mu.Lock()
	q := m.queue
	m.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

func (m *Manager) processNext(ctx context.Context, log logr.Logger) bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	m.busy.Add(1)
	m.lastTurn.Store(m.opts.Clock.Now().UnixNano())
	defer func() {
		m.lastTurn.Store(m.opts.Clock.Now().UnixNano())
		m.busy.Add(-1)
		m.queue.Done(key)
	}()
	if err := m.reconcile(ctx, key); err != nil && ctx.Err() == nil {
		log.Error(err, "reconciling server", "user", key.user, "server", key.server)
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// resync enqueues every known server (a backstop for missed events),
// forgets stopped and failed servers older than Retention, and drops the
// progress of operations that ended streamKept ago or more. It reads only
// the cache.
func (m *Manager) resync(ctx context.Context) {
	now := m.opts.Clock.Now()
	for _, e := range m.entries() {
		e.mu.Lock()
		idle := e.op == nil && (e.status.Phase == PhaseStopped || e.status.Phase == PhaseFailed)
		old := now.Sub(e.changed) >= m.opts.Retention
		if e.op == nil && e.stream != nil && now.Sub(e.opEnded) >= m.streamKept {
			e.stream = nil
		}
		e.mu.Unlock()
		if idle && old {
			m.forget(e, false)
			continue
		}
		m.queue.Add(e.key)
	}
	for _, c := range m.cells {
		if pods, err := c.podSet().List(ctx); err == nil {
			for _, p := range pods {
				m.podChanged(c, p, false)
			}
		}
	}
	m.resyncs.Add(1)
}

// streamKept is how long, at least, Events still streams an operation
// that has ended; resync drops it after that. A reader that comes later
// (a hub's progress page reopened once the server is up) gets what it
// would get from a Manager restarted since: a closed stream, the outcome
// being the server's Status. Kept for ever, a burst of 10,000 starts left
// about 12 MB of progress behind.
const streamKept = time.Minute
