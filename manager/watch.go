package manager

import (
	"context"
	"sync"
)

// watchBuffer is how many statuses a Watch channel holds before notify
// queues them for the watcher's goroutine.
const watchBuffer = 64

// watcher is one Watch reader. notify, which runs under entry locks and
// must never block, puts a status straight into the reader's buffered
// channel while nothing is queued before it; otherwise (the reader is
// behind) it queues the status, unbounded, for the watcher's goroutine,
// which sends the queue in order. The direct send spares the common case
// a goroutine hand-off per status: the reader is woken by the status
// itself.
type watcher struct {
	out  chan Status // closed by the goroutine, after done is set
	wake chan struct{}
	mu   sync.Mutex // guards queue, closed and done
	// queue holds the statuses not yet in out, oldest first; the
	// goroutine removes one only once it is in out, so an empty queue
	// means nothing is waiting ahead of a new status.
	queue  []Status
	closed bool // the Manager has stopped: end once the queue is sent
	done   bool // the goroutine has ended: send nothing more to out
}

// Watch streams every change of every server's status (phase, URL,
// reason) from now on, in the order they happen for each server, until
// ctx ends or the Manager stops; then the channel closes. The channel is
// buffered (64 statuses): those already in it when ctx ends are still
// read before it closes, so a reader that stops caring checks its ctx. A
// hub reacts to it instead of polling Status. The goroutine behind it is
// owned by the reader and ends with ctx or the Manager.
func (m *Manager) Watch(ctx context.Context) <-chan Status {
	w := &watcher{out: make(chan Status, watchBuffer), wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.watchers[w] = struct{}{}
	m.mu.Unlock()
	go func() {
		defer close(w.out)
		defer func() {
			w.mu.Lock()
			w.done = true
			w.mu.Unlock()
			m.mu.Lock()
			delete(m.watchers, w)
			m.mu.Unlock()
		}()
		for {
			w.mu.Lock()
			var next Status
			queued, closed := len(w.queue) > 0, w.closed
			if queued {
				next = w.queue[0]
			}
			w.mu.Unlock()
			if queued {
				select {
				case w.out <- next:
				case <-ctx.Done():
					return
				}
				w.mu.Lock()
				w.queue[0] = Status{}
				w.queue = w.queue[1:]
				w.mu.Unlock()
				continue
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
	return w.out
}

// notify gives a status to every watcher without blocking.
func (m *Manager) notify(st Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.watchers {
		w.mu.Lock()
		if w.done {
			w.mu.Unlock()
			continue
		}
		if len(w.queue) == 0 {
			select {
			case w.out <- st:
				w.mu.Unlock()
				continue
			default: // the reader is a buffer behind
			}
		}
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
