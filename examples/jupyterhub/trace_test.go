package jupyterhub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// TestJupyterHubTrace follows one start and one stop from JupyterHub's log
// to Jaeger: the trace id SpawnkitSpawner logs is the trace the service's
// spans are in, hanging from the hub's (remote) parent; the service's
// request log and JupyterHub's progress stream name the same trace. It
// then reads the service's /metrics, parsed, for the phases of that start
// and the stop.
func TestJupyterHubTrace(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	// Started before the stack, so stopped after it (cleanups run last
	// first): the service flushes its last spans to a Jaeger still up.
	j := testutil.StartJaeger(t)
	s := newStack(t, tl, c, stackOptions{serviceEnv: j.Env("http/protobuf")})
	ctx := t.Context()
	const user = "tracy"
	s.createUser(ctx, t, user)

	// The slow-boot profile holds the server back after its pod is ready,
	// so the start is still pending while the progress stream is read:
	// a stream opened after the start has finished holds JupyterHub's
	// ready event alone. The pod is let go once SpawnkitSpawner has passed
	// on the service's last event.
	s.startServer(ctx, t, user, "", map[string]string{"profile": "slow-boot"})
	type result struct {
		events []progressEvent
		err    error
	}
	streamed := make(chan result, 1)
	passed := make(chan struct{})
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		closed := false
		events, err := s.progressEach(pctx, user, "", func(ev progressEvent) {
			// SpawnkitSpawner's words for the service's ready event, its
			// last (spawner.py, progress).
			if !closed && strings.HasPrefix(ev.Message, "Server started at ") {
				closed = true
				close(passed)
			}
		})
		streamed <- result{events, err}
	}()
	var r result
	select {
	case <-passed:
		s.release(ctx, t, user, "")
		r = <-streamed
	case r = <-streamed:
		// Ended without the service's ready event: the checks below say
		// what came instead.
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if last := r.events[len(r.events)-1]; !last.Ready {
		t.Fatalf("the progress stream ended with %+v, want ready; events: %+v", last, r.events)
	}
	s.waitServer(ctx, t, user, "", 30*time.Second, "ready", ready)
	s.onePod(ctx, t, user, "")
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(user, ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, user, "", 30*time.Second, "stopped", gone)
	waitNoPods(t, s, user, "", 10*time.Second)

	hubLog, serviceLog := s.logPath("jupyterhub"), s.logPath("spawner-service")
	startID := loggedTraceID(t, hubLog, "starting", user)
	stopID := loggedTraceID(t, hubLog, "stopping", user)
	if startID == stopID {
		t.Errorf("the start and the stop were logged with the same trace_id %s, want a trace each", startID)
	}

	t.Run("StartTrace", func(t *testing.T) {
		tr := j.WaitTrace(t, 30*time.Second, startID, func(tr *testutil.Trace) bool {
			return len(tr.ByName("spawnkit.spawn")) > 0 && len(tr.ByName("spawnkit.start")) > 0 && len(tr.ByName("readiness")) > 0
		})
		if tr.TraceID != startID {
			t.Errorf("Jaeger's trace id is %s, want the hub's %s", tr.TraceID, startID)
		}
		spawn := one(t, tr, "spawnkit.spawn")
		checkRemoteParent(t, tr, spawn)
		start := one(t, tr, "spawnkit.start")
		if start.Parent() != spawn.SpanID {
			t.Errorf("spawnkit.start's parent is %q, want spawnkit.spawn (%s)", start.Parent(), spawn.SpanID)
		}
		readiness := one(t, tr, "readiness")
		if readiness.Parent() != start.SpanID {
			t.Errorf("readiness's parent is %q, want spawnkit.start (%s)", readiness.Parent(), start.SpanID)
		}
		// Everything the service did for the start hangs from the hub's
		// span: no span of the trace is a root of its own.
		if roots := tr.Roots(); len(roots) > 0 {
			t.Errorf("the trace has %d root spans (first %s), want none: every span under the hub's", len(roots), roots[0].OperationName)
		}
	})

	t.Run("StopTrace", func(t *testing.T) {
		tr := j.WaitTrace(t, 30*time.Second, stopID, func(tr *testutil.Trace) bool {
			return len(tr.ByName("spawnkit.stop")) > 0
		})
		checkRemoteParent(t, tr, one(t, tr, "spawnkit.stop"))
		if n := len(tr.ByName("spawnkit.spawn")); n > 0 {
			t.Errorf("the stop's trace holds %d spawnkit.spawn spans, want the start's trace to have them", n)
		}
	})

	t.Run("ServiceLog", func(t *testing.T) {
		path := `"path"="/v1` + serverPath(user, "") + `"`
		for _, req := range []struct{ method, traceID string }{{"POST", startID}, {"DELETE", stopID}} {
			if logCount(serviceLog, `"msg"="request"`, `"method"="`+req.method+`"`, path, `"trace_id"="`+req.traceID+`"`) == 0 {
				t.Errorf("no request line of the service's log for %s %s carries trace_id %s", req.method, path, req.traceID)
			}
		}
	})

	t.Run("ProgressEvents", func(t *testing.T) {
		// JupyterHub's own events, "Server requested" first and its ready
		// event last, have no trace id; SpawnkitSpawner's, between them,
		// carry the one the service gave the start.
		events := r.events
		if len(events) < 3 {
			t.Fatalf("%d progress events, want JupyterHub's two and SpawnkitSpawner's between them: %+v", len(events), events)
		}
		for i, ev := range events[1 : len(events)-1] {
			if ev.TraceID != startID {
				t.Errorf("progress event %d %+v has trace_id %q, want %s", i+1, ev, ev.TraceID, startID)
			}
		}
		t.Logf("%d of %d progress events carry trace_id %s", len(events)-2, len(events), startID)
	})

	t.Run("Metrics", func(t *testing.T) {
		url := probeURL(t, serviceLog) + "/metrics"
		var m metricFamilies
		// The stop is counted once the Manager has seen the pod gone,
		// which may be after the test saw it.
		testutil.EventuallyEvery(t, 100*time.Millisecond, 10*time.Second, "the stop counted in /metrics", func() error {
			var err error
			if m, err = scrapeMetrics(ctx, url); err != nil {
				return err
			}
			if got := m.sum("spawnkit_manager_stops_total", "outcome", "stopped"); got < 1 {
				return fmt.Errorf("spawnkit_manager_stops_total{outcome=\"stopped\"} = %v", got)
			}
			return nil
		})
		for _, ph := range []string{"plan", "objects", "scheduling", "container_start", "readiness"} {
			series := m.series("spawnkit_manager_start_phase_duration_seconds", "phase", ph)
			if len(series) == 0 {
				t.Errorf("spawnkit_manager_start_phase_duration_seconds has no series with phase=%q; phases: %v", ph,
					m.labelValues("spawnkit_manager_start_phase_duration_seconds", "phase"))
				continue
			}
			for _, sr := range series {
				// The service runs without -clusters: the Manager's one
				// cluster is "", a label still written (cluster="").
				if cl, ok := label(sr, "cluster"); !ok || cl != "" {
					t.Errorf("spawnkit_manager_start_phase_duration_seconds{phase=%q} has labels %v, want cluster=\"\"", ph, sr.GetLabel())
				}
				if n := sr.GetHistogram().GetSampleCount(); n < 1 {
					t.Errorf("spawnkit_manager_start_phase_duration_seconds{phase=%q} counts %d, want at least 1", ph, n)
				}
			}
		}
		if got := m.sum("spawnkit_manager_spawn_duration_seconds", "outcome", "ready"); got < 1 {
			t.Errorf("spawnkit_manager_spawn_duration_seconds{outcome=\"ready\"} counts %v, want at least 1", got)
		}
		// Counted at zero from the start, so an alert on increase() sees
		// the first failure too.
		if failed := m.series("spawnkit_manager_stops_total", "outcome", "failed"); len(failed) == 0 {
			t.Errorf("spawnkit_manager_stops_total has no outcome=\"failed\" series")
		} else if got := m.sum("spawnkit_manager_stops_total", "outcome", "failed"); got != 0 {
			t.Errorf("spawnkit_manager_stops_total{outcome=\"failed\"} = %v, want 0", got)
		}
		// Without -leader-elect the one Manager leads.
		if leading := m.series("spawnkit_manager_leading"); len(leading) != 1 || leading[0].GetGauge().GetValue() != 1 {
			t.Errorf("spawnkit_manager_leading = %v, want one series at 1", leading)
		}
	})
}

// loggedTraceID is the trace id of the one "spawnkit: <what> <user>
// (trace_id=...)" line of JupyterHub's log (what: starting or stopping).
func loggedTraceID(t *testing.T, hubLog, what, user string) string {
	t.Helper()
	data, err := os.ReadFile(hubLog)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`spawnkit: ` + what + ` ` + regexp.QuoteMeta(user) + ` \(trace_id=([0-9a-f]{32})\)`)
	found := re.FindAllStringSubmatch(string(data), -1)
	if len(found) != 1 {
		t.Fatalf("JupyterHub's log has %d lines matching %s, want 1", len(found), re)
	}
	return found[0][1]
}

// one is the trace's only span named name.
func one(t *testing.T, tr *testutil.Trace, name string) *testutil.Span {
	t.Helper()
	spans := tr.ByName(name)
	if len(spans) != 1 {
		t.Fatalf("the trace has %d %s spans, want 1", len(spans), name)
	}
	return spans[0]
}

// checkRemoteParent fails unless span has a parent that is in no trace
// Jaeger has from this process: the hub's, which only the traceparent
// header names (the hub here exports no spans).
func checkRemoteParent(t *testing.T, tr *testutil.Trace, span *testutil.Span) {
	t.Helper()
	parent := span.Parent()
	if parent == "" {
		t.Errorf("%s is a root span, want the child of the hub's traceparent", span.OperationName)
		return
	}
	if slices.ContainsFunc(tr.Spans, func(s *testutil.Span) bool { return s.SpanID == parent }) {
		t.Errorf("%s's parent %s is a span of the trace, want the hub's remote one", span.OperationName, parent)
	}
}

// probeURL is the base URL of the service's probes and metrics, as it
// logs it (it listens on a port of its choice).
func probeURL(t *testing.T, serviceLog string) string {
	t.Helper()
	data, err := os.ReadFile(serviceLog)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"msg"="serving the probes and metrics".*"url"="(http://[^"]+)/readyz"`)
	found := re.FindAllStringSubmatch(string(data), -1)
	if len(found) == 0 {
		t.Fatalf("the service's log does not say where its probes are (%s)", re)
	}
	return found[len(found)-1][1]
}

// metricFamilies is one scrape of /metrics, parsed.
type metricFamilies map[string]*dto.MetricFamily

func scrapeMetrics(ctx context.Context, url string) (metricFamilies, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s = %s %.300s", url, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", url, err)
	}
	return families, nil
}

// series is the series of name whose labels include the given name=value
// pairs.
func (m metricFamilies) series(name string, labels ...string) []*dto.Metric {
	var out []*dto.Metric
	for _, sr := range m[name].GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			v, ok := label(sr, labels[i])
			match = match && ok && v == labels[i+1]
		}
		if match {
			out = append(out, sr)
		}
	}
	return out
}

// sum adds up the counters' values, or the histograms' sample counts, of
// series(name, labels...).
func (m metricFamilies) sum(name string, labels ...string) float64 {
	var total float64
	for _, sr := range m.series(name, labels...) {
		switch {
		case sr.Counter != nil:
			total += sr.GetCounter().GetValue()
		case sr.Histogram != nil:
			total += float64(sr.GetHistogram().GetSampleCount())
		case sr.Gauge != nil:
			total += sr.GetGauge().GetValue()
		}
	}
	return total
}

// labelValues lists the values of a label across name's series, for
// failure messages.
func (m metricFamilies) labelValues(name, key string) []string {
	var out []string
	for _, sr := range m[name].GetMetric() {
		if v, ok := label(sr, key); ok {
			out = append(out, v)
		}
	}
	return out
}

// label is the value of the series' label key, and whether it has one.
func label(sr *dto.Metric, key string) (string, bool) {
	for _, l := range sr.GetLabel() {
		if l.GetName() == key {
			return l.GetValue(), true
		}
	}
	return "", false
}
