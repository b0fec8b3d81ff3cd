package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 2}, &cluster)
}

// TestTracedRun runs the traced side of a start and a manager row, 5
// spawns each, in this process (runChild, as the child does), exporting
// to a real Jaeger, and reads the traces back as the report does: the
// run must have exported spans, and verifyTraces must find them.
func TestTracedRun(t *testing.T) {
	c := testcluster.Require(t, cluster)
	j := testutil.StartJaeger(t)
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Cluster: c, Client: client}
	const n = 5
	for _, api := range []string{apiStart, apiManager} {
		t.Run(api, func(t *testing.T) {
			ns, err := env.NewNamespace(t.Context(), "traced")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// t.Context is done by now.
				if err := env.DeleteNamespace(context.WithoutCancel(t.Context()), ns, time.Minute); err != nil {
					t.Error(err)
				}
			})
			service := traceService(api, n, 0) + "-test"
			spec := spawnRun{API: api, Side: sideTraced, Namespace: ns, N: n, Kubeconfig: c.Kubeconfig, RawPlannedPod: true,
				Trace: &traceSpec{Endpoint: j.OTLPGRPCEndpoint(), Service: service}}
			arg, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := runChild(t.Context(), string(arg), &out); err != nil {
				t.Fatal(err)
			}
			var res spawnResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("the result %q: %v", out.Bytes(), err)
			}
			// Each spawn's root span and a phase span at least.
			if res.Spans < 2*n || res.CPU <= 0 {
				t.Errorf("%d spans exported and %s of CPU for %d spawns; want at least %d spans and some CPU", res.Spans, res.CPU, n, 2*n)
			}
			found, err := verifyTraces(t.Context(), j, service, rootSpan(api), n+1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d spawns: %d spans exported, %.2f CPU ms/spawn, %d traces in jaeger", n, res.Spans, msPer(res.CPU, n), found)
			if found < n {
				t.Errorf("jaeger holds %d traces with a %s span; want the %d spawns' at least", found, rootSpan(api), n)
			}
			// A service that sent nothing: a short wait is enough.
			none, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if _, err := verifyTraces(none, j, service+"-none", rootSpan(api), 1); err == nil {
				t.Error("verifyTraces found traces of a service that sent none")
			}
		})
	}
}

// TestTracingRows checks the rows' arithmetic from three sides' results.
func TestTracingRows(t *testing.T) {
	const n = 10
	rows := newTracingRows("Spawner.Start", n)
	raw := spawnResult{CPU: 20 * time.Millisecond}
	off := spawnResult{CPU: 22 * time.Millisecond}
	on := spawnResult{CPU: 25 * time.Millisecond, Spans: 80, TracesInJaeger: 11}
	rows.add(n, raw, off, on)
	rows.record(0, n, on)
	ms := rows.measures()
	for i := range ms {
		ms[i].finish()
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"CPU on, ms/spawn", ms[0].Spawnkit[0], 2.5},
		{"ratio on/raw", ms[0].Ratio.Median, 2.5 / 2.0},
		{"ratio on/off", ms[1].Ratio.Median, 2.5 / 2.2},
		{"cost µs/spawn", ms[2].Spawnkit[0], 300},
		{"spans/spawn", ms[3].Spawnkit[0], 8},
	} {
		if d := tc.got - tc.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if len(ms[2].Raw) != 0 || len(ms[3].Raw) != 0 {
		t.Error("the cost and spans rows have a raw side")
	}
	if d := ms[3].Detail.([]tracedDetail); len(d) != 1 || d[0].TracesInJaeger != 11 {
		t.Errorf("detail %+v", d)
	}
}
