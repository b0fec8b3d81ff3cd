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
// whose pod exists are cancelled with ErrShutdown (detached: their pods
// stay for the next leader), starts whose pod does not exist yet first
// create it, and stops and deletions may finish; all within stopGrace,
// after which everything left is cancelled.
//
// A term won by election resyncs first, to resume the servers it found
// starting as a standby; the one term without LeaderElection begins
// before recovery, which resumes them.
func (m *Manager) lead(ctx context.Context, stopGrace time.Duration) {
	m.mu.Lock()
	m.setLeadingLocked(true)
	m.mu.Unlock()
	m.log.Info("leading")
	if m.lease != nil {
		m.resync(ctx)
	}
	<-ctx.Done()

	m.mu.Lock()
	m.setLeadingLocked(false) // no operation begins from now on
	var unborn []*operation
	for op := range m.ops {
		switch {
		case !op.kind.starts():
		case op.isCreated():
			op.cancel(ErrShutdown)
		default:
			unborn = append(unborn, op)
		}
	}
	m.mu.Unlock()
	timer := m.opts.Clock.NewTimer(stopGrace)
	defer timer.Stop()
	// Without election stopGrace is unbounded (stops finish as long as
	// their callers wait); a start that cannot create its pod (an API
	// server away) must not hold a shutdown that long.
	unbornTimer := m.opts.Clock.NewTimer(min(stopGrace, maxUnbornWait))
	defer unbornTimer.Stop()
	graceOver := false
	// A start accepted but whose pod does not exist yet would be lost if
	// detached now: nothing in the cluster would tell the next leader of
	// it. It may go on until its pod exists (then it is detached, for the
	// next leader to resume), within the same grace as stops. The starts
	// it waited behind for a slot are detached as their pods appear, so
	// queued starts move up too.
	for _, op := range unborn {
		if graceOver {
			op.cancel(ErrShutdown)
			continue
		}
		select {
		case <-op.created:
			op.cancel(ErrShutdown)
		case <-op.done:
		case <-unbornTimer.C():
			graceOver = true
			op.cancel(ErrShutdown)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.opsDone.Wait()
	}()
	cancelAll := func() {
		m.mu.Lock()
		for op := range m.ops {
			op.cancel(ErrShutdown)
		}
		m.mu.Unlock()
	}
	if graceOver && stopGrace <= maxUnbornWait {
		cancelAll()
		<-done
	} else {
		select {
		case <-done:
		case <-timer.C():
			cancelAll()
			<-done
		}
	}
	m.log.Info("no longer leading")
}

// maxUnbornWait bounds how long a term's end waits for accepted starts
// to create their pods: about what a start needs from acceptance to its
// create (claim, namespace, pod) on a loaded API server.
const maxUnbornWait = 10 * time.Second

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

// setLeadingLocked sets leading and opens or closes led with it; mu
// must be held.
func (m *Manager) setLeadingLocked(leading bool) {
	if leading == m.leading {
		return
	}
	m.leading = leading
	m.metrics.leadingNow(leading)
	if leading {
		close(m.led)
	} else {
		m.led = make(chan struct{})
	}
}
