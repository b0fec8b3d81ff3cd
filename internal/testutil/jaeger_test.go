package testutil

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestJaegerReadsBackWhatTheSDKSent sends a parent and a child span with
// the OpenTelemetry Go SDK over each OTLP protocol, configured by Env's
// variables alone (the contract a process under test relies on), and
// reads the trace back from Jaeger's query API.
func TestJaegerReadsBackWhatTheSDKSent(t *testing.T) {
	j := StartJaeger(t)
	for _, tc := range []struct {
		protocol string
		exporter func(context.Context) (sdktrace.SpanExporter, error)
	}{
		{"grpc", func(ctx context.Context) (sdktrace.SpanExporter, error) { return otlptracegrpc.New(ctx) }},
		{"http/protobuf", func(ctx context.Context) (sdktrace.SpanExporter, error) { return otlptracehttp.New(ctx) }},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			for _, kv := range j.Env(tc.protocol) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			service := "testutil-jaeger-" + strings.ReplaceAll(tc.protocol, "/", "-")
			t.Setenv("OTEL_SERVICE_NAME", service)

			exp, err := tc.exporter(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// resource.Environment, not the SDK's default resource: that
			// reads OTEL_SERVICE_NAME once per process, and each protocol
			// has its own service here.
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resource.Environment()))
			tracer := tp.Tracer("spawnkit/internal/testutil")
			ctx, parent := tracer.Start(t.Context(), "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tracer.Start(ctx, "child")
			child.SetAttributes(attribute.String("spawnkit.user", "alice"), attribute.Int("spawnkit.attempt", 3))
			child.AddEvent("retrying")
			child.SetStatus(codes.Error, "boom")
			child.End()
			parent.End()
			// Shutdown flushes the batch and closes the exporter's
			// connections, so no SDK goroutine outlives the test.
			if err := tp.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}

			traceID := parent.SpanContext().TraceID().String()
			tr := j.WaitTrace(t, 30*time.Second, traceID, func(tr *Trace) bool { return len(tr.Spans) == 2 })
			checkSentTrace(t, tr, service)

			traces, err := j.Traces(t.Context(), service, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(traces, func(tr *Trace) bool { return tr.TraceID == traceID }) {
				t.Errorf("Traces(%q) = %d traces without %s", service, len(traces), traceID)
			}
			services, err := j.Services(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(services, service) {
				t.Errorf("Services() = %v, want %s among them", services, service)
			}
		})
	}
}

func checkSentTrace(t *testing.T, tr *Trace, service string) {
	t.Helper()
	parents, children := tr.ByName("parent"), tr.ByName("child")
	if len(parents) != 1 || len(children) != 1 {
		t.Fatalf("spans %s, want one parent and one child", tr.names())
	}
	parent, child := parents[0], children[0]
	if got := parent.Parent(); got != "" {
		t.Errorf("parent's parent %q, want none", got)
	}
	if roots := tr.Roots(); len(roots) != 1 || roots[0] != parent {
		t.Errorf("roots %v, want the parent alone", roots)
	}
	if got := child.Parent(); got != parent.SpanID {
		t.Errorf("child's parent %q, want %s", got, parent.SpanID)
	}
	if kids := tr.Children(parent); len(kids) != 1 || kids[0] != child {
		t.Errorf("parent's children %v, want the child alone", kids)
	}
	if got := parent.Service(); got != service {
		t.Errorf("service %q, want %q", got, service)
	}
	for _, tc := range []struct {
		span *Span
		key  string
		want any
	}{
		{child, "spawnkit.user", "alice"},
		{child, "spawnkit.attempt", int64(3)},
		{child, "otel.status_code", "ERROR"},
		{child, "otel.status_description", "boom"},
		{child, "error", true},
		{parent, "span.kind", "server"},
	} {
		if got, ok := tc.span.Tag(tc.key); !ok || got != tc.want {
			t.Errorf("%s: tag %s = %#v (present %t), want %#v; tags %+v", tc.span.OperationName, tc.key, got, ok, tc.want, tc.span.Tags)
		}
	}
	if _, ok := parent.Tag("otel.status_code"); ok {
		t.Errorf("parent has an otel.status_code; its status was never set")
	}
	if len(child.Logs) != 1 {
		t.Errorf("child's logs %+v, want one event", child.Logs)
	} else if got, _ := tag(child.Logs[0].Fields, "event"); got != "retrying" {
		t.Errorf("child's event %v, want retrying", got)
	}
	if parent.Duration <= 0 || child.Duration <= 0 {
		t.Errorf("durations parent %dµs, child %dµs, want both positive", parent.Duration, child.Duration)
	}
	if child.Start().Before(parent.Start()) || child.End().After(parent.End()) {
		t.Errorf("child [%s, %s] is not within parent [%s, %s]", child.Start(), child.End(), parent.Start(), parent.End())
	}
}

// stopTB records a Fatal or a Skip instead of ending the test goroutine.
type stopTB struct {
	testing.TB
	fatal, skip string
}

func (f *stopTB) Helper()           {}
func (f *stopTB) Fatal(args ...any) { f.fatal = fmt.Sprint(args...) }
func (f *stopTB) Skip(args ...any)  { f.skip = fmt.Sprint(args...) }

// A missing binary skips the test, and fails it under CI=true; either way
// the message says how to build it.
func TestJaegerMissingSkipsOrFailsUnderCI(t *testing.T) {
	t.Setenv("SPAWNKIT_JAEGER", filepath.Join(t.TempDir(), "no-jaeger"))
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"false", false}, {"true", true}} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			f := &stopTB{TB: t}
			jaegerBinary(f)
			got := f.skip
			if tc.wantFail {
				got = f.fatal
			}
			if got == "" || (f.fatal != "") == (f.skip != "") {
				t.Fatalf("fatal %q, skip %q; want only a %s", f.fatal, f.skip, map[bool]string{true: "Fatal", false: "Skip"}[tc.wantFail])
			}
			if !strings.Contains(got, "internal/tools/jaeger.sh") {
				t.Errorf("%q does not name internal/tools/jaeger.sh", got)
			}
		})
	}
}
