package spawner

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/reflector"
)

// ProgressEvent is one step of a Start.
type ProgressEvent struct {
	// Progress is a percentage: each pod event moves it a third of the
	// way to 90; the final event is 100.
	Progress int
	Message  string
	Time     time.Time
	// Event is the Kubernetes event behind this step, if any (read-only).
	Event *corev1.Event
	// Ready and URL are set on the final event of a successful Start;
	// Failed on that of a failed one.
	Ready  bool
	URL    string
	Failed bool
}

// stream is one Start's progress: an append-only list that readers
// replay from the beginning and follow until it is finished.
type stream struct {
	mu       sync.Mutex // guards events, progress, done and changed
	events   []ProgressEvent
	progress float64
	done     bool
	// changed is closed and replaced on every append.
	changed chan struct{}
}

func newStream() *stream { return &stream{changed: make(chan struct{})} }

func (st *stream) appendLocked(e ProgressEvent) {
	st.events = append(st.events, e)
	close(st.changed)
	st.changed = make(chan struct{})
}

// event adds a pod event.
func (st *stream) event(e *corev1.Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.progress += (90 - st.progress) / 3
	st.appendLocked(ProgressEvent{
		Progress: int(st.progress),
		Message:  fmt.Sprintf("%s [%s] %s", reflector.EventTime(e).UTC().Format(time.RFC3339), e.Type, e.Message),
		Time:     reflector.EventTime(e),
		Event:    e,
	})
}

// note adds a message that is not a pod event, at the current progress.
func (st *stream) note(msg string, at time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.appendLocked(ProgressEvent{Progress: int(st.progress), Message: msg, Time: at})
}

// finish adds the final event and ends the stream.
func (st *stream) finish(e ProgressEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.appendLocked(e)
	st.done = true
}

// Progress streams the events of the current (or last) Start from its
// beginning: pod events as they happen, then a final event; the channel
// closes after the final event or when ctx ends. Several readers each get
// the whole stream. Without any Start the channel closes at once.
func (s *Spawner) Progress(ctx context.Context) <-chan ProgressEvent {
	s.mu.Lock()
	st := s.progress
	s.mu.Unlock()
	return followStream(ctx, st)
}

// followStream replays st and follows it until it finishes or ctx ends;
// a nil stream closes at once.
func followStream(ctx context.Context, st *stream) <-chan ProgressEvent {
	out := make(chan ProgressEvent)
	// The goroutine is owned by the reader: it ends with the stream or
	// with the reader's ctx.
	go func() {
		defer close(out)
		if st == nil {
			return
		}
		for i := 0; ; {
			st.mu.Lock()
			pending := st.events[i:]
			done, changed := st.done, st.changed
			st.mu.Unlock()
			for _, e := range pending {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
			i += len(pending)
			if done {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
