package phase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Phase names: the label values of the phase histogram and the names of
// the phase spans.
const (
	SlotWait       = "slot_wait"       // waiting for a start slot (ConcurrentSpawnLimit)
	Plan           = "plan"            // resolving options and rendering the objects
	Objects        = "objects"         // creating the objects, from the plan to the last one
	Scheduling     = "scheduling"      // from the pod's create until it is bound to a node
	ImagePull      = "image_pull"      // one image's pull, from the kubelet's Pulling to Pulled
	ContainerStart = "container_start" // from the node (and its pulls) until every container runs
	Readiness      = "readiness"       // from the containers running until the pod is ready
	Delete         = "delete"          // a stop's delete request
	Terminating    = "terminating"     // until the pod's containers have stopped
	Gone           = "gone"            // until the API server no longer has the pod
)

// Span names of the operations.
const (
	OpSpawn  = "spawnkit.spawn" // a Manager's start, from Spawn to ready or failed
	OpStart  = "spawnkit.start" // a Spawner's Start
	OpResume = "spawnkit.resume"
	OpStop   = "spawnkit.stop"
)

// Attribute keys: OpenTelemetry's semantic conventions where one exists.
const (
	KeyPod       = attribute.Key("k8s.pod.name")
	KeyNamespace = attribute.Key("k8s.namespace.name")
	KeyNode      = attribute.Key("k8s.node.name")
	KeyCluster   = attribute.Key("k8s.cluster.name")
	KeyImage     = attribute.Key("container.image.name")
	KeyUser      = attribute.Key("spawnkit.user")
	KeyServer    = attribute.Key("spawnkit.server")
	KeyReason    = attribute.Key("spawnkit.reason")
	KeyObject    = attribute.Key("spawnkit.object") // kind/name of an object a step creates
	KeyPresent   = attribute.Key("spawnkit.image.present")
)

const scope = "github.com/spawnkit/spawnkit"

// Tracer makes spawnkit's spans. The zero value and nil are off.
type Tracer struct {
	tracer trace.Tracer
	hash   bool
}

// NewTracer returns a Tracer of tp, nil (off) when tp is nil. With hash,
// every attribute value made from a user's name (the user, the server,
// the pod and the objects named after them, a user namespace) is
// exported as the first 16 hex digits of its SHA-256 instead.
func NewTracer(tp trace.TracerProvider, hash bool) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{tracer: tp.Tracer(scope), hash: hash}
}

// On reports whether t makes spans.
func (t *Tracer) On() bool { return t != nil }

// Name is v as a span attribute: itself, or hashed (see NewTracer).
func (t *Tracer) Name(k attribute.Key, v string) attribute.KeyValue {
	if t != nil && t.hash && v != "" {
		sum := sha256.Sum256([]byte(v))
		v = hex.EncodeToString(sum[:8])
	}
	return k.String(v)
}

// Start begins a span named name under ctx's span (none when t is off:
// ctx and a non-recording span are returned).
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		// Never the caller's own span: ending or marking it is not ours.
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// Step runs around one call of an operation: a child span of ctx's that
// end ends, with err's message as its error status. Off, it costs
// nothing.
func (t *Tracer) Step(ctx context.Context, name string, attrs ...attribute.KeyValue) (end func(err error)) {
	if t == nil {
		return noEnd
	}
	_, span := t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return func(err error) {
		if err != nil {
			t.Fail(span, "", err)
		}
		span.End()
	}
}

func noEnd(error) {}

// noSpan is a span that records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Fail sets span's status to an error with reason (an attribute, when
// set) and err's message. With hashed names the message, which names
// the user, the server and their objects, is left out: the status says
// the reason only ("failed" without one).
func (t *Tracer) Fail(span trace.Span, reason string, err error) {
	if t == nil || span == nil || !span.IsRecording() {
		return
	}
	if reason != "" {
		span.SetAttributes(KeyReason.String(reason))
	}
	msg := reason
	switch {
	case t.hash && msg == "":
		msg = "failed"
	case !t.hash && err != nil:
		msg = err.Error()
		span.RecordError(err)
	}
	span.SetStatus(codes.Error, msg)
}

// Interval is one phase as it was seen: what a span and a histogram
// observation are made of.
type Interval struct {
	Name       string
	Start, End time.Time
	// Done: the phase ended (else the operation ended during it).
	Done bool
	// Err is set on the phase the operation failed in.
	Err   error
	Attrs []attribute.KeyValue
}

// Present reports whether an image_pull interval is of an image the node
// already had (no pull).
func (iv Interval) Present() bool {
	for _, a := range iv.Attrs {
		if a.Key == KeyPresent {
			return a.Value.AsBool()
		}
	}
	return false
}

// Emit makes a child span of ctx's span for each interval, with the
// interval's own times.
func (t *Tracer) Emit(ctx context.Context, ivs []Interval) {
	if t == nil {
		return
	}
	for _, iv := range ivs {
		_, span := t.tracer.Start(ctx, iv.Name, trace.WithTimestamp(iv.Start), trace.WithAttributes(iv.Attrs...))
		if iv.Err != nil {
			t.Fail(span, "", iv.Err)
		}
		span.End(trace.WithTimestamp(iv.End))
	}
}

// TraceID is the trace id of ctx's span or remote span context, "" when
// it has none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
