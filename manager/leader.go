package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/leader"
)

// LeaderElection makes Manager replicas active/passive on a Lease.
type LeaderElection struct {
	// Namespace and Name of the Lease. Name is required; Namespace
	// defaults to the configuration's namespace.
	Namespace, Name string
	// Identity of this replica. Default: host name and process id.
	Identity string
	// LeaseDuration (default 15s), RenewDeadline (default 10s) and
	// RetryPeriod (default 2s) as in client-go: a standby takes over
	// within LeaseDuration of the leader going away, and at once after a
	// leader's graceful shutdown.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// leaseConfig is a LeaderElection with its defaults, for internal/leader.
type leaseConfig = leader.Config

// config checks le and fills in its defaults; ns is the Manager's
// namespace.
func (le *LeaderElection) config(client kubernetes.Interface, ns string, observe func(error)) (*leaseConfig, error) {
	if le.Name == "" {
		return nil, errors.New("manager: LeaderElection needs the Name of the Lease")
	}
	cfg := leader.Config{Client: client, Namespace: le.Namespace, Name: le.Name, Identity: le.Identity,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod, Observe: observe}
	if cfg.Namespace == "" {
		cfg.Namespace = ns
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	cfg, err := cfg.Complete()
	if err != nil {
		return nil, fmt.Errorf("manager: LeaderElection: %w", err)
	}
	return &cfg, nil
}

// Leading reports whether this Manager runs servers now.
func (m *Manager) Leading() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leading
}

// lead is one term: this replica runs servers until ctx ends (the lease
// is lost, or the Manager shuts down). Then it stops taking work and
// waits for its operations to reach a safe point, so that the Lease is
// released (or expires) only once nothing of this term can act: starts
// are cancelled with ErrShutdown (detached: their pods stay for the next
// leader), while stops and deletions may finish within stopGrace, and
// are cancelled after it.
//
// A term won by election resyncs first, to resume the servers it found
// starting as a standby; the one term without LeaderElection begins
// before recovery, which resumes them.
func (m *Manager) lead(ctx context.Context, stopGrace time.Duration) {
	m.mu.Lock()
	m.leading = true
	m.mu.Unlock()
	m.log.Info("leading")
	if m.lease != nil {
		m.resync(ctx)
	}
	<-ctx.Done()

	m.mu.Lock()
	m.leading = false // no operation begins from now on
	for op := range m.ops {
		if op.kind.starts() {
			op.cancel(ErrShutdown)
		}
	}
	m.mu.Unlock()
	timer := m.opts.Clock.NewTimer(stopGrace)
	defer timer.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.opsDone.Wait()
	}()
	select {
	case <-done:
	case <-timer.C():
		m.mu.Lock()
		for op := range m.ops {
			op.cancel(ErrShutdown)
		}
		m.mu.Unlock()
		<-done
	}
	m.log.Info("no longer leading")
}

// stopGrace is how long stops and deletions in flight may go on after a
// term ends: without LeaderElection, as long as their callers wait; with
// it, the margin between the lease's renew deadline and its expiry, when
// a new leader may act.
func (m *Manager) stopGrace() time.Duration {
	if m.lease == nil {
		return time.Duration(1<<63 - 1)
	}
	return max(m.lease.LeaseDuration-m.lease.RenewDeadline, time.Second)
}
