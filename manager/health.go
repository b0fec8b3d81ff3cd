package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spawnkit/spawnkit/reflector"
)

// stallAfter is how long reconcile work may wait, with no worker taking
// any of it, before Live reports the workers stalled. A reconcile reads
// the cache and writes at most a few objects; a minute without one
// finishing while work waits means the workers are stuck, not busy.
const stallAfter = time.Minute

// Health is the Manager's condition as a readiness probe sees it: what a
// platform's load balancer needs to know before it sends this replica
// work. Health makes no API call.
type Health struct {
	// Running is true once Start has recovered the cluster's servers,
	// until it returns.
	Running bool
	// Electing is true with Options.LeaderElection; Leading is true
	// while this replica runs servers (always, once Running, without
	// election).
	Electing, Leading bool
	// LeaseError is the error of the last call on the Lease when that
	// call failed (an API server away, a revoked RBAC rule): a standby
	// with a LeaseError cannot take over. Nil after a success.
	LeaseError error
	// LeaseErrorSince is when the Lease calls began failing.
	LeaseErrorSince time.Time
	// Pods is the health of the Manager's pod informer (zero before
	// Start takes it); with several clusters, the default cluster's.
	Pods reflector.Status
	// Clusters are every cluster's health, the default first: one,
	// unnamed, without Options.Clusters.
	Clusters []ClusterHealth
}

// Degraded names the clusters that are unavailable, or is nil: a replica
// whose other clusters work still takes work (a start placed on an
// unavailable cluster fails fast, naming it), so this is not part of
// Ready; a readiness probe reports it in its body.
func (h Health) Degraded() error {
	var errs []error
	for _, c := range h.Clusters {
		if err := c.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ready reports why the replica should not receive work, or nil: not
// running (starting up, recovering, or stopped), the pod informer not
// synced or refused by the API server (Status.Denied: a Role without
// list or watch on pods), or, with election, not leading (ErrNotLeader, with the Lease's
// error when it cannot be reached). Each condition is named, joined with
// errors.Join.
func (h Health) Ready() error {
	var errs []error
	if !h.Running {
		errs = append(errs, fmt.Errorf("%w: the Manager has not recovered the cluster's servers yet, or has stopped", ErrNotRunning))
	}
	if len(h.Clusters) > 1 {
		// Several clusters: ready while one of them serves; the others'
		// trouble is Degraded. With none serving, each says why.
		var none []error
		for _, c := range h.Clusters {
			errs := podsNotReady(c.Pods)
			if len(errs) == 0 && !c.Unavailable {
				none = nil
				break
			}
			if len(errs) == 0 {
				errs = []error{c.Err()}
			}
			none = append(none, fmt.Errorf("cluster %q: %w", c.Name, errors.Join(errs...)))
		}
		errs = append(errs, none...)
	} else {
		errs = append(errs, podsNotReady(h.Pods)...)
	}
	if h.Running && !h.Electing && !h.Leading {
		// Without election the one term ends only with Start's ctx.
		errs = append(errs, fmt.Errorf("%w: the Manager is shutting down", ErrNotRunning))
	}
	if h.Running && h.Electing && !h.Leading {
		if h.LeaseError != nil {
			errs = append(errs, fmt.Errorf("%w: the Lease cannot be reached since %s: %w", ErrNotLeader, h.LeaseErrorSince.UTC().Format(time.RFC3339), h.LeaseError))
		} else {
			errs = append(errs, fmt.Errorf("%w: another replica holds the Lease", ErrNotLeader))
		}
	}
	return errors.Join(errs...)
}

// podsNotReady is why pod informers in this condition cannot serve.
func podsNotReady(pods reflector.Status) []error {
	switch {
	case !pods.Synced && pods.LastError != nil:
		return []error{fmt.Errorf("manager: the pod informer has not synced; last list or watch error: %w", pods.LastError)}
	case !pods.Synced:
		return []error{errors.New("manager: the pod informer has not synced")}
	case pods.Denied != nil:
		// Synced by lists between refused watches, the cache lags by
		// client-go's backoff: starts would wait, stops never be seen.
		return []error{fmt.Errorf("manager: the pod informer is refused by the API server: %w", pods.Denied)}
	}
	return nil
}

// Health reports the Manager's condition now, without blocking on the
// Manager's work: it takes the Manager's lock only briefly.
func (m *Manager) Health() Health {
	m.mu.Lock()
	h := Health{Running: m.running && isClosed(m.ready), Electing: m.lease != nil, Leading: m.leading, Pods: reflector.Status{}}
	m.mu.Unlock()
	// Also while recovering: a recovery that waits for a refused list
	// says why.
	h.Clusters = m.clusterHealth()
	h.Pods = h.Clusters[0].Pods
	m.leaseMu.Lock()
	h.LeaseError, h.LeaseErrorSince = m.leaseErr, m.leaseErrSince
	m.leaseMu.Unlock()
	return h
}

// observeLease records the outcome of a call on the Lease
// (leader.Config.Observe).
func (m *Manager) observeLease(err error) {
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	switch {
	case err == nil:
		m.leaseErr, m.leaseErrSince = nil, time.Time{}
	case m.leaseErr == nil:
		m.leaseErr, m.leaseErrSince = err, m.opts.Clock.Now()
	default:
		m.leaseErr = err
	}
}

// Live reports, within ctx, whether the Manager's own machinery still
// turns, for a liveness probe: its lock can be taken (a deadlock would
// hold it forever), and its reconcile workers take work that waits
// (none has been idle with work queued for over a minute). Nil before
// Start and after it returned: a Manager that is not running is not
// wedged, and a restart would not help it. Live makes no API call, so an
// API server that is away never makes a replica look dead.
func (m *Manager) Live(ctx context.Context) error {
	if err := m.tryLock(ctx); err != nil {
		return err
	}
	queue, running := m.queue, m.running
	m.mu.Unlock()
	if !running || queue == nil {
		return nil
	}
	// Stalled: work waits while every worker has been inside one
	// reconcile for over stallAfter. A worker waiting in Get takes
	// queued work at once, so it is never a stall.
	if n := queue.Len(); n > 0 && int(m.busy.Load()) >= m.opts.Workers {
		if idle := m.opts.Clock.Since(time.Unix(0, m.lastTurn.Load())); idle > stallAfter {
			return fmt.Errorf("manager: %d servers wait to be reconciled while all %d workers have been inside one reconcile for %s", n, m.opts.Workers, idle.Round(time.Second))
		}
	}
	return nil
}

// tryLock takes m.mu, or fails when ctx ends first. It polls rather than
// blocking in a goroutine, so that a wedged lock leaves no goroutine
// behind.
func (m *Manager) tryLock(ctx context.Context) error {
	for {
		if m.mu.TryLock() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("manager: the Manager's lock has been held for longer than the probe waits: %w", context.Cause(ctx))
		case <-time.After(time.Millisecond):
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
