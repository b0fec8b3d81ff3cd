package manager

import (
	"context"
	"fmt"
	"slices"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/spawner"
)

// takeSlot waits for a start slot of c, reporting the position among
// the starts that wait for one there.
func (m *Manager) takeSlot(ctx context.Context, c *cell, e *entry, op *operation, stream *spawner.Stream) error {
	if c.slots == nil {
		return nil
	}
	select {
	case c.slots <- struct{}{}:
		m.metrics.phase.WithLabelValues(phase.SlotWait, c.name).Observe(0)
		return nil
	default:
	}
	began := m.opts.Clock.Now()
	end := m.tracer.Step(ctx, phase.SlotWait)
	var err error
	defer func() {
		end(err)
		if err == nil {
			m.metrics.phase.WithLabelValues(phase.SlotWait, c.name).Observe(m.opts.Clock.Since(began).Seconds())
		}
	}()
	op.markQueued()
	m.waitingMu.Lock()
	m.waiting = append(m.waiting, e)
	pos := 0
	for _, w := range m.waiting {
		if w.queuedIn == c {
			pos++
		}
	}
	e.queuedIn = c
	pos++
	m.waitingMu.Unlock()
	defer func() {
		m.waitingMu.Lock()
		m.waiting = slices.DeleteFunc(m.waiting, func(w *entry) bool { return w == e })
		e.queuedIn = nil
		m.waitingMu.Unlock()
	}()
	msg := fmt.Sprintf("Waiting for a start slot (%d starts in flight; position %d in the queue)", cap(c.slots), pos)
	if m.multi {
		msg = fmt.Sprintf("Waiting for a start slot in cluster %q (%d starts in flight there; position %d in its queue)", c.name, cap(c.slots), pos)
	}
	stream.Publish(spawner.ProgressEvent{Message: msg, Time: m.opts.Clock.Now(), TraceID: phase.TraceID(ctx)})
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		err = context.Cause(ctx)
		return err
	}
}

func (m *Manager) giveSlot(c *cell) {
	if c.slots != nil {
		<-c.slots
	}
}
