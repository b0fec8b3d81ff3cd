package service

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestUnavailableOnEveryRoute: a replica that must not answer (a standby,
// or one shutting down) answers every documented route 503 with
// Retry-After and the reason, and passes nothing to the backend.
func TestUnavailableOnEveryRoute(t *testing.T) {
	for _, reason := range []string{reasonNotLeader, reasonNotReady} {
		t.Run(reason, func(t *testing.T) {
			ta := newTestAPI(t, time.Hour)
			ta.fake.set(serverID{User: "alice", Name: ""}, "running")
			ta.fake.set(serverID{User: "alice", Name: "lab"}, "running")
			ta.fake.notReady = errUnavailable(reason, errors.New("manager: this replica does not lead"))
			for _, r := range routes {
				if !strings.HasPrefix(r.path, "/v1/") || (r.method == "PUT" && !strings.HasSuffix(r.path, "/state")) || r.path == "/v1/nope" || strings.HasSuffix(r.path, "/servers/") {
					continue // unrouted: 404/405 whatever the replica
				}
				resp, data := ta.do(t, r.method, r.path, r.body)
				wantError(t, resp, data, http.StatusServiceUnavailable, reason)
				if ra := resp.Header.Get("Retry-After"); ra != "1" {
					t.Errorf("%s %s: Retry-After %q, want 1", r.method, r.path, ra)
				}
			}
			resp, data := ta.do(t, "DELETE", "/v1/users/alice/server?forever=true", "")
			wantError(t, resp, data, http.StatusServiceUnavailable, reason)
			if len(ta.fake.spawns)+len(ta.fake.stops)+len(ta.fake.deleted) != 0 {
				t.Errorf("the backend saw spawns %v, stops %v, deletions %v; want none", ta.fake.spawns, ta.fake.stops, ta.fake.deleted)
			}
		})
	}
}

// TestDeleteForever: DELETE ?forever=true deletes a stopped server (204,
// no body), also one the backend does not know; refuses a running one
// (409) and every malformed combination (400) before the backend sees it.
func TestDeleteForever(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	alice, lab := serverID{User: "alice", Name: ""}, serverID{User: "alice", Name: "lab"}
	ta.fake.set(alice, "running")
	ta.fake.set(lab, "running")
	for _, path := range []string{"/v1/users/alice/server", "/v1/users/alice/servers/lab"} {
		resp, data := ta.do(t, "DELETE", path+"?forever=true", "")
		wantError(t, resp, data, http.StatusConflict, reasonConflict)
	}
	ta.fake.set(alice, "stopped")
	ta.fake.set(lab, "failed")
	for _, path := range []string{"/v1/users/alice/server", "/v1/users/alice/servers/lab", "/v1/users/forgotten/servers/old"} {
		resp, data := ta.do(t, "DELETE", path+"?forever=true", "")
		if resp.StatusCode != http.StatusNoContent || len(data) != 0 {
			t.Errorf("DELETE %s?forever=true: %d %q, want 204 and no body", path, resp.StatusCode, data)
		}
	}
	for _, q := range []string{"forever=maybe", "forever=true&now=true", "forever=true&forever=false", "for=true"} {
		resp, data := ta.do(t, "DELETE", "/v1/users/alice/server?"+q, "", malformed())
		wantError(t, resp, data, http.StatusBadRequest, reasonBadRequest)
	}
	want := []serverID{alice, lab, alice, lab, {User: "forgotten", Name: "old"}}
	if !reflect.DeepEqual(ta.fake.deleted, want) {
		t.Errorf("the backend deleted %v, want %v", ta.fake.deleted, want)
	}
	if len(ta.fake.stops) != 0 {
		t.Errorf("forever=true stopped %v; a deletion never stops", ta.fake.stops)
	}
	if _, ok := ta.fake.servers[alice]; ok {
		t.Error("the deleted server is still known")
	}
}

// TestTokenRotates: the handler asks Token on every request, so the new
// token works at once and the old one is refused; an empty token
// refuses everything.
func TestTokenRotates(t *testing.T) {
	var mu sync.Mutex
	current := "first-token"
	h, err := newHandler(newFakeBackend(), handlerOptions{Token: func() string {
		mu.Lock()
		defer mu.Unlock()
		return current
	}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(token string) int {
		req, _ := http.NewRequest("GET", "/v1/servers", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	set := func(s string) { mu.Lock(); current = s; mu.Unlock() }
	if c := status("first-token"); c != 200 {
		t.Fatalf("first token: %d", c)
	}
	set("second-token")
	if c1, c2 := status("first-token"), status("second-token"); c1 != 401 || c2 != 200 {
		t.Errorf("after rotation: old %d, new %d; want 401, 200", c1, c2)
	}
	set("")
	if c1, c2 := status(""), status("second-token"); c1 != 401 || c2 != 401 {
		t.Errorf("empty token: empty %d, old %d; want 401 for both", c1, c2)
	}
}

// TestQueryValuesNeverLogged: the request log shows the query's keys, not
// its values, so a token sent as ?token= never reaches the log.
func TestQueryValuesNeverLogged(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	resp, data := ta.do(t, "GET", "/v1/servers?token="+testToken+"&x=secret-value", "", malformed(), withHeader("Authorization", ""))
	wantError(t, resp, data, http.StatusUnauthorized, reasonUnauthorized)
	ta.mu.Lock()
	logs := strings.Join(ta.logs, "\n")
	ta.mu.Unlock()
	if strings.Contains(logs, testToken) || strings.Contains(logs, "secret-value") {
		t.Errorf("the log holds a query value:\n%s", logs)
	}
	if !strings.Contains(logs, `"query"="token=...&x=..."`) {
		t.Errorf("the log does not name the query's keys:\n%s", logs)
	}
}

// TestRequestMetrics: requests are counted by route pattern (never a user
// name), method and code, and timed; unknown paths and invented methods
// collapse into "other".
func TestRequestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	fake := newFakeBackend()
	fake.set(serverID{User: "alice", Name: ""}, "running")
	h, err := newHandler(fake, handlerOptions{Token: func() string { return testToken }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path, token string) {
		req, _ := http.NewRequest(method, path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("GET", "/v1/users/alice/server", testToken)
	send("GET", "/v1/users/bob/server", testToken)
	send("POST", "/v1/users/carol/servers/lab", testToken)
	send("GET", "/v1/users/alice/server", "wrong")
	send("GET", "/v1/no/such/path", testToken)
	send("BREW", "/v1/servers", testToken)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"/v1/users/{user}/server", "GET", "200"}, 1},
		{[]string{"/v1/users/{user}/server", "GET", "404"}, 1},
		{[]string{"/v1/users/{user}/servers/{name}", "POST", "202"}, 1},
		{[]string{"/v1/users/{user}/server", "GET", "401"}, 1},
		{[]string{"other", "GET", "404"}, 1},
		{[]string{"other", "other", "405"}, 1},
	} {
		m, err := counterValue(reg, "spawnkit_service_http_requests_total", map[string]string{"route": c.labels[0], "method": c.labels[1], "code": c.labels[2]})
		if err != nil || m != c.want {
			t.Errorf("requests_total%v = %v (%v), want %v", c.labels, m, err, c.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "spawnkit_service_http_request_duration_seconds" && len(f.GetMetric()) != 4 {
			t.Errorf("duration series = %d, want 4 (one per route and method)", len(f.GetMetric()))
		}
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, user := range []string{"alice", "bob", "carol"} {
					if strings.Contains(l.GetValue(), user) {
						t.Errorf("%s has label %s=%q: a user's name", f.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
	if _, err := newHandler(fake, handlerOptions{Token: func() string { return testToken }, Registerer: reg}); err == nil {
		t.Error("registering the metrics twice on one registry did not fail")
	}
}

// counterValue is the value of the counter name with exactly labels in
// reg; an error when there is no such series.
func counterValue(reg prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no series %s%v", name, labels)
}

// TestSeedState: PUT .../state hands the hub's saved state to the
// backend and answers the server's status (200); a state the backend
// refuses is 409 StateRefused naming why; an unknown server 404; a body
// that is not a state 400, one too large 413, no token 401; a start's
// "state" reaches the backend with the start.
func TestSeedState(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.fake.set(serverID{User: "alice", Name: "lab"}, "running")
	for _, path := range []string{"/v1/users/alice/servers/lab/state", "/v1/users/alice/server/state"} {
		if path == "/v1/users/alice/server/state" {
			ta.fake.set(serverID{User: "alice", Name: ""}, "running")
		}
		resp, data := ta.do(t, "PUT", path, `{"pod_name":"nb-alice","namespace":"old","pvc_name":"claim-alice"}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), `"phase":"running"`) {
			t.Fatalf("PUT %s: %d %s, want 200 with the running status", path, resp.StatusCode, data)
		}
		ta.fake.mu.Lock()
		got := ta.fake.seeds[len(ta.fake.seeds)-1]
		ta.fake.mu.Unlock()
		if got.PodName != "nb-alice" || got.Namespace != "old" || got.PVCName != "claim-alice" {
			t.Errorf("PUT %s: the backend got %+v", path, got)
		}
	}
	for _, p := range []struct{ known, unknown string }{
		{"/v1/users/alice/server/state", "/v1/users/nobody/server/state"},
		{"/v1/users/alice/servers/lab/state", "/v1/users/alice/servers/nothing/state"},
	} {
		resp, data := ta.do(t, "PUT", p.known, `{"pod_name":"x","namespace":"untrusted"}`)
		wantError(t, resp, data, http.StatusConflict, reasonStateRefused)
		if !strings.Contains(string(data), "untrusted") {
			t.Errorf("the refusal does not say why: %s", data)
		}
		resp, data = ta.do(t, "PUT", p.unknown, `{"pod_name":"x","namespace":"default"}`)
		wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
		for _, body := range []string{`{"pod_name": 3}`, `{"pod_nmae":"x"}`, `[]`, `null x`} {
			resp, data = ta.do(t, "PUT", p.known, body, malformed())
			wantError(t, resp, data, http.StatusBadRequest, reasonBadRequest)
		}
		resp, data = ta.do(t, "PUT", p.known, `{"pod_name":"`+strings.Repeat("x", maxBodyBytes)+`"}`, malformed())
		wantError(t, resp, data, http.StatusRequestEntityTooLarge, reasonTooLarge)
		resp, data = ta.do(t, "PUT", p.known, `{}`, withHeader("Authorization", ""), malformed())
		wantError(t, resp, data, http.StatusUnauthorized, reasonUnauthorized)
	}

	before := len(ta.fake.seeds)
	ta.fake.set(serverID{User: "bob", Name: ""}, "stopped")
	resp, data := ta.do(t, "POST", "/v1/users/bob/server", `{"state":{"pvc_name":"claim-bob-old"}}`)
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("a start with a state: %d %s", resp.StatusCode, data)
	}
	ta.fake.mu.Lock()
	defer ta.fake.mu.Unlock()
	if n := len(ta.fake.spawns); n == 0 || ta.fake.spawns[n-1].State == nil || ta.fake.spawns[n-1].State.PVCName != "claim-bob-old" {
		t.Errorf("the start's state did not reach the backend: %+v", ta.fake.spawns)
	}
	if len(ta.fake.seeds) != before {
		t.Errorf("a start's state went to Seed through the handler; the backend's Spawn seeds it")
	}
}
