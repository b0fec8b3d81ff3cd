package spawner

import (
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/kubespawner"
)

// eventForwarder sends a start's pod events to its progress once each
// (by the event's uid and count), from the start's goroutine and, for the
// Manager's starts (emitter.inline: a Stream alone receives them), from the event informer's handler
// as each event arrives, so that the start need not wake for it.
type eventForwarder struct {
	em  *emitter
	uid types.UID // the start's pod
	// shape rewrites or drops an event's message (eventShaper); nil
	// shows each as it is.
	shape func(*corev1.Event) (string, bool)
	// graceWait is set while a ready start waits for its first event:
	// then an event wakes it.
	graceWait atomic.Bool
	// tl hears of every event of the pod as it arrives (beforePod sets a
	// handler for it from the pod's create on) and when the start
	// replays the earlier ones.
	tl *phase.Timeline

	mu   sync.Mutex // guards seen
	seen map[occurrence]bool
}

// occurrence is one occurrence of an event: its uid and count.
type occurrence struct {
	uid   types.UID
	count int32
}

// forward sends e to the progress unless it was sent before.
func (fw *eventForwarder) forward(e *corev1.Event) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	o := occurrence{e.UID, e.Count}
	if fw.seen[o] {
		return
	}
	if fw.seen == nil {
		fw.seen = map[occurrence]bool{}
	}
	fw.seen[o] = true
	message, keep := e.Message, true
	if fw.shape != nil {
		message, keep = fw.shape(e)
	}
	if keep {
		fw.em.event(e, message)
	}
}

// time tells the timeline of e (which counts each occurrence once): the
// handler and the start's replay of earlier events (forwardEvents) both
// see it.
func (fw *eventForwarder) time(e *corev1.Event) { fw.tl.Event(e) }

// eventShaper is what the start's progress shows of an event:
// event_message_rules, then the EventMessage hook; nil when neither is
// set.
func (s *Spawner) eventShaper(cfg *kubespawner.Config) func(*corev1.Event) (string, bool) {
	rules := kubespawner.CompileEventRules(cfg.EventMessageRules)
	hook := s.b.hooks.EventMessage
	if len(rules) == 0 && hook == nil {
		return nil
	}
	return func(e *corev1.Event) (string, bool) {
		message, keep := rules.Message(e.Reason, e.Message)
		if keep && hook != nil {
			message, keep = hook(s, e, message)
		}
		return message, keep
	}
}

// any reports whether an event has been sent.
func (fw *eventForwarder) any() bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.seen) > 0
}

// fromHandler is the subscription's OnEvent function. It tells the
// timeline of every event of the start's pod as it arrives. A Manager's
// start (inline) has the event forwarded here and is woken only while it
// waits for its first event; any other start is woken, as a subscription
// without the handler would be, and forwards the event itself. An event
// of another pod of the name, or without a uid, does not concern it.
func (fw *eventForwarder) fromHandler(e *corev1.Event) bool {
	if e.InvolvedObject.UID != fw.uid {
		// Another pod's, or one without a uid, which the start does not
		// follow (events.ForUID does not return it) either way.
		return !fw.em.inline
	}
	fw.time(e)
	if !fw.em.inline {
		return true
	}
	fw.forward(e)
	return fw.graceWait.Load()
}
