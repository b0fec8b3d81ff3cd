package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// TestManagerTracesAndPhaseMetrics: with ConcurrentSpawnLimit 1 a second
// start waits for a slot: its trace is spawnkit.spawn under the hub's
// span with slot_wait, then spawnkit.start and its phases; the phase
// histogram has every phase of the starts, the stops are counted by
// outcome (failed at 0 from the start), and this Manager leads.
func TestManagerTracesAndPhaseMetrics(t *testing.T) {
	ns := newNamespace(t)
	reg := prometheus.NewRegistry()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.ReadyAfterAnnotation: "1s"}
	m, _ := runManager(t, Options{Config: cfg, Registerer: reg, TracerProvider: tp, ConcurrentSpawnLimit: 1})
	ctx := ctxTimeout(t, 60*time.Second)
	hubTP := sdktrace.NewTracerProvider()
	defer hubTP.Shutdown(context.Background())

	first, second := naming.Server{Username: "tr-first"}, naming.Server{Username: "tr-second"}
	if _, _, err := m.Spawn(ctx, first, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	hctx, hub := hubTP.Tracer("hub").Start(ctx, "hub")
	if _, _, err := m.Spawn(hctx, second, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	hub.End()
	waitStatus(t, m, first, "running", phaseIs(PhaseRunning))
	waitStatus(t, m, second, "running", phaseIs(PhaseRunning))
	if _, err := m.Stop(ctx, first, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	// A start the hub stops before it is ready is cancelled, not failed:
	// the failure ratio of the shipped rules must not count it.
	third := naming.Server{Username: "tr-third"}
	slowCfg := baseConfig(ns)
	slowCfg.ExtraAnnotations = map[string]string{testcluster.ReadyAfterAnnotation: "60s"}
	slow := SpawnOptions{Config: &slowCfg}
	if _, _, err := m.Spawn(ctx, third, slow); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the third start's pod", func() error {
		_, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "jupyter-tr-third", metav1.GetOptions{})
		return err
	})
	if _, err := m.Stop(ctx, third, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}

	var spawn sdktrace.ReadOnlySpan
	testutil.Eventually(t, 10*time.Second, "the second start's spawnkit.spawn span", testutil.True(func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == phase.OpSpawn && s.Parent().SpanID() == hub.SpanContext().SpanID() {
				spawn = s
				return true
			}
		}
		return false
	}))
	var kids []string
	var start sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == spawn.SpanContext().SpanID() {
			kids = append(kids, s.Name())
			if s.Name() == phase.OpStart {
				start = s
			}
		}
	}
	if strings.Join(kids, ",") != "slot_wait,spawnkit.start" {
		t.Errorf("spawnkit.spawn's children = %v, want slot_wait then spawnkit.start", kids)
	}
	if start == nil || spawn.Status().Code == codes.Error {
		t.Fatalf("spawnkit.start %v, spawn status %+v", start, spawn.Status())
	}
	var phases []string
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == start.SpanContext().SpanID() {
			phases = append(phases, s.Name())
		}
	}
	for _, want := range []string{phase.Plan, "create pod", phase.Scheduling, phase.ContainerStart, phase.Readiness} {
		if !strings.Contains(","+strings.Join(phases, ",")+",", ","+want+",") {
			t.Errorf("spawnkit.start lacks %s: %v", want, phases)
		}
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	counts := map[string]uint64{}
	for _, mt := range byName["spawnkit_manager_start_phase_duration_seconds"].GetMetric() {
		counts[label(mt, "phase")] = mt.GetHistogram().GetSampleCount()
	}
	for _, p := range []string{phase.SlotWait, phase.Plan, phase.Objects, phase.Scheduling, phase.ContainerStart, phase.Readiness} {
		if counts[p] < 1 {
			t.Errorf("phase %s observed %d times; all: %v", p, counts[p], counts)
		}
	}
	if counts[phase.SlotWait] != 3 || counts[phase.Readiness] != 2 {
		t.Errorf("three starts, two ready: slot_wait %d, readiness %d observations", counts[phase.SlotWait], counts[phase.Readiness])
	}
	outcomes := map[string]uint64{}
	for _, mt := range byName["spawnkit_manager_spawn_duration_seconds"].GetMetric() {
		outcomes[label(mt, "outcome")] += mt.GetHistogram().GetSampleCount()
	}
	if outcomes["ready"] != 2 || outcomes["cancelled"] != 1 || outcomes["failed"] != 0 {
		t.Errorf("spawn outcomes = %v, want ready 2, cancelled 1, failed 0", outcomes)
	}
	stops := map[string]float64{}
	for _, mt := range byName["spawnkit_manager_stops_total"].GetMetric() {
		stops[label(mt, "outcome")] = mt.GetCounter().GetValue()
	}
	if v, ok := stops["failed"]; stops["stopped"] != 2 || !ok || v != 0 {
		t.Errorf("stops = %v, want stopped 2 and failed present at 0", stops)
	}
	if g := byName["spawnkit_manager_leading"].GetMetric(); len(g) != 1 || g[0].GetGauge().GetValue() != 1 {
		t.Errorf("leading = %v", g)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestRecoveryLogsOneLine: a Manager that finds servers running logs one
// summary line for them, not one line per server (those are at V(1)).
func TestRecoveryLogsOneLine(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	first, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 60*time.Second)
	for i := range 3 {
		s := naming.Server{Username: fmt.Sprintf("rec-%d", i)}
		if _, _, err := first.Spawn(ctx, s, SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, first, s, "running", phaseIs(PhaseRunning))
	}
	lines := newLogLines()
	m := startManager(t, lines.ctx(ctx), Options{Config: cfg})
	lines.waitLine(t, 30*time.Second, "recovered the servers found in the cluster", `"servers"=3`, `"running"=3`)
	settle(t, m)
	for {
		select {
		case line := <-lines.ch:
			if strings.Contains(line, `"msg"="phase"`) || strings.Contains(line, `"phase"`) && strings.Contains(line, "rec-") {
				t.Errorf("a recovered server logged its own line at V(0): %s", line)
			}
			continue
		default:
		}
		break
	}
}
