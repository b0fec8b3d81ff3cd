package spawner

import (
	"context"
	"sync"
)

// watcher is one Watch reader: an unbounded queue of statuses fed under
// entry locks (so notify never blocks) and drained by the reader's
// goroutine.
type watcher struct {
	mu     sync.Mutex // guards queue and closed
	queue  []ServerStatus
	closed bool
	wake   chan struct{}
}

// Watch streams every change of every server's status (phase, URL,
// reason) from now on, in the order they happen for each server, until
// ctx ends or the Manager stops; then the channel closes. A hub reacts to
// it instead of polling Status. The goroutine behind it is owned by the
// reader and ends with ctx or the Manager.
func (m *Manager) Watch(ctx context.Context) <-chan ServerStatus {
	w := &watcher{wake: make(chan struct{}, 1)}
	out := make(chan ServerStatus)
	m.mu.Lock()
	m.watchers[w] = struct{}{}
	m.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.watchers, w)
			m.mu.Unlock()
		}()
		for {
			w.mu.Lock()
			batch, closed := w.queue, w.closed
			w.queue = nil
			w.mu.Unlock()
			for _, st := range batch {
				select {
				case out <- st:
				case <-ctx.Done():
					return
				}
			}
			if closed {
				return
			}
			select {
			case <-w.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// notify queues a status for every watcher without blocking.
func (m *Manager) notify(st ServerStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.watchers {
		w.mu.Lock()
		w.queue = append(w.queue, st)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// closeWatchers ends every Watch once the Manager stops.
func (m *Manager) closeWatchers() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.watchers {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
