// Package otelenv sets up trace export for spawnkit's programs from the
// standard OpenTelemetry environment variables alone, so an operator
// points the service at a collector the way they point any OpenTelemetry
// program at one.
//
// Tracing is off unless OTEL_TRACES_EXPORTER is "otlp", or it is unset
// and an OTLP endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. The protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// grpc or http/protobuf (the default, as the specification says). The
// exporters read their own variables (endpoint, headers, certificates,
// timeout, compression), the SDK reads the sampler (OTEL_TRACES_SAMPLER,
// default parentbased_always_on) and the batch processor's
// (OTEL_BSP_*), and the resource takes OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES over the defaults service.name (the
// program's) and service.version.
package otelenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Setup returns the TracerProvider the environment configures and its
// shutdown (which flushes the spans not yet exported), or a nil provider
// and a no-op shutdown when tracing is off. lookup reads the environment
// (os.LookupEnv when nil).
func Setup(ctx context.Context, service, version string, lookup func(string) (string, bool)) (trace.TracerProvider, func(context.Context) error, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	off := func(context.Context) error { return nil }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return nil, off, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return nil, off, nil
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, off, nil
		}
	case "otlp":
	default:
		return nil, off, fmt.Errorf("otelenv: OTEL_TRACES_EXPORTER=%q: spawnkit exports traces with otlp only (or none)", exp)
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	default:
		return nil, off, fmt.Errorf("otelenv: OTLP protocol %q is not supported: use grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, off, fmt.Errorf("otelenv: the OTLP trace exporter: %w", err)
	}
	// Defaults first: the environment's attributes override them.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exporter.Shutdown(ctx)
		return nil, off, fmt.Errorf("otelenv: the resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
