package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
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
	// PhaseUnknown is never a state of the machine: Status reports it,
	// with several clusters, for a server that was starting, running or
	// stopping in a cluster that is unavailable (Reason
	// ClusterUnavailable), and for a server found in two clusters at
	// once (Reason SplitBrain). ExitCode is nil: the server may still
	// run, and a hub's poll must not end it.
	PhaseUnknown Phase = "unknown"
)

// Status is a managed server's state. It is JSON-serialisable.
type Status struct {
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
	// *spawner.StartError's reason (ErrImagePull, Timeout, Cancelled,
	// ...), an exit's (Exited, OOMKilled, Evicted, PodDeleted, PodEnded),
	// or Unschedulable, Stopped or StopFailed.
	Reason  spawner.Reason `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	State   spawner.State  `json:"state"`
	// Cluster is the cluster the server is in ("" with one cluster).
	Cluster string `json:"cluster,omitempty"`
}

// ServerOf returns the server a status is about.
func (st Status) ServerOf() naming.Server {
	return naming.Server{Username: st.User, Servername: st.Server, UserID: st.State.UserID}
}

// Status reports one server from the Manager's state (no API call).
// Unknown servers are ErrNotFound. Before Start has recovered the
// cluster's servers it returns ErrNotRunning rather than a wrong answer.
func (m *Manager) Status(s naming.Server) (Status, error) {
	select {
	case <-m.ready:
	default:
		return Status{}, ErrNotRunning
	}
	e := m.lookup(s)
	if e == nil {
		return Status{}, m.unknown(s)
	}
	return m.statusOf(e), nil
}

// Poll checks a server against the cache with KubeSpawner's poll
// contract (running: ExitCode nil; exited: its code; gone: 1), updates
// the Manager's state with what it finds, and returns the status. A
// stopped pod is deleted when delete_stopped_pods is on.
func (m *Manager) Poll(ctx context.Context, s naming.Server) (Status, error) {
	if err := m.waitReady(ctx); err != nil {
		return Status{}, err
	}
	e := m.lookup(s)
	if e == nil {
		return Status{}, m.unknown(s)
	}
	err := m.observe(ctx, e)
	return m.statusOf(e), err
}

// List reports every server the Manager knows, sorted by user and
// server; never nil.
func (m *Manager) List() []Status {
	entries := m.entries()
	out := make([]Status, 0, len(entries))
	for _, e := range entries {
		out = append(out, m.statusOf(e))
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out
}

// Events streams the server's current (or last) operation from its
// beginning, ending with its final event, which comes once the
// operation's outcome is the server's Status; the channel closes then or
// when ctx ends. Any number of readers each get the whole stream.
// Unknown servers are ErrNotFound; a server with no operation yet, or
// whose last operation ended a minute or more before the latest resync
// (the Manager keeps no history of it then), gives a closed channel.
func (m *Manager) Events(ctx context.Context, s naming.Server) (<-chan spawner.ProgressEvent, error) {
	return m.EventsFrom(ctx, s, 0)
}

// EventsFrom is Events starting after the first n events (to resume a
// stream a client has read n events of).
func (m *Manager) EventsFrom(ctx context.Context, s naming.Server, n int) (<-chan spawner.ProgressEvent, error) {
	if err := m.waitReady(ctx); err != nil {
		return nil, err
	}
	e := m.lookup(s)
	if e == nil {
		return nil, notFound(s)
	}
	e.mu.Lock()
	st := e.stream
	var opDone <-chan struct{}
	if e.op != nil {
		opDone = e.op.done
	}
	e.mu.Unlock()
	if st == nil {
		ch := make(chan spawner.ProgressEvent)
		close(ch)
		return ch, nil
	}
	in := st.Events(ctx, n)
	if opDone == nil {
		return in, nil
	}
	// The operation's final event (published by the Spawner) reaches the
	// reader only once the operation has ended and its outcome is the
	// server's status: a hub that reads "ready" and then asks Status
	// finds the server running. The goroutine is the reader's: it ends
	// with the stream or ctx.
	out := make(chan spawner.ProgressEvent)
	go func() {
		defer close(out)
		for ev := range in {
			if ev.Final() {
				select {
				case <-opDone:
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// viewLocked is e's status as callers see it (e.mu held): its cluster
// named, and, while that cluster is unavailable, a server that was
// starting, running or stopping is PhaseUnknown (the cluster may have
// changed it; nothing there is deleted or failed for it), with its last
// known phase in the message.
func (m *Manager) viewLocked(e *entry) Status {
	st := e.status
	st.Cluster = e.cell.name
	if e.hubSet {
		st.State.Hub = e.hub
	}
	if e.splitBrain != "" {
		st.Phase, st.Ready, st.ExitCode = PhaseUnknown, false, nil
		st.Reason, st.Message = ReasonSplitBrain, e.splitBrain
		return st
	}
	if !m.multi {
		return st
	}
	if e.seeded {
		// Only the hub's record: the cluster's cache has not been
		// looked at for it yet (not synced since Start, or unavailable).
		c := e.cell
		c.mu.Lock()
		recovered, down := c.recovered, c.down
		c.mu.Unlock()
		if !recovered || down {
			st.Phase, st.Ready, st.ExitCode, st.Reason = PhaseUnknown, false, nil, ReasonClusterUnavailable
			st.Message = fmt.Sprintf("cluster %q has not been seen since the Manager started; the server's only record is the hub's", c.name)
			return st
		}
	}
	switch st.Phase {
	case PhaseStarting, PhaseRunning, PhaseStopping:
		if down, since := e.cell.unavailable(); down {
			st.Message = fmt.Sprintf("cluster %q has not answered since %s; the server was %s then", e.cell.name, since.UTC().Format(time.RFC3339), st.Phase)
			st.Phase, st.Ready, st.ExitCode, st.Reason = PhaseUnknown, false, nil, ReasonClusterUnavailable
		}
	}
	return st
}
