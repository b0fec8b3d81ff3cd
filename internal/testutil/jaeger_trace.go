package testutil

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Trace is one trace as Jaeger's query API returns it (its JSON "UI
// model": times in microseconds, attributes as typed tags).
type Trace struct {
	TraceID   string              `json:"traceID"`
	Spans     []*Span             `json:"spans"`
	Processes map[string]*Process `json:"processes"`
}

// Span is one span of a Trace. Jaeger writes an OTLP span's status as the
// tags otel.status_code ("ERROR", "OK"; absent when unset) and
// otel.status_description, an error status also as error=true, and its
// kind as span.kind ("server", "client", "internal", ...).
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"` // µs since the Unix epoch
	Duration      int64       `json:"duration"`  // µs
	Tags          []KeyValue  `json:"tags"`
	Logs          []Log       `json:"logs"`
	ProcessID     string      `json:"processID"`
	// Process is Processes[ProcessID] of the span's trace.
	Process *Process `json:"-"`
}

// Reference links a span to another: RefType "CHILD_OF" (the parent) or
// "FOLLOWS_FROM" (a link).
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Log is a span event: its time (µs since the Unix epoch) and fields (the
// event's name is the field "event").
type Log struct {
	Timestamp int64      `json:"timestamp"`
	Fields    []KeyValue `json:"fields"`
}

// Process is the resource that emitted spans: service.name and the other
// resource attributes as tags.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// KeyValue is a tag: Type is "string", "bool", "int64", "float64" or
// "binary", and Value a string, bool, int64, float64 or string
// (base64) to match.
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// UnmarshalJSON decodes an int64 tag's value as an int64 (not a float64,
// which loses large values).
func (kv *KeyValue) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key   string          `json:"key"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	kv.Key, kv.Type = raw.Key, raw.Type
	var err error
	switch raw.Type {
	case "int64":
		var n int64
		err = json.Unmarshal(raw.Value, &n)
		kv.Value = n
	default:
		err = json.Unmarshal(raw.Value, &kv.Value)
	}
	if err != nil {
		return fmt.Errorf("tag %s (%s): %w", raw.Key, raw.Type, err)
	}
	return nil
}

// decodeData decodes the "data" of a query API answer into data, and
// links each decoded span to its process.
func decodeData(body []byte, data any) error {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return err
	}
	if len(env.Data) == 0 || bytes.Equal(env.Data, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return err
	}
	if traces, ok := data.(*[]*Trace); ok {
		for _, tr := range *traces {
			for _, s := range tr.Spans {
				s.Process = tr.Processes[s.ProcessID]
			}
		}
	}
	return nil
}

// Tag is the value of the span's tag key (see KeyValue for its type).
func (s *Span) Tag(key string) (any, bool) {
	return tag(s.Tags, key)
}

// Parent is the span ID of the span's parent (its CHILD_OF reference), or
// "" for a root span.
func (s *Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Start is when the span started.
func (s *Span) Start() time.Time { return time.UnixMicro(s.StartTime) }

// End is when the span ended.
func (s *Span) End() time.Time { return time.UnixMicro(s.StartTime + s.Duration) }

// Service is the name of the service that emitted the span.
func (s *Span) Service() string {
	if s.Process == nil {
		return ""
	}
	return s.Process.ServiceName
}

// ByName is the trace's spans named name (operationName), earliest first.
func (t *Trace) ByName(name string) []*Span {
	var out []*Span
	for _, s := range t.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	sortByStart(out)
	return out
}

// Children is the spans whose parent is span, earliest first.
func (t *Trace) Children(span *Span) []*Span {
	var out []*Span
	for _, s := range t.Spans {
		if s.Parent() == span.SpanID {
			out = append(out, s)
		}
	}
	sortByStart(out)
	return out
}

// Roots is the trace's spans without a parent, earliest first.
func (t *Trace) Roots() []*Span {
	var out []*Span
	for _, s := range t.Spans {
		if s.Parent() == "" {
			out = append(out, s)
		}
	}
	sortByStart(out)
	return out
}

// names lists the trace's span names, for failure messages.
func (t *Trace) names() string {
	names := make([]string, 0, len(t.Spans))
	for _, s := range t.Spans {
		names = append(names, s.OperationName)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func tag(tags []KeyValue, key string) (any, bool) {
	for _, kv := range tags {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

func sortByStart(spans []*Span) {
	slices.SortStableFunc(spans, func(a, b *Span) int { return cmp.Compare(a.StartTime, b.StartTime) })
}
