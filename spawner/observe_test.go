package spawner

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

func tracedSpawner(t *testing.T, server naming.Server, cfg kubespawner.Config) (*Spawner, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s, err := New(server, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, rec
}

// children are the ended spans whose parent is parent, by start time.
func children(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].StartTime().Before(out[j-1].StartTime()); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func named(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// TestStartAndStopTraced: a start under a hub's span is one
// spawnkit.start span under it, with a child per object and per phase of
// the wait, in order and within it, and its progress carries the trace
// id; its OnPhase reports the same phases; a stop is spawnkit.stop with
// delete, terminating and gone.
func TestStartAndStopTraced(t *testing.T) {
	ns := newNamespace(t)
	s, rec := tracedSpawner(t, naming.Server{Username: "traced", Servername: "one"}, baseConfig(ns))
	ctx := ctxTimeout(t, 60*time.Second)
	hubTP := sdktrace.NewTracerProvider()
	defer hubTP.Shutdown(context.Background())
	hctx, hub := hubTP.Tracer("hub").Start(ctx, "hub")
	defer hub.End()

	opts := hubStart()
	var evs []ProgressEvent
	var phases []string
	opts.OnProgress = func(e ProgressEvent) { evs = append(evs, e) }
	opts.OnPhase = func(p PhaseTiming) { phases = append(phases, p.Phase) }
	if _, err := s.Start(hctx, opts); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	start := named(spans, phase.OpStart)
	if start == nil || start.Parent().SpanID() != hub.SpanContext().SpanID() || start.SpanContext().TraceID() != hub.SpanContext().TraceID() {
		t.Fatalf("no spawnkit.start under the hub's span: %v", start)
	}
	var names []string
	for _, c := range children(spans, start) {
		names = append(names, c.Name())
		if c.StartTime().Before(start.StartTime()) || c.EndTime().After(start.EndTime()) {
			t.Errorf("%s [%s, %s] is not within the start [%s, %s]", c.Name(), c.StartTime(), c.EndTime(), start.StartTime(), start.EndTime())
		}
		if c.Status().Code == codes.Error {
			t.Errorf("%s failed: %s", c.Name(), c.Status().Description)
		}
	}
	// The creates in the order made, and the wait's phases in theirs;
	// the two overlap (the kubelet pulls while the Secret is made).
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	if got, want := strings.Join(sorted, ","), "container_start,create pod,create secret,image_pull,plan,readiness,scheduling"; got != want {
		t.Errorf("the start's children = %v", names)
	}
	order := func(seq ...string) {
		at := -1
		for _, n := range seq {
			i := slices.Index(names, n)
			if i < at {
				t.Errorf("%s began before the phase before it: %v", n, names)
			}
			at = i
		}
	}
	order("plan", "create pod", "create secret")
	order("create pod", "scheduling", "image_pull", "container_start", "readiness")
	if v := attrOf(start, "k8s.pod.name"); v != s.State().PodName {
		t.Errorf("k8s.pod.name = %q", v)
	}
	if v := attrOf(named(spans, phase.Scheduling), "k8s.node.name"); v == "" {
		t.Error("scheduling names no node")
	}
	if v := attrOf(named(spans, phase.ImagePull), "container.image.name"); v != "quay.io/jupyter/base-notebook:2024-01-01" {
		t.Errorf("image_pull image = %q", v)
	}
	if got, want := strings.Join(phases, ","), "plan,objects,scheduling,image_pull,container_start,readiness"; got != want {
		t.Errorf("OnPhase = %s, want %s", got, want)
	}
	for _, e := range evs {
		if e.TraceID != hub.SpanContext().TraceID().String() {
			t.Fatalf("progress event %q has trace id %q", e.Message, e.TraceID)
		}
	}

	sctx, stopSpan := hubTP.Tracer("hub").Start(ctx, "hub stop")
	if err := s.Stop(sctx, StopOptions{}); err != nil {
		t.Fatal(err)
	}
	stopSpan.End()
	spans = rec.Ended()
	stop := named(spans, phase.OpStop)
	if stop == nil || stop.Parent().SpanID() != stopSpan.SpanContext().SpanID() {
		t.Fatalf("no spawnkit.stop under the hub's stop span")
	}
	names = nil
	for _, c := range children(spans, stop) {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, ","); got != "delete,terminating,gone" {
		t.Errorf("the stop's children = %s", got)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	if s == nil {
		return ""
	}
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestUnschedulableTimeout: a pod no node takes ends its start after
// unschedulable_timeout with reason Unschedulable and the scheduler's
// message (a traced start nobody follows reads the events too); the pod
// is deleted, the bound claim kept, and the trace's scheduling span
// carries the failure. An
// autoscaler's TriggeredScaleUp holds the bound off (pending_timeout then
// ends it), and 0 turns it off.
func TestUnschedulableTimeout(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.UnschedulableTimeout = ptr.To[kubespawner.Seconds](1)
	cfg.Pod.NodeSelector = map[string]string{"spawnkit.dev/no-such-node": "true"}
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	cfg.PVCNameTemplate = "claim-{username}"
	s, rec := tracedSpawner(t, naming.Server{Username: "nonode"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	_, err := s.Start(ctx, hubStart())
	var se *StartError
	if !errors.As(err, &se) || se.Reason != ReasonUnschedulable || !strings.Contains(se.Error(), "node(s) didn't match") {
		t.Fatalf("Start = %v; want reason Unschedulable with the scheduler's message", err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still there (%v)", err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-nonode", metav1.GetOptions{}); err != nil {
		t.Errorf("the claim was not kept: %v", err)
	}
	sched := named(rec.Ended(), phase.Scheduling)
	if sched == nil || sched.Status().Code != codes.Error {
		t.Errorf("scheduling span = %v; want it failed", sched)
	}
	if start := named(rec.Ended(), phase.OpStart); attrOf(start, "spawnkit.reason") != "Unschedulable" || start.Status().Code != codes.Error {
		t.Errorf("spawnkit.start does not say Unschedulable")
	}

	// An autoscaler on its way: the bound waits; pending_timeout ends it.
	// The event comes moments after the pod: 3 s leaves room on a busy
	// machine; without the event the bound would end it at 3 s.
	cfg.UnschedulableTimeout = ptr.To[kubespawner.Seconds](3)
	cfg.PendingTimeout = 8
	cfg.StoragePVCEnsure = false
	a := newSpawner(t, naming.Server{Username: "scaling"}, cfg)
	done := make(chan error, 1)
	followed := hubStart()
	followed.OnProgress = func(ProgressEvent) {} // so the start reads the events
	go func() { _, err := a.Start(ctx, followed); done <- err }()
	var pod *corev1.Pod
	testutil.Eventually(t, 20*time.Second, "the pod of the start", func() error {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "jupyter-scaling", metav1.GetOptions{})
		pod = p
		return err
	})
	if _, err := cluster.Client.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "scale-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID},
		Reason:         "TriggeredScaleUp", Message: "pod triggered scale-up: [{pool 1->2 (max: 5)}]", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "cluster-autoscaler"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.As(err, &se) || se.Reason != ReasonPendingTimeout {
		t.Errorf("with an autoscaler on its way: %v; want pending_timeout to end it, not the unschedulable bound", err)
	}
}

// TestProgressSaysWhatTheStartWaitsFor: while a pod's containers take
// their time, the progress says which phase the start is in, on which
// node and for how long.
func TestProgressSaysWhatTheStartWaitsFor(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.ReadyAfterAnnotation: "3s"}
	s := newSpawner(t, naming.Server{Username: "slowpoke"}, cfg)
	s.b.progressEvery = 500 * time.Millisecond
	ctx := ctxTimeout(t, 60*time.Second)
	opts := hubStart()
	var msgs []string
	opts.OnProgress = func(e ProgressEvent) { msgs = append(msgs, e.Message) }
	if _, err := s.Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	says := regexp.MustCompile(`^(Pulling image quay\.io/jupyter/base-notebook:2024-01-01 on node \S+ for \d+ s; the node had no copy|Starting the containers on node \S+ for \d+ s|Waiting to be scheduled for \d+ s)$`)
	n := 0
	for _, m := range msgs {
		if says.MatchString(m) {
			n++
		}
	}
	if n == 0 {
		t.Errorf("no progress message said what the start waited for: %q", msgs)
	}
}

// TestTracingOffLeavesTheCallersSpan: without a TracerProvider an
// operation makes no span and never touches the caller's: not ended, not
// marked failed, no attribute added.
func TestTracingOffLeavesTheCallersSpan(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorImagePullError}
	s := newSpawner(t, naming.Server{Username: "untraced"}, cfg)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, caller := tp.Tracer("hub").Start(ctxTimeout(t, 60*time.Second), "request")
	if _, err := s.Start(ctx, hubStart()); err == nil {
		t.Fatal("the start of a pod whose image cannot be pulled succeeded")
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans ended before the caller ended its own", n)
	}
	caller.End()
	got := rec.Ended()
	if len(got) != 1 || got[0].Status().Code != codes.Unset || len(got[0].Attributes()) != 0 {
		t.Errorf("the caller's span was touched: %d spans, status %+v, attributes %v", len(got), got[0].Status(), got[0].Attributes())
	}
}

// TestHashedNamesNeverLeaveInSpans: with HashNames a failed start's spans
// carry the user's name nowhere: not in attributes, status or events.
func TestHashedNamesNeverLeaveInSpans(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorImagePullError}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	s, err := New(naming.Server{Username: "zelda-private", Servername: "secretlab"}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg, TracerProvider: tp, HashNames: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err == nil || !strings.Contains(err.Error(), "zelda-private") {
		t.Fatalf("Start = %v; want a failure naming the user (to the hub, not the trace)", err)
	}
	spans := rec.Ended()
	if len(spans) < 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, sp := range spans {
		texts := []string{sp.Name(), sp.Status().Description}
		for _, a := range sp.Attributes() {
			texts = append(texts, a.Value.Emit())
		}
		for _, e := range sp.Events() {
			texts = append(texts, e.Name)
			for _, a := range e.Attributes {
				texts = append(texts, a.Value.Emit())
			}
		}
		for _, x := range texts {
			if strings.Contains(x, "zelda") || strings.Contains(x, "secretlab") {
				t.Errorf("span %s carries the name: %q", sp.Name(), x)
			}
		}
	}
	if start := named(spans, phase.OpStart); start.Status().Description != "ErrImagePull" {
		t.Errorf("spawnkit.start status = %+v, want the reason alone", start.Status())
	}
}
