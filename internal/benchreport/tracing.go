package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// sideTraced is spawnkit with tracing on: a third side of the start and
// manager rows under -tracing, beside "raw" and "spawnkit" (tracing off).
const sideTraced = "traced"

// traceSpec is where a traced child sends its spans: Jaeger's OTLP gRPC
// receiver, under a service name of the run's own, by which the parent
// finds the run's traces in Jaeger afterwards.
type traceSpec struct {
	Endpoint string `json:"endpoint"` // host:port
	Service  string `json:"service"`
}

// countingExporter counts the spans its exporter delivered (an export
// that returned no error) and the exports that failed.
type countingExporter struct {
	sdktrace.SpanExporter
	spans, failed atomic.Int64
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.failed.Add(1)
		return err
	}
	e.spans.Add(int64(len(spans)))
	return nil
}

// newTracing is what a hub that traces runs: an SDK TracerProvider whose
// batch span processor (the SDK's defaults: every 5 s or 512 spans)
// exports over OTLP gRPC, here to Jaeger on loopback.
func newTracing(ctx context.Context, spec traceSpec) (*sdktrace.TracerProvider, *countingExporter, error) {
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(spec.Endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, nil, fmt.Errorf("the OTLP exporter: %w", err)
	}
	counted := &countingExporter{SpanExporter: exp}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(counted),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", spec.Service))))
	return tp, counted, nil
}

// traceService is the service name of one traced run.
func traceService(api string, n, repeat int) string {
	return fmt.Sprintf("benchreport-%s-%d-r%d", api, n, repeat+1)
}

// rootSpan is the span each spawn of api makes at its root.
func rootSpan(api string) string {
	if api == apiManager {
		return phase.OpSpawn
	}
	return phase.OpStart
}

// verifyTraces reads the traced run's traces back from Jaeger's query API
// (GET /api/traces?service=...): at least one must hold the spawn's root
// span with a phase span under it, or the run's spans did not arrive and
// its cost means nothing. It returns how many traces of the service hold
// the root span (up to limit), waiting up to 15 s for the first.
func verifyTraces(ctx context.Context, j *testutil.Jaeger, service, root string, limit int) (int, error) {
	var found int
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		traces, err := j.Traces(ctx, service, limit)
		if err != nil {
			last = err
			return false, nil
		}
		found = 0
		complete := false
		for _, tr := range traces {
			var rootID string
			for _, sp := range tr.Spans {
				if sp.OperationName == root {
					rootID = sp.SpanID
				}
			}
			if rootID == "" {
				continue
			}
			found++
			for _, sp := range tr.Spans {
				for _, ref := range sp.References {
					if ref.RefType == "CHILD_OF" && ref.SpanID == rootID {
						complete = true
					}
				}
			}
		}
		if !complete {
			last = fmt.Errorf("%d traces of service %s, %d with a %s span, none with a phase span under it", len(traces), service, found, root)
		}
		return complete, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w: %w", err, last)
		}
		return found, fmt.Errorf("no trace of the run in jaeger: %w", err)
	}
	return found, nil
}

// startJaeger starts the Jaeger the traced runs export to, with its files
// in a directory of its own that stop removes.
func startJaeger(ctx context.Context) (*testutil.Jaeger, func(), error) {
	bin, err := testutil.JaegerBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("%w; build it with `make jaeger` or set SPAWNKIT_JAEGER", err)
	}
	dir, err := os.MkdirTemp("", "benchreport-jaeger-")
	if err != nil {
		return nil, nil, err
	}
	j, stopJaeger, err := testutil.LaunchJaeger(ctx, bin, dir)
	if err != nil {
		return nil, nil, err // its output stays in dir
	}
	fmt.Fprintf(os.Stderr, "jaeger %s: OTLP gRPC %s, query %s\n", testutil.JaegerVersion, j.OTLPGRPCEndpoint(), j.QueryURL())
	return j, func() {
		if err := stopJaeger(); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
		}
		_ = os.RemoveAll(dir)
	}, nil
}

// tracingRows are the rows -tracing adds for one API and size, from the
// same repeats as the rows without tracing.
type tracingRows struct {
	// cpu is the CPU per spawn with tracing on against raw client-go;
	// onOff the same against spawnkit with tracing off (on/off).
	cpu, onOff Measure
	// cost is on minus off in µs of client CPU per spawn; spans the spans
	// exported per spawn. Neither has a raw side.
	cost, spans Measure
	detail      []tracedDetail
}

// tracedDetail is one traced run, in the spans row's Detail.
type tracedDetail struct {
	Repeat int `json:"repeat"`
	// SpansPerSpawn were exported in the measured window; TracesInJaeger
	// is how many of the run's traces (the warm-up's included) Jaeger
	// returned with the root span; ExportErrors the exports that failed.
	SpansPerSpawn  float64 `json:"spans_per_spawn"`
	TracesInJaeger int     `json:"traces_in_jaeger"`
	ExportErrors   int64   `json:"export_errors,omitempty"`
}

func newTracingRows(what string, n int) *tracingRows {
	return &tracingRows{
		cpu: Measure{Name: fmt.Sprintf("client CPU per spawn, %s, tracing on, %d concurrent", what, n), Unit: "CPU ms/spawn",
			Better: Lower},
		onOff: Measure{Name: fmt.Sprintf("client CPU per spawn, %s, tracing on (spawnkit) vs off (raw column), %d concurrent", what, n),
			Unit: "CPU ms/spawn", Better: Lower},
		cost: Measure{Name: fmt.Sprintf("tracing cost per spawn (on − off), %s, %d concurrent", what, n), Unit: "CPU µs/spawn",
			Better: Lower},
		spans: Measure{Name: fmt.Sprintf("spans exported per spawn, %s, tracing on, %d concurrent", what, n), Unit: "spans/spawn",
			Better: Lower},
	}
}

// add records one repeat's three sides.
func (t *tracingRows) add(n int, raw, off, on spawnResult) {
	t.cpu.Add(msPer(on.CPU, n), msPer(raw.CPU, n))
	t.onOff.Add(msPer(on.CPU, n), msPer(off.CPU, n))
	t.cost.Spawnkit = append(t.cost.Spawnkit, 1000*(msPer(on.CPU, n)-msPer(off.CPU, n)))
	t.spans.Spawnkit = append(t.spans.Spawnkit, float64(on.Spans)/float64(n))
}

// record keeps a traced run's detail, whether or not its repeat has the
// other sides.
func (t *tracingRows) record(repeat, n int, on spawnResult) {
	t.detail = append(t.detail, tracedDetail{Repeat: repeat + 1, SpansPerSpawn: float64(on.Spans) / float64(n),
		TracesInJaeger: on.TracesInJaeger, ExportErrors: on.ExportErrors})
}

func (t *tracingRows) fail(msg string) {
	for _, m := range []*Measure{&t.cpu, &t.onOff, &t.cost, &t.spans} {
		m.Failed = append(m.Failed, msg)
	}
}

func (t *tracingRows) measures() []Measure {
	t.spans.Detail = t.detail
	return []Measure{t.cpu, t.onOff, t.cost, t.spans}
}

// errNoSpans is a traced run whose exporter delivered nothing.
var errNoSpans = errors.New("tracing on, but the exporter delivered no span")
