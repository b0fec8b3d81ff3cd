package spawner

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/reflector"
)

// PhaseTiming is one phase of a start as it ended (StartOptions.OnPhase):
// Phase is plan, objects, scheduling, image_pull (one per image the node
// pulled), container_start or readiness.
type PhaseTiming struct {
	Phase    string
	Duration time.Duration
}

// opSpan begins the span of an operation of s (phase.OpStart, OpResume,
// OpStop) under ctx's, and returns the ctx that carries it.
func (s *Spawner) opSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	t := s.b.tracer
	if !t.On() {
		return t.Start(ctx, name) // a span that records nothing, never the caller's
	}
	attrs := []attribute.KeyValue{t.Name(phase.KeyUser, s.server.Username), t.Name(phase.KeyServer, s.server.Servername)}
	if s.b.cluster != "" {
		attrs = append(attrs, phase.KeyCluster.String(s.b.cluster))
	}
	return t.Start(ctx, name, attrs...)
}

// podAttrs names the pod on the operation's span.
func (s *Spawner) podAttrs(span trace.Span, ns, name string) {
	if !s.b.tracer.On() || !span.IsRecording() {
		return
	}
	t := s.b.tracer
	nsAttr := phase.KeyNamespace.String(ns)
	if s.b.cfg.EnableUserNamespaces {
		nsAttr = t.Name(phase.KeyNamespace, ns)
	}
	span.SetAttributes(nsAttr, t.Name(phase.KeyPod, name))
}

// step is a child span of one call of a start (an object's create, a
// hook), named what, about the object kind/name.
func (s *Spawner) step(ctx context.Context, what, kind, name string) func(error) {
	t := s.b.tracer
	if !t.On() {
		return func(error) {}
	}
	return t.Step(ctx, what, t.Name(phase.KeyObject, kind+"/"+name))
}

// phased reports a phase that ended to the start's OnPhase.
func (run *startRun) phased(name string, d time.Duration) {
	if run.onPhase != nil {
		run.onPhase(PhaseTiming{Phase: name, Duration: d})
	}
}

// endWait closes the start's timeline when its wait for the pod ends
// (err: failed): its phases become child spans and OnPhase reports.
func (s *Spawner) endWait(ctx context.Context, run *startRun, err error) {
	ivs := run.tl.End(err)
	s.b.tracer.Emit(ctx, ivs)
	span := trace.SpanFromContext(ctx)
	if node := run.tl.Node(); node != "" && s.b.tracer.On() && span.IsRecording() {
		span.SetAttributes(phase.KeyNode.String(node))
	}
	for _, iv := range ivs {
		if iv.Done && !(iv.Name == phase.ImagePull && iv.Present()) {
			run.phased(iv.Name, iv.End.Sub(iv.Start))
		}
	}
}

// goneTimes is what a stop's wait for its deleted pod saw: from the
// delete's answer, until no container ran (stopped), until the pod was
// gone (or err).
type goneTimes struct {
	from, stopped time.Time
	err           error
}

// emitGone makes a stop's terminating and gone spans.
func (s *Spawner) emitGone(ctx context.Context, g *goneTimes) {
	end := s.b.clock.Now()
	stopped := g.stopped
	if stopped.IsZero() {
		stopped = end
	}
	term := phase.Interval{Name: phase.Terminating, Start: g.from, End: stopped}
	gone := phase.Interval{Name: phase.Gone, Start: stopped, End: end}
	if g.err != nil {
		if g.stopped.IsZero() {
			term.Err = g.err
		} else {
			gone.Err = g.err
		}
	}
	s.b.tracer.Emit(ctx, []phase.Interval{term, gone})
}

func anyRunning(p *reflector.Pod) bool {
	for _, cs := range p.ContainerStatuses {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

// mainImage is the image of the pod's first container.
func mainImage(p *corev1.Pod) string {
	if len(p.Spec.Containers) == 0 {
		return ""
	}
	return p.Spec.Containers[0].Image
}
