package manager

import (
	"context"
	"fmt"
)

// WaitReady waits, bounded by ctx, until Start has recovered the
// cluster's servers: from then on Status, List and Watch report them. It
// is ErrNotRunning if ctx ends first or the Manager is not running (Start
// failed or returned; when Start failed before it ran, wrapping Start's
// error). Every other call waits for this itself; a hub
// calls it to hold its own readiness back.
func (m *Manager) WaitReady(ctx context.Context) error { return m.waitReady(ctx) }

// WaitLeading waits, bounded by ctx, until this Manager may change
// servers: it has recovered the cluster's servers (WaitReady) and, with
// LeaderElection, holds the Lease; without LeaderElection it is
// WaitReady. A hub calls it after starting the Manager and before it
// takes requests: Spawn, Stop and DeleteForever wait for recovery but not
// for the Lease (a standby returns ErrNotLeader at once, so that a
// request sent to it can go to the leader instead of hanging), and a
// replica gains the Lease only some time after Start (at once when the
// Lease is free; LeaseDuration after the last renewal when a replica
// that is gone held it without releasing it).
//
// It returns ErrNotLeader (with ctx's cause) when ctx ends before this
// replica leads, and ErrNotRunning when the Manager is not running or
// stops while it waits (Start failed or returned). When Start failed
// before it ran (a cluster too old, a Lease this identity may not use),
// the error wraps Start's too, so a hub that waits in an errgroup beside
// Start reports why whichever returns first. Leading can end at
// any time after it returns (the lease is lost): the calls then return
// ErrNotLeader.
func (m *Manager) WaitLeading(ctx context.Context) error {
	if err := m.waitReady(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	led := m.led
	m.mu.Unlock()
	select {
	case <-led:
		return nil
	case <-m.stopped:
		return ErrNotRunning
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotLeader, context.Cause(ctx))
	}
}

// waitReady waits, bounded by ctx, until the Manager runs and has
// recovered the cluster's servers.
func (m *Manager) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
	default:
		// Only a call before Start is ready waits: ctx.Done makes a
		// channel the first time it is called, which every poll of a
		// running Manager would otherwise pay for.
		select {
		case <-m.ready:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNotRunning, context.Cause(ctx))
		}
	}
	m.mu.Lock()
	running, ran := m.running, m.ran
	m.mu.Unlock()
	if running {
		return nil
	}
	if !ran {
		// Start failed before it ran (ready is closed on its way out):
		// its error is moments away.
		select {
		case <-m.stopped:
		case <-ctx.Done():
			return ErrNotRunning
		}
		m.mu.Lock()
		err := m.startErr
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: Start failed: %w", ErrNotRunning, err)
		}
	}
	return ErrNotRunning
}

// waitLeading is waitReady for calls that change servers: they also
// need this replica to lead.
func (m *Manager) waitLeading(ctx context.Context) error {
	if err := m.waitReady(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leading {
		return ErrNotLeader
	}
	return nil
}
