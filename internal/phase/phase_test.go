package phase_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/reflector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a hand-moved time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time             { return c.t }
func (c *clock) add(d time.Duration) *clock { c.t = c.t.Add(d); return c }

const uid = types.UID("u1")

func pod(mod func(p *reflector.Pod)) *reflector.Pod {
	p := &reflector.Pod{Namespace: "ns", Name: "jupyter-a", UID: uid, Phase: corev1.PodPending}
	if mod != nil {
		mod(p)
	}
	return p
}

func event(reason, msg string) *corev1.Event {
	return &corev1.Event{Reason: reason, Message: msg, InvolvedObject: corev1.ObjectReference{UID: uid}}
}

func scheduled(p *reflector.Pod) {
	p.Scheduled = reflector.PodCondition{Status: corev1.ConditionTrue}
	p.NodeName = "n-3"
}

func running(p *reflector.Pod) {
	scheduled(p)
	p.ContainerStatuses = []reflector.ContainerStatus{{Name: "notebook", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

func ready(p *reflector.Pod) {
	running(p)
	p.Ready = reflector.PodCondition{Status: corev1.ConditionTrue}
}

// TestTimelineSuccess: every phase in order, each as long as the clock
// moved in it, the pull of an image the node had not and one it had.
func TestTimelineSuccess(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Pod(pod(scheduled)) // before Created: not the start's yet
	tl.Created(uid, "quay.io/x:1")
	c.add(2 * time.Second)
	tl.Pod(pod(scheduled))
	tl.Event(event("Pulling", `Pulling image "quay.io/x:1"`))
	c.add(40 * time.Second)
	if got := tl.Now(); got != "Pulling image quay.io/x:1 on node n-3 for 40 s; the node had no copy" {
		t.Errorf("Now = %q", got)
	}
	tl.Event(event("Pulled", `Successfully pulled image "quay.io/x:1" in 40s`))
	tl.Event(event("Pulled", `Container image "busybox" already present on machine`))
	c.add(3 * time.Second)
	if got := tl.Now(); got != "Starting the containers on node n-3 for 3 s" {
		t.Errorf("Now = %q", got)
	}
	tl.Pod(pod(running))
	c.add(5 * time.Second)
	tl.Pod(pod(ready))
	c.add(time.Second) // after ready: not in any phase
	ivs := tl.End(nil)
	want := []struct {
		name string
		d    time.Duration
	}{{phase.Scheduling, 2 * time.Second}, {phase.ImagePull, 40 * time.Second}, {phase.ImagePull, 0}, {phase.ContainerStart, 3 * time.Second}, {phase.Readiness, 5 * time.Second}}
	if len(ivs) != len(want) {
		t.Fatalf("intervals = %+v, want %d", ivs, len(want))
	}
	var prevEnd time.Time
	for i, w := range want {
		iv := ivs[i]
		if iv.Name != w.name || iv.End.Sub(iv.Start) != w.d || !iv.Done || iv.Err != nil {
			t.Errorf("interval %d = %s %s done=%v err=%v, want %s %s", i, iv.Name, iv.End.Sub(iv.Start), iv.Done, iv.Err, w.name, w.d)
		}
		if iv.Start.Before(prevEnd) && iv.Name != phase.ImagePull {
			t.Errorf("interval %d (%s) starts before the one before it ends", i, iv.Name)
		}
		prevEnd = iv.End
	}
	if !ivs[2].Present() || ivs[1].Present() {
		t.Errorf("present: pulled %v, already there %v", ivs[1].Present(), ivs[2].Present())
	}
}

// TestTimelineFailedPull: the start ends during a failed pull: the pull
// carries the error, and no later phase is made up.
func TestTimelineFailedPull(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Created(uid, "quay.io/x:1")
	c.add(time.Second)
	tl.Pod(pod(scheduled))
	tl.Event(event("Pulling", `Pulling image "nope:1"`))
	c.add(time.Second)
	tl.Event(event("Failed", `Failed to pull image "nope:1": not found`))
	if got := tl.Now(); !strings.Contains(got, "the last pull failed: Failed to pull image") {
		t.Errorf("Now = %q", got)
	}
	c.add(10 * time.Second)
	failed := errors.New("ErrImagePull")
	ivs := tl.End(failed)
	var names []string
	for _, iv := range ivs {
		names = append(names, iv.Name)
	}
	if strings.Join(names, ",") != "scheduling,image_pull,container_start" {
		t.Fatalf("phases = %v", names)
	}
	if ivs[1].Err != failed || ivs[1].Done || ivs[0].Err != nil || ivs[2].Err != nil {
		t.Errorf("the error is not on the pull alone: %+v", ivs)
	}
	if d := ivs[1].End.Sub(ivs[1].Start); d != 11*time.Second {
		t.Errorf("pull lasted %s until the failure, want 11s", d)
	}
}

// TestTimelineUnschedulable: the scheduler's refusal, and an autoscaler
// that says it adds a node.
func TestTimelineUnschedulable(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Created(uid, "quay.io/x:1")
	refused := func(p *reflector.Pod) {
		p.Scheduled = reflector.PodCondition{Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu."}
	}
	wakes := tl.Watch(func(_, _ *reflector.Pod) bool { return false }, true)
	c.add(time.Second)
	if !wakes(pod(nil), pod(refused)) {
		t.Error("the first refusal did not wake the start")
	}
	if wakes(pod(refused), pod(refused)) {
		t.Error("a second refused state woke the start")
	}
	since, msg, scaleUp := tl.Unschedulable()
	if !since.Equal(time.Unix(1001, 0)) || msg != "0/3 nodes are available: 3 Insufficient cpu." || scaleUp {
		t.Errorf("Unschedulable = %v %q %v", since, msg, scaleUp)
	}
	c.add(41 * time.Second)
	if got := tl.Now(); got != "Waiting for a node for 42 s: 0/3 nodes are available: 3 Insufficient cpu." {
		t.Errorf("Now = %q", got)
	}
	tl.Event(event("TriggeredScaleUp", "pod triggered scale-up"))
	if _, _, scaleUp := tl.Unschedulable(); !scaleUp {
		t.Error("TriggeredScaleUp was not taken for an autoscaler on its way")
	}
	tl.Event(event("NotTriggerScaleUp", "pod didn't trigger scale-up"))
	if _, _, scaleUp := tl.Unschedulable(); scaleUp {
		t.Error("NotTriggerScaleUp did not cancel it")
	}
	tl.Pod(pod(scheduled))
	if since, _, _ := tl.Unschedulable(); !since.IsZero() {
		t.Error("a bound pod is still unschedulable")
	}
	// Another pod's event is not the start's.
	other := event("Pulling", `Pulling image "x"`)
	other.InvolvedObject.UID = "other"
	tl.Event(other)
	if got := tl.Now(); strings.Contains(got, "Pulling") {
		t.Errorf("another pod's event counted: %q", got)
	}
}

// TestTracerOffAndOn: nil is off (no spans, ctx unchanged); on, Emit and
// Step make child spans with the intervals' times and error status, and
// hashed names never carry the name.
func TestTracerOffAndOn(t *testing.T) {
	var off *phase.Tracer = phase.NewTracer(nil, false)
	ctx := context.Background()
	if got, _ := off.Start(ctx, "x"); got != ctx || off.On() {
		t.Error("a Tracer without a provider is not off")
	}
	off.Step(ctx, "y")(errors.New("ignored"))
	off.Emit(ctx, []phase.Interval{{Name: "z"}})
	callerTP := sdktrace.NewTracerProvider()
	defer callerTP.Shutdown(ctx)
	cctx, caller := callerTP.Tracer("hub").Start(ctx, "caller")
	if _, span := off.Start(cctx, "x"); span.IsRecording() || span == caller {
		t.Error("off, Start handed out the caller's span (which the operation would end)")
	}
	caller.End()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)
	tr := phase.NewTracer(tp, true)
	if v := tr.Name(phase.KeyUser, "alice").Value.AsString(); v == "alice" || len(v) != 16 {
		t.Errorf("hashed name = %q", v)
	}
	ctx, root := tr.Start(ctx, phase.OpStart)
	t0 := time.Unix(2000, 0)
	tr.Emit(ctx, []phase.Interval{
		{Name: phase.Scheduling, Start: t0, End: t0.Add(time.Second), Done: true},
		{Name: phase.ImagePull, Start: t0.Add(time.Second), End: t0.Add(5 * time.Second), Err: errors.New("pull failed")},
	})
	tr.Step(ctx, "create pod")(nil)
	root.End()
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
		if s.Name() != phase.OpStart && s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the operation", s.Name())
		}
	}
	// Hashed names: the error's message (which names the user's objects)
	// is not exported, only that it failed.
	if s := byName[phase.ImagePull]; s.Status().Code != codes.Error || s.Status().Description != "failed" || len(s.Events()) != 0 || !s.StartTime().Equal(t0.Add(time.Second)) || !s.EndTime().Equal(t0.Add(5*time.Second)) {
		t.Errorf("image_pull span: status %+v, events %v, %s to %s", s.Status(), s.Events(), s.StartTime(), s.EndTime())
	}
	plain := phase.NewTracer(tp, false)
	pctx, op := plain.Start(context.Background(), phase.OpStop)
	plain.Step(pctx, phase.Delete)(errors.New("pods \"jupyter-alice\" is forbidden"))
	op.End()
	for _, s := range rec.Ended() {
		if s.Name() == phase.Delete && (s.Status().Description != `pods "jupyter-alice" is forbidden` || len(s.Events()) != 1) {
			t.Errorf("unhashed: status %+v, events %v; want the message and the error recorded", s.Status(), s.Events())
		}
	}
	if s := byName[phase.Scheduling]; s.Status().Code != codes.Unset {
		t.Errorf("scheduling span status %+v", s.Status())
	}
	if phase.TraceID(ctx) != root.SpanContext().TraceID().String() || phase.TraceID(context.Background()) != "" {
		t.Error("TraceID")
	}
}

// TestTimelinePullWithoutPulled: a kubelet whose Pulling event names no
// image and that never says Pulled (events are best-effort; the
// simulated cluster's does this): the pull is the pod's main image's,
// and ends when a container is made from it.
func TestTimelinePullWithoutPulled(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Created(uid, "quay.io/x:1")
	tl.Pod(pod(scheduled))
	tl.Event(event("Pulling", "Pulling image"))
	c.add(3 * time.Second)
	tl.Event(event("Started", "Started container"))
	c.add(time.Second)
	tl.Pod(pod(ready))
	ivs := tl.End(nil)
	if len(ivs) != 4 || ivs[1].Name != phase.ImagePull || !ivs[1].Done || ivs[1].End.Sub(ivs[1].Start) != 3*time.Second {
		t.Fatalf("intervals = %+v", ivs)
	}
	if img, _ := attr(ivs[1], phase.KeyImage); img != "quay.io/x:1" {
		t.Errorf("image = %q", img)
	}
}

func attr(iv phase.Interval, k attribute.Key) (string, bool) {
	for _, a := range iv.Attrs {
		if a.Key == k {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// TestTimelineEventOnce: an occurrence of an event brought twice (the
// handler, then the start's replay) is timed when it first came; End
// gives the phases once.
func TestTimelineEventOnce(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Created(uid, "img")
	tl.Pod(pod(scheduled))
	pulling := event("Pulling", `Pulling image "img"`)
	pulling.UID, pulling.Count = "e1", 1
	tl.Event(pulling)
	c.add(5 * time.Second)
	tl.Event(pulling) // replayed
	if got := tl.Now(); got != "Pulling image img on node n-3 for 5 s; the node had no copy" {
		t.Errorf("Now = %q", got)
	}
	if ivs := tl.End(nil); len(ivs) == 0 {
		t.Fatal("no phases")
	}
	if again := tl.End(errors.New("x")); again != nil {
		t.Errorf("End again = %v, want nothing", again)
	}
}

// TestTimelineLatePull: the kubelet's Pulling reaches the start only
// after the pod's containers were seen running (the event informer lags
// the pod informer): the pull is over, timed by the event's own clock
// within what is known, and ends when the containers ran.
func TestTimelineLatePull(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tl := phase.NewTimeline(c.now)
	tl.Created(uid, "img")
	c.add(time.Second)
	tl.Pod(pod(scheduled)) // 1001
	c.add(3 * time.Second)
	tl.Pod(pod(running)) // 1004
	c.add(time.Second)
	late := event("Pulling", `Pulling image "img"`)
	late.LastTimestamp = metav1.NewTime(time.Unix(1002, 0))
	tl.Event(late)
	c.add(time.Second)
	tl.Pod(pod(ready))
	ivs := tl.End(nil)
	var pull *phase.Interval
	for i := range ivs {
		if ivs[i].Name == phase.ImagePull {
			pull = &ivs[i]
		}
	}
	if pull == nil || !pull.Done || !pull.Start.Equal(time.Unix(1002, 0)) || !pull.End.Equal(time.Unix(1004, 0)) {
		t.Fatalf("late pull = %+v; want done, from the event's time to the containers running", pull)
	}
}
