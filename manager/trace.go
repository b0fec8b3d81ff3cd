package manager

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/naming"
)

// opSpan begins the span of an operation on server s in cluster under
// ctx's span.
func (m *Manager) opSpan(ctx context.Context, name string, s naming.Server, cluster string) (context.Context, trace.Span) {
	t := m.tracer
	if !t.On() {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{t.Name(phase.KeyUser, s.Username), t.Name(phase.KeyServer, s.Servername)}
	if cluster != "" {
		attrs = append(attrs, phase.KeyCluster.String(cluster))
	}
	return t.Start(ctx, name, attrs...)
}
