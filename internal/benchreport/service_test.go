package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// TestServiceRun runs the service rows' whole path at a tiny scale: the
// service built and run as a child, 5 servers started through its API,
// short windows, and a restart. Every row must have its value, and the
// service's API requests must be found in its flow schema (about two
// per start), or the breakdown of the creation time would be empty.
func TestServiceRun(t *testing.T) {
	c := testcluster.Require(t, cluster)
	env := &Env{Cluster: c, Client: c.Client, Service: ServiceOptions{Servers: 5, InFlight: 5, Settle: time.Second, Window: 2 * time.Second, skipQuiet: true}}
	ms, err := measureService(t.Context(), env, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if len(m.Failed) > 0 {
			t.Fatalf("%s failed: %s", m.Name, m.Failed[0])
		}
		if len(m.Spawnkit) != 1 {
			t.Errorf("%s: %d values, want 1", m.Name, len(m.Spawnkit))
		}
		if strings.HasPrefix(m.Name, "service: creation") && m.Spawnkit[0] <= 0 {
			t.Errorf("%s: %v starts/s", m.Name, m.Spawnkit[0])
		}
	}
	d := ms[0].Detail.([]serviceDetail)[0]
	for _, cr := range []creationResult{d.Default, d.Unlimited} {
		if cr.RequestsPerStart < 1.5 || cr.RequestsPerStart > 4 {
			t.Errorf("qps %g: %.2f API requests per start in the service's flow schema, want about 2", cr.QPS, cr.RequestsPerStart)
		}
		if cr.Phases["objects"] <= 0 || cr.APIPostPod <= 0 {
			t.Errorf("qps %g: no objects phase (%v) or no pod creates seen by the API server (%v)", cr.QPS, cr.Phases, cr.APIPostPod)
		}
	}
	if d.Poll == nil || d.Poll.P99 <= 0 {
		t.Errorf("no poll latency: %+v", d.Poll)
	}
}
