package spawner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/reflector"
)

// ProgressEvent is one step of an operation (Start, Resume or Stop).
type ProgressEvent struct {
	// Progress is a whole percentage: each pod event moves it a third of
	// the way to 90; the final event is 100.
	Progress int       `json:"progress"`
	Message  string    `json:"message"`
	Time     time.Time `json:"time"`
	// Ready and URL are set on the final event of a successful start;
	// Failed and Reason on that of a failed one (the reason of its
	// *StartError, or of Stop's failure).
	Ready  bool   `json:"ready,omitempty"`
	URL    string `json:"url,omitempty"`
	Failed bool   `json:"failed,omitempty"`
	Reason Reason `json:"reason,omitempty"`
	// Stopped is set on the final event of a successful Stop.
	Stopped bool `json:"stopped,omitempty"`
	// TraceID is the operation's trace id (32 hex digits) when its ctx
	// carried a span or a remote span context, as the service's API
	// does with the hub's traceparent.
	TraceID string `json:"trace_id,omitempty"`
	// Event is the Kubernetes event behind this step, if any (read-only).
	Event *corev1.Event `json:"-"`
}

// Final reports whether e ends its operation's stream.
func (e ProgressEvent) Final() bool { return e.Ready || e.Failed || e.Stopped }

// emitter turns one operation's steps into ProgressEvents for its
// OnProgress callback. It is used from the operation's goroutine, and,
// when inline is set, from the event informer's handler too (a pod event
// forwarded without waking the operation): mu orders the two.
type emitter struct {
	fn     func(ProgressEvent)
	stream *Stream
	clock  clock.PassiveClock
	// inline: nothing but a Stream, which never blocks, receives the
	// events, so pod events may be sent from the informer's handler.
	inline bool
	// traceID stamps every event (ProgressEvent.TraceID).
	traceID string

	mu       sync.Mutex // guards progress and done, and orders the calls of fn
	progress float64
	done     bool
}

func newEmitter(fn func(ProgressEvent), stream *Stream, c clock.PassiveClock) *emitter {
	return &emitter{fn: fn, stream: stream, clock: c, inline: fn == nil && stream != nil}
}

// followed reports whether anyone receives the events.
func (em *emitter) followed() bool { return em.fn != nil || em.stream != nil }

// sendLocked hands e to the stream and fn (em.mu held).
func (em *emitter) sendLocked(e ProgressEvent) {
	if em.done {
		return
	}
	em.done = e.Final()
	e.TraceID = em.traceID
	if em.stream != nil {
		em.stream.Publish(e)
	}
	if em.fn != nil {
		em.fn(e)
	}
}

func (em *emitter) send(e ProgressEvent) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.sendLocked(e)
}

// note adds a message at the current progress (pct < 0) or at pct.
func (em *emitter) note(pct int, msg string) {
	em.mu.Lock()
	defer em.mu.Unlock()
	if pct > int(em.progress) {
		em.progress = float64(pct)
	}
	em.sendLocked(ProgressEvent{Progress: int(em.progress), Message: msg, Time: em.clock.Now()})
}

// event adds a pod event, showing message (its own, or what
// event_message_rules and the EventMessage hook made of it), a third of
// the way closer to 90%.
func (em *emitter) event(e *corev1.Event, message string) {
	em.mu.Lock()
	defer em.mu.Unlock()
	em.progress += (90 - em.progress) / 3
	em.sendLocked(ProgressEvent{
		Progress: int(em.progress),
		Message:  fmt.Sprintf("%s [%s] %s", reflector.EventTime(e).UTC().Format(time.RFC3339), e.Type, message),
		Time:     reflector.EventTime(e),
		Event:    e,
	})
}

// finish sends the final event of a start.
func (em *emitter) finish(url string, err error) {
	if err != nil {
		// What a user reads ("Spawn failed: ..."): the step and the cause,
		// without repeating the server's name and the reason.
		var reason Reason
		msg := err.Error()
		var serr *StartError
		if errors.As(err, &serr) {
			reason = serr.Reason
			msg = fmt.Sprintf("The server failed to start at step %s: %v", serr.Step, serr.Err)
			if reason != "" {
				msg = fmt.Sprintf("The server failed to start at step %s (%s): %v", serr.Step, reason, serr.Err)
			}
		}
		em.send(ProgressEvent{Progress: 100, Failed: true, Reason: reason, Message: msg, Time: em.clock.Now()})
		return
	}
	em.send(ProgressEvent{Progress: 100, Ready: true, URL: url, Message: "Server ready at " + url, Time: em.clock.Now()})
}

// finishStop sends the final event of a stop.
func (em *emitter) finishStop(err error) {
	if err != nil {
		em.send(ProgressEvent{Progress: 100, Failed: true, Message: err.Error(), Time: em.clock.Now()})
		return
	}
	em.send(ProgressEvent{Progress: 100, Stopped: true, Message: "Server stopped", Time: em.clock.Now()})
}

// Stream is a replayable progress stream: Publish appends (pass it as
// StartOptions.OnProgress), and each Events reader gets every event from
// the first one on, then follows until the final event. Create it before
// the operation starts and no reader misses anything. A Stream is safe
// for concurrent use.
type Stream struct {
	mu     sync.Mutex // guards events, done and changed
	events []ProgressEvent
	done   bool
	// changed is made by a reader that waits for the next append, and
	// closed (and dropped) by that append: a stream nobody follows makes
	// no channels.
	changed chan struct{}
}

// streamEvents is a new Stream's room for events: a start without
// trouble sends about eight (slot, plan, create, pod events, ready).
const streamEvents = 8

// NewStream returns an empty, open Stream.
func NewStream() *Stream { return &Stream{events: make([]ProgressEvent, 0, streamEvents)} }

// wakeLocked wakes the readers waiting for a change (st.mu held).
func (st *Stream) wakeLocked() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// Publish appends e; after a final event (Ready, Failed or Stopped) the
// stream is closed and later events are dropped.
func (st *Stream) Publish(e ProgressEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return
	}
	st.events = append(st.events, e)
	st.done = e.Final()
	st.wakeLocked()
}

// Close ends the stream without a final event (readers' channels close).
func (st *Stream) Close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.done {
		st.done = true
		st.wakeLocked()
	}
}

// Done reports whether the stream has ended.
func (st *Stream) Done() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.done
}

// Snapshot returns the events so far and whether the stream has ended.
func (st *Stream) Snapshot() ([]ProgressEvent, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]ProgressEvent(nil), st.events...), st.done
}

// Events replays the stream from the event at index from (0 for all) and
// follows it; the channel closes after the final event or when ctx ends.
// The goroutine behind it is owned by the reader and ends with the
// stream or with ctx.
func (st *Stream) Events(ctx context.Context, from int) <-chan ProgressEvent {
	out := make(chan ProgressEvent)
	go func() {
		defer close(out)
		i := max(from, 0)
		for {
			st.mu.Lock()
			var pending []ProgressEvent
			if i < len(st.events) {
				pending = st.events[i:]
			}
			done := st.done
			if !done && st.changed == nil {
				st.changed = make(chan struct{})
			}
			changed := st.changed
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
