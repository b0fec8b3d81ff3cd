package phase

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/reflector"
)

// Timeline is what one start has seen of its pod since the pod's
// create: when it was bound and to which node, each image pull, when its
// containers ran and when it was ready, and whether the scheduler found
// it unschedulable. Pod and Event are called from the informers'
// goroutines, the rest from the start's: a mutex orders them. A nil
// Timeline records nothing.
type Timeline struct {
	now func() time.Time

	mu      sync.Mutex
	uid     types.UID
	created time.Time
	// scheduled: first seen bound (node: its node); unschedulable: first
	// seen refused by the scheduler, with its message, while not bound.
	scheduled        time.Time
	node             string
	unschedulable    time.Time
	unschedulableMsg string
	// scaleUp: an autoscaler's latest word is that it adds a node for
	// the pod (TriggeredScaleUp, Nominated), not that it will not
	// (NotTriggerScaleUp).
	scaleUp        bool
	running, ready time.Time
	pulls          []*pull
	// seen: the event occurrences (uid, count) recorded; ended: End ran.
	seen  map[occurrence]bool
	ended bool
	// image names a pull whose event does not (a kubelet's message
	// quotes the image; a simulated one's may not).
	image string
}

type occurrence struct {
	uid   types.UID
	count int32
}

type pull struct {
	image      string
	start, end time.Time
	present    bool   // the node had it (Pulled without a pull)
	failed     string // the kubelet's message of a failed pull
}

// NewTimeline returns a Timeline timed by now.
func NewTimeline(now func() time.Time) *Timeline { return &Timeline{now: now} }

// Created records the pod's create, which every later phase follows;
// image is its main container's, for pull events that do not name one.
func (tl *Timeline) Created(uid types.UID, image string) {
	if tl == nil {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.uid, tl.created, tl.image = uid, tl.now(), image
}

// Pod records what a state of the start's pod shows; other pods of the
// name are ignored.
func (tl *Timeline) Pod(p *reflector.Pod) {
	if tl == nil || p == nil {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.uid == "" || p.UID != tl.uid {
		return
	}
	now := tl.now()
	if tl.scheduled.IsZero() && p.Scheduled.Status == corev1.ConditionTrue {
		tl.scheduled, tl.node = now, p.NodeName
	}
	if tl.scheduled.IsZero() && tl.unschedulable.IsZero() && p.Scheduled.Status == corev1.ConditionFalse && p.Scheduled.Reason == corev1.PodReasonUnschedulable {
		tl.unschedulable, tl.unschedulableMsg = now, p.Scheduled.Message
	}
	if tl.node == "" {
		tl.node = p.NodeName
	}
	if tl.running.IsZero() && allRunning(p) {
		tl.running = now
		tl.pulledBy(now)
	}
	if tl.ready.IsZero() && p.Ready.Status == corev1.ConditionTrue {
		tl.ready = now
	}
}

func allRunning(p *reflector.Pod) bool {
	if len(p.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// Event records what an event of the start's pod says about its phases:
// image pulls and autoscalers.
func (tl *Timeline) Event(e *corev1.Event) {
	if tl == nil {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.uid == "" || e.InvolvedObject.UID != tl.uid {
		return
	}
	// The handler and the start's replay of earlier events may both
	// bring one: the first is the one timed.
	if e.UID != "" {
		o := occurrence{e.UID, e.Count}
		if tl.seen[o] {
			return
		}
		if tl.seen == nil {
			tl.seen = map[occurrence]bool{}
		}
		tl.seen[o] = true
	}
	now := tl.now()
	if !tl.running.IsZero() {
		// Seen only after the containers ran (the event informer lags the
		// pod's): the pull was over by then. Its own time, within what
		// is known of it, is the best there is.
		now = clampTime(reflector.EventTime(e), tl.scheduled, tl.running)
	}
	switch e.Reason {
	case "Pulling":
		if p := tl.pullOf(quoted(e.Message)); p.start.IsZero() {
			p.start = now
			if !tl.running.IsZero() && p.end.IsZero() {
				p.end = tl.running
			}
		}
	case "Pulled":
		p := tl.pullOf(quoted(e.Message))
		if p.end.IsZero() {
			p.end = now
			p.present = p.start.IsZero() && strings.Contains(e.Message, "already present")
			if p.start.IsZero() {
				p.start = now
			}
		}
	case "Failed", "ErrImagePull", "InspectFailed":
		if img := quoted(e.Message); img != "" && strings.Contains(strings.ToLower(e.Message), "image") {
			p := tl.pullOf(img)
			if p.start.IsZero() {
				p.start = now
			}
			p.failed = e.Message
		}
	case "Created", "Started":
		// A container made from its image: its pull is over, whether
		// or not a Pulled event said so.
		tl.pulledBy(now)
	case "TriggeredScaleUp", "Nominated":
		tl.scaleUp = true
	case "NotTriggerScaleUp":
		tl.scaleUp = false
	}
}

// clampTime is t within [lo, hi] (lo zero: no lower bound).
func clampTime(t, lo, hi time.Time) time.Time {
	if !lo.IsZero() && t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// pulledBy ends the pulls still open at now (tl.mu held).
func (tl *Timeline) pulledBy(now time.Time) {
	for _, p := range tl.pulls {
		if p.end.IsZero() {
			p.end, p.failed = now, ""
		}
	}
}

// pullOf is the pull of image (tl.mu held).
func (tl *Timeline) pullOf(image string) *pull {
	if image == "" {
		image = tl.image
	}
	for _, p := range tl.pulls {
		if p.image == image {
			return p
		}
	}
	p := &pull{image: image}
	tl.pulls = append(tl.pulls, p)
	return p
}

// quoted is the first double-quoted string of a kubelet message (the
// image of `Pulling image "x"`), else "".
func quoted(msg string) string {
	i := strings.IndexByte(msg, '"')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(msg[i+1:], '"')
	if j < 0 {
		return ""
	}
	return msg[i+1 : i+1+j]
}

// Unschedulable reports since when the scheduler has refused the pod
// (zero: it has not, or the pod is bound), its message, and whether an
// autoscaler said it is adding a node for it.
func (tl *Timeline) Unschedulable() (since time.Time, msg string, scaleUp bool) {
	if tl == nil {
		return time.Time{}, "", false
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if !tl.scheduled.IsZero() {
		return time.Time{}, "", false
	}
	return tl.unschedulable, tl.unschedulableMsg, tl.scaleUp
}

// Node is the node the pod was bound to, "" before.
func (tl *Timeline) Node() string {
	if tl == nil {
		return ""
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.node
}

// Now says what the start waits for and for how long, as a progress
// message ("" before the pod's create).
func (tl *Timeline) Now() string {
	if tl == nil {
		return ""
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.created.IsZero() {
		return ""
	}
	now := tl.now()
	on := ""
	if tl.node != "" {
		on = " on node " + tl.node
	}
	switch {
	case tl.scheduled.IsZero() && !tl.unschedulable.IsZero():
		msg := fmt.Sprintf("Waiting for a node for %s: %s", secs(now.Sub(tl.created)), tl.unschedulableMsg)
		if tl.scaleUp {
			msg += "; an autoscaler is adding a node"
		}
		return msg
	case tl.scheduled.IsZero():
		return fmt.Sprintf("Waiting to be scheduled for %s", secs(now.Sub(tl.created)))
	}
	for _, p := range tl.pulls {
		if p.end.IsZero() && !p.start.IsZero() {
			msg := fmt.Sprintf("Pulling image %s%s for %s; the node had no copy", p.image, on, secs(now.Sub(p.start)))
			if p.failed != "" {
				msg += "; the last pull failed: " + p.failed
			}
			return msg
		}
	}
	if tl.running.IsZero() {
		return fmt.Sprintf("Starting the containers%s for %s", on, secs(now.Sub(tl.containersFrom())))
	}
	return fmt.Sprintf("Waiting for the server%s to be ready for %s", on, secs(now.Sub(tl.running)))
}

// secs is d in whole seconds, the way a progress message says it.
func secs(d time.Duration) string { return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second)) }

// containersFrom is when the container start began: after the binding
// and the last pull (tl.mu held).
func (tl *Timeline) containersFrom() time.Time {
	from := tl.scheduled
	for _, p := range tl.pulls {
		if p.end.After(from) {
			from = p.end
		}
	}
	return from
}

// End closes the timeline at the start's end: its phases from the
// create on, the one it failed in (when failed is set) carrying failed
// as its error. Phases never seen are left out, except the one a
// failure ended. Only the first call returns them.
func (tl *Timeline) End(failed error) []Interval {
	if tl == nil {
		return nil
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.created.IsZero() || tl.ended {
		return nil
	}
	tl.ended = true
	end := tl.now()
	if !tl.ready.IsZero() && failed == nil {
		end = tl.ready
	}
	clamp := func(x time.Time) time.Time {
		if x.IsZero() || x.After(end) {
			return end
		}
		return x
	}
	var ivs []Interval
	add := func(name string, from, to time.Time, attrs ...attribute.KeyValue) {
		iv := Interval{Name: name, Start: clamp(from), End: clamp(to), Done: !to.IsZero() && !to.After(end), Attrs: attrs}
		if iv.End.Before(iv.Start) {
			iv.End = iv.Start
		}
		ivs = append(ivs, iv)
	}
	node := []attribute.KeyValue{KeyNode.String(tl.node)}
	add(Scheduling, tl.created, tl.scheduled, node...)
	if !tl.scheduled.IsZero() {
		for _, p := range tl.pulls {
			add(ImagePull, p.start, p.end, KeyImage.String(p.image), KeyNode.String(tl.node), KeyPresent.Bool(p.present))
		}
		add(ContainerStart, tl.containersFrom(), tl.running, node...)
		if !tl.running.IsZero() {
			add(Readiness, tl.running, tl.ready, node...)
		}
	}
	if failed != nil {
		// The phase the start failed in: a failed pull first, else the
		// first that did not end.
		at := -1
		for i, iv := range ivs {
			if iv.Name == ImagePull && !iv.Done {
				at = i
				break
			}
		}
		for i := range ivs {
			if at < 0 && !ivs[i].Done {
				at = i
			}
		}
		if at < 0 {
			at = len(ivs) - 1
		}
		ivs[at].Err = failed
	}
	return ivs
}

// Watch wraps a start's wake function (reflector.Registry.SubscribeIf):
// every update of the pod is recorded first, and the first time the
// scheduler refuses the pod wakes the start too when wakeUnschedulable
// is set (it then arms its unschedulable timer).
func (tl *Timeline) Watch(wakes func(old, updated *reflector.Pod) bool, wakeUnschedulable bool) func(old, updated *reflector.Pod) bool {
	return func(old, updated *reflector.Pod) bool {
		tl.Pod(updated)
		if wakes(old, updated) {
			return true
		}
		return wakeUnschedulable && refused(updated) && (old == nil || !refused(old))
	}
}

func refused(p *reflector.Pod) bool {
	return p.Scheduled.Status == corev1.ConditionFalse && p.Scheduled.Reason == corev1.PodReasonUnschedulable
}
