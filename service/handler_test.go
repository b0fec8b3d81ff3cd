package service

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/spawner"
)

const testToken = "s3cret-token"

// testAPI is the handler over a fake backend on a real loopback server
// (so that streaming and flushing are real).
type testAPI struct {
	fake *fakeBackend
	url  string

	mu   sync.Mutex // guards logs
	logs []string
}

func newTestAPI(t *testing.T, keepalive time.Duration) *testAPI {
	ta := &testAPI{fake: newFakeBackend()}
	log := funcr.New(func(prefix, args string) {
		ta.mu.Lock()
		defer ta.mu.Unlock()
		ta.logs = append(ta.logs, args)
	}, funcr.Options{Verbosity: 1})
	h, err := newHandler(ta.fake, handlerOptions{Token: func() string { return testToken }, Keepalive: keepalive, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ta.url = srv.URL
	return ta
}

type reqOpt func(r *http.Request, check *bool)

func withHeader(k, v string) reqOpt {
	return func(r *http.Request, _ *bool) { r.Header.Set(k, v) }
}

// malformed marks a request the test makes wrong on purpose: only its
// response is checked against openapi.yaml.
func malformed() reqOpt { return func(_ *http.Request, check *bool) { *check = false } }

// do sends one request (with the right token unless an option replaces
// the Authorization header), reads the whole answer and checks both
// against openapi.yaml.
func (ta *testAPI) do(t *testing.T, method, path, body string, opts ...reqOpt) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ta.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	check := true
	for _, o := range opts {
		o(req, &check)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	validateExchange(t, req, []byte(body), resp, data, check)
	return resp, data
}

// wantError checks an error answer's status and JSON body.
func wantError(t *testing.T, resp *http.Response, data []byte, code int, reason string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Errorf("status %d, want %d; body %s", resp.StatusCode, code, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e errorBody
	if err := json.Unmarshal(data, &e); err != nil || e.Error == "" || e.Reason != reason {
		t.Errorf("error body %s (%v), want reason %s and a message", data, err, reason)
	}
}

func decodeStatus(t *testing.T, data []byte) serverStatus {
	t.Helper()
	var st serverStatus
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("status %s: %v", data, err)
	}
	return st
}

// every route, with a server that exists for those that need one.
var routes = []struct{ method, path, body string }{
	{"GET", "/v1/healthz", ""},
	{"GET", "/v1/servers", ""},
	{"POST", "/v1/users/alice/server", "{}"},
	{"GET", "/v1/users/alice/server", ""},
	{"DELETE", "/v1/users/alice/server", ""},
	{"GET", "/v1/users/alice/server/progress", ""},
	{"POST", "/v1/users/alice/servers/lab", "{}"},
	{"GET", "/v1/users/alice/servers/lab", ""},
	{"DELETE", "/v1/users/alice/servers/lab", ""},
	{"GET", "/v1/users/alice/servers/lab/progress", ""},
	{"GET", "/v1/users/alice/options-form", ""},
	{"POST", "/v1/users/alice/options-form", "{}"},
	{"POST", "/v1/users/alice/options-from-form", "{}"},
	{"PUT", "/v1/users/alice/server/state", `{"pod_name":"jupyter-alice","namespace":"default"}`},
	{"PUT", "/v1/users/alice/servers/lab/state", `{"pod_name":"jupyter-alice--lab","namespace":"default"}`},
	// Unknown paths and methods need the token too.
	{"GET", "/", ""},
	{"GET", "/v2/servers", ""},
	{"GET", "/v1/nope", ""},
	{"GET", "/v1/users/alice/servers/", ""},
	{"PUT", "/v1/servers", ""},
}

func TestAuthOnEveryPath(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.fake.set(serverID{User: "alice", Name: ""}, "running")
	ta.fake.set(serverID{User: "alice", Name: "lab"}, "running")
	ta.fake.publish(serverID{User: "alice", Name: ""}, progressEvent{Progress: 100, Ready: true, URL: "http://x", Time: time.Now()})
	ta.fake.publish(serverID{User: "alice", Name: "lab"}, progressEvent{Progress: 100, Ready: true, URL: "http://x", Time: time.Now()})
	denied := []struct {
		name string
		auth string // "" sends no header
		says string // the error's first words
	}{
		{"no header", "", "missing token: no Authorization header"},
		{"wrong token", "Bearer nope", "wrong token"},
		{"token prefix", "Bearer " + testToken[:4], "wrong token"},
		{"basic scheme", "Basic " + testToken, "missing token: the Authorization header is not Bearer <token>"},
		{"jupyterhub token scheme", "token " + testToken, "missing token: the Authorization header is not Bearer <token>"},
		{"no scheme", testToken, "missing token: the Authorization header is not Bearer <token>"},
	}
	for _, r := range routes {
		for _, d := range denied {
			t.Run(r.method+" "+r.path+"/"+d.name, func(t *testing.T) {
				opt := func(req *http.Request, check *bool) {
					*check = false
					if d.auth == "" {
						req.Header.Del("Authorization")
					} else {
						req.Header.Set("Authorization", d.auth)
					}
				}
				resp, data := ta.do(t, r.method, r.path, r.body, opt)
				wantError(t, resp, data, http.StatusUnauthorized, reasonUnauthorized)
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("no WWW-Authenticate header")
				}
				if got := resp.Header.Get(ServiceHeader); got != spawner.Version {
					t.Errorf("%s: %q, want %q on a 401 too", ServiceHeader, got, spawner.Version)
				}
				// Each side's setting is named, and nothing of the token
				// sent is echoed (a hub may log the error).
				msg := string(data)
				for _, w := range []string{d.says, "SpawnkitSpawner.service_token", "$SPAWNKIT_SERVICE_TOKEN", "-token-file"} {
					if !strings.Contains(msg, w) {
						t.Errorf("the 401 lacks %q: %s", w, msg)
					}
				}
				if strings.Contains(msg, testToken[:4]) {
					t.Errorf("the 401 echoes the token: %s", msg)
				}
			})
		}
		t.Run(r.method+" "+r.path+"/bearer", func(t *testing.T) {
			// The scheme is case-insensitive.
			resp, data := ta.do(t, r.method, r.path, r.body, withHeader("Authorization", "bearer "+testToken))
			if resp.StatusCode == http.StatusUnauthorized {
				t.Errorf("right token refused: %s", data)
			}
			if got := resp.Header.Get(ServiceHeader); got != spawner.Version {
				t.Errorf("%s: %q, want %q", ServiceHeader, got, spawner.Version)
			}
		})
	}
}

func TestUnknownPathsAreJSON(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	for _, path := range []string{"/", "/v2/servers", "/v1/nope", "/v1/users/alice/servers/"} {
		resp, data := ta.do(t, "GET", path, "")
		wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	}
	resp, data := ta.do(t, "PUT", "/v1/servers", "")
	wantError(t, resp, data, http.StatusMethodNotAllowed, reasonMethodNotAllowed)
	if resp.Header.Get("Allow") == "" {
		t.Error("405 without Allow")
	}
}

// TestRequestLogLine: one line per request with its status; a
// successful read (a poll, a list, a health check) at V(1), a change, a
// progress stream and every error at V(0).
func TestRequestLogLine(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.fake.set(serverID{User: "alice"}, "running")
	ta.fake.publish(serverID{User: "alice"}, progressEvent{Progress: 100, Message: "ready", Ready: true})
	for _, c := range []struct {
		what, method, path, body string
		opts                     []reqOpt
		status, level            int
	}{
		{"a health check", "GET", "/v1/healthz", "", nil, 200, 1},
		{"a refused token", "GET", "/v1/healthz", "", []reqOpt{withHeader("Authorization", "Bearer wrong"), malformed()}, 401, 0},
		{"a poll", "GET", "/v1/users/alice/server", "", nil, 200, 1},
		{"a list", "GET", "/v1/servers", "", nil, 200, 1},
		{"a poll of an unknown server", "GET", "/v1/users/nobody/server", "", nil, 404, 0},
		{"an unknown path", "GET", "/v1/nope", "", nil, 404, 0},
		{"a progress stream", "GET", "/v1/users/alice/server/progress", "", nil, 200, 0},
		{"a start", "POST", "/v1/users/bob/server", "{}", nil, 202, 0},
	} {
		ta.mu.Lock()
		before := len(ta.logs)
		ta.mu.Unlock()
		if resp, data := ta.do(t, c.method, c.path, c.body, c.opts...); resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s, want %d", c.what, resp.StatusCode, data, c.status)
		}
		ta.mu.Lock()
		lines := append([]string(nil), ta.logs[before:]...)
		ta.mu.Unlock()
		want := []string{fmt.Sprintf(`"level"=%d`, c.level), `"msg"="request"`, fmt.Sprintf(`"status"=%d`, c.status), `"method"="` + c.method + `"`}
		found := 0
		for _, l := range lines {
			if strings.Contains(l, testToken) {
				t.Errorf("%s: the token is logged: %s", c.what, l)
			}
			if strings.Contains(l, `"msg"="request"`) {
				found++
				for _, w := range want {
					if !strings.Contains(l, w) {
						t.Errorf("%s: request line %s lacks %s", c.what, l, w)
					}
				}
			}
		}
		if found != 1 {
			t.Errorf("%s: %d request lines %q, want 1", c.what, found, lines)
		}
	}
}

func TestHealthz(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	resp, data := ta.do(t, "GET", "/v1/healthz", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(data)) != `{"ok":true}` {
		t.Errorf("healthz: %d %s", resp.StatusCode, data)
	}
}

func TestSpawnIsIdempotent(t *testing.T) {
	for _, path := range []string{"/v1/users/alice/server", "/v1/users/alice/servers/lab"} {
		t.Run(path, func(t *testing.T) {
			ta := newTestAPI(t, time.Hour)
			resp, data := ta.do(t, "POST", path, "")
			if resp.StatusCode != http.StatusAccepted || decodeStatus(t, data).Phase != "starting" {
				t.Fatalf("first POST: %d %s, want 202 starting", resp.StatusCode, data)
			}
			resp, data = ta.do(t, "POST", path, `{}`)
			if resp.StatusCode != http.StatusOK || decodeStatus(t, data).Phase != "starting" {
				t.Errorf("second POST: %d %s, want 200 with the current status", resp.StatusCode, data)
			}
		})
	}
}

func TestSpawnPassesTheRequest(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.do(t, "POST", "/v1/users/alice/servers/lab", `{
		"user_options": {"profile": "gpu", "image": ["pangeo"], "image--unlisted-choice": ""},
		"env": {"JUPYTERHUB_API_TOKEN": "t", "A_FIRST": "1", "M": "", "my.var-1": "relaxed"},
		"cmd": ["jupyterhub-singleuser"], "args": ["--debug"], "user_id": 7, "hub_version": "5.3.0"}`)
	ta.do(t, "POST", "/v1/users/bob/server", `{"cmd": []}`)
	want := []spawnRequest{{
		UserOptions: map[string]string{"profile": "gpu", "image": "pangeo", "image--unlisted-choice": ""},
		Env:         []corev1.EnvVar{{Name: "A_FIRST", Value: "1"}, {Name: "JUPYTERHUB_API_TOKEN", Value: "t"}, {Name: "M"}, {Name: "my.var-1", Value: "relaxed"}},
		Cmd:         []string{"jupyterhub-singleuser"}, Args: []string{"--debug"}, UserID: 7, HubVersion: "5.3.0",
	}, {
		UserOptions: map[string]string{}, Env: []corev1.EnvVar{},
	}}
	if !reflect.DeepEqual(ta.fake.spawns, want) {
		t.Errorf("spawns\n%+v\nwant\n%+v", ta.fake.spawns, want)
	}
}

func TestEscapedNames(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	resp, data := ta.do(t, "POST", "/v1/users/%C3%A9l%C3%A8ve%40x/servers/my%2Flab%20%E2%9C%93", "")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %s", resp.StatusCode, data)
	}
	if st := decodeStatus(t, data); st.User != "élève@x" || st.Server != "my/lab ✓" {
		t.Errorf("server %q of user %q, want my/lab ✓ of élève@x", st.Server, st.User)
	}
}

func TestBadRequests(t *testing.T) {
	big := `{"user_options": {"a": "` + strings.Repeat("x", maxBodyBytes) + `"}}`
	cases := []struct {
		name, method, path, body string
		header                   [2]string
		code                     int
		reason                   string
	}{
		{"not JSON", "POST", "/v1/users/a/server", `{`, [2]string{}, 400, reasonBadRequest},
		{"unknown field", "POST", "/v1/users/a/server", `{"user_option": {}}`, [2]string{}, 400, reasonBadRequest},
		{"data after the JSON", "POST", "/v1/users/a/server", `{} {}`, [2]string{}, 400, reasonBadRequest},
		{"body not an object", "POST", "/v1/users/a/server", `[]`, [2]string{}, 400, reasonBadRequest},
		{"user_options not an object", "POST", "/v1/users/a/server", `{"user_options": ["gpu"]}`, [2]string{}, 400, reasonBadRequest},
		{"user option a number", "POST", "/v1/users/a/server", `{"user_options": {"profile": 3}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"user option null", "POST", "/v1/users/a/server", `{"user_options": {"profile": null}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"user option two strings", "POST", "/v1/users/a/server", `{"user_options": {"profile": ["a", "b"]}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"user option empty list", "POST", "/v1/users/a/servers/x", `{"user_options": {"profile": []}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"user option an object", "POST", "/v1/users/a/servers/x", `{"user_options": {"profile": {}}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"rejected by the backend", "POST", "/v1/users/a/servers/x", `{"user_options": {"profile": "nope"}}`, [2]string{}, 400, reasonInvalidUserOptions},
		{"env value a number", "POST", "/v1/users/a/server", `{"env": {"A": 1}}`, [2]string{}, 400, reasonBadRequest},
		{"env empty name", "POST", "/v1/users/a/server", `{"env": {"": "x"}}`, [2]string{}, 400, reasonBadRequest},
		// The API server's relaxed rule (Kubernetes 1.32 on): printable
		// ASCII but '='.
		{"env name with =", "POST", "/v1/users/a/server", `{"env": {"A=B": "x"}}`, [2]string{}, 400, reasonBadRequest},
		{"env name with a tab", "POST", "/v1/users/a/server", `{"env": {"A\tB": "x"}}`, [2]string{}, 400, reasonBadRequest},
		{"cmd a string", "POST", "/v1/users/a/server", `{"cmd": "jupyterhub-singleuser"}`, [2]string{}, 400, reasonBadRequest},
		{"user_id a string", "POST", "/v1/users/a/server", `{"user_id": "7"}`, [2]string{}, 400, reasonBadRequest},
		{"user_id a fraction", "POST", "/v1/users/a/servers/x", `{"user_id": 7.5}`, [2]string{}, 400, reasonBadRequest},
		{"body over 1 MiB", "POST", "/v1/users/a/server", big, [2]string{}, 413, reasonTooLarge},
		{"named body over 1 MiB", "POST", "/v1/users/a/servers/x", big, [2]string{}, 413, reasonTooLarge},
		{"form body over 1 MiB", "POST", "/v1/users/a/options-from-form", big, [2]string{}, 413, reasonTooLarge},
		{"options form body over 1 MiB", "POST", "/v1/users/a/options-form", big, [2]string{}, 413, reasonTooLarge},
		{"options form not JSON", "POST", "/v1/users/a/options-form", `config=x`, [2]string{}, 400, reasonBadRequest},
		{"form not JSON", "POST", "/v1/users/a/options-from-form", `profile=x`, [2]string{}, 400, reasonBadRequest},
		{"form value a string", "POST", "/v1/users/a/options-from-form", `{"profile": "gpu"}`, [2]string{}, 400, reasonBadRequest},
		{"form value null", "POST", "/v1/users/a/options-from-form", `{"profile": null}`, [2]string{}, 400, reasonBadRequest},
		{"now not a bool", "DELETE", "/v1/users/a/server?now=soon", ``, [2]string{}, 400, reasonBadRequest},
		{"named now not a bool", "DELETE", "/v1/users/a/servers/x?now=soon", ``, [2]string{}, 400, reasonBadRequest},
		{"Last-Event-ID not a number", "GET", "/v1/users/a/server/progress", ``, [2]string{"Last-Event-ID", "x"}, 400, reasonBadRequest},
		{"named Last-Event-ID negative", "GET", "/v1/users/a/servers/x/progress", ``, [2]string{"Last-Event-ID", "-1"}, 400, reasonBadRequest},
	}
	ta := newTestAPI(t, time.Hour)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []reqOpt{malformed()}
			if c.header[0] != "" {
				opts = append(opts, withHeader(c.header[0], c.header[1]))
			}
			resp, data := ta.do(t, c.method, c.path, c.body, opts...)
			wantError(t, resp, data, c.code, c.reason)
		})
	}
	if n := len(ta.fake.spawns); n != 1 {
		t.Errorf("the backend saw %d spawns, want only the one it rejected", n)
	}
}

func TestNotFound(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/users/nobody/server"},
		{"GET", "/v1/users/nobody/servers/x"},
		{"DELETE", "/v1/users/nobody/server"},
		{"DELETE", "/v1/users/nobody/servers/x"},
		{"GET", "/v1/users/nobody/server/progress"},
		{"GET", "/v1/users/nobody/servers/x/progress"},
	} {
		resp, data := ta.do(t, r.method, r.path, "")
		wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	}
}

func TestConflictWhileStopping(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	for _, path := range []string{"/v1/users/alice/server", "/v1/users/alice/servers/lab"} {
		s := serverID{User: "alice", Name: strings.TrimPrefix(path, "/v1/users/alice/servers/")}
		if s.Name == path {
			s.Name = ""
		}
		ta.fake.set(s, "stopping")
		resp, data := ta.do(t, "POST", path, "{}")
		wantError(t, resp, data, http.StatusConflict, reasonConflict)
	}
}

func TestStopPassesNow(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.fake.set(serverID{User: "alice", Name: ""}, "running")
	ta.fake.set(serverID{User: "alice", Name: "lab"}, "running")
	for _, q := range []string{"/v1/users/alice/server?now=true", "/v1/users/alice/server", "/v1/users/alice/servers/lab?now=false", "/v1/users/alice/servers/lab?now=1"} {
		resp, data := ta.do(t, "DELETE", q, "")
		if st := decodeStatus(t, data); resp.StatusCode != http.StatusOK || st.Phase != "stopped" || st.ExitCode == nil {
			t.Errorf("DELETE %s: %d %s, want 200 stopped with an exit code", q, resp.StatusCode, data)
		}
	}
	if want := []bool{true, false, false, true}; !reflect.DeepEqual(ta.fake.stops, want) {
		t.Errorf("now passed %v, want %v", ta.fake.stops, want)
	}
}

func TestPoll(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	ta.fake.set(serverID{User: "alice", Name: ""}, "running")
	ta.fake.set(serverID{User: "alice", Name: "lab"}, "failed")
	resp, data := ta.do(t, "GET", "/v1/users/alice/server", "")
	if st := decodeStatus(t, data); resp.StatusCode != 200 || st.Phase != "running" || st.ExitCode != nil || !strings.Contains(string(data), `"exit_code":null`) {
		t.Errorf("running: %d %s, want exit_code null", resp.StatusCode, data)
	}
	resp, data = ta.do(t, "GET", "/v1/users/alice/servers/lab", "")
	if st := decodeStatus(t, data); resp.StatusCode != 200 || st.ExitCode == nil || *st.ExitCode != 1 {
		t.Errorf("failed: %d %s, want exit_code 1", resp.StatusCode, data)
	}
}

func TestListEmptyIsArray(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	resp, data := ta.do(t, "GET", "/v1/servers", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("empty list: %d %q, want []", resp.StatusCode, data)
	}
	ta.fake.set(serverID{User: "alice", Name: ""}, "running")
	_, data = ta.do(t, "GET", "/v1/servers", "")
	var list []serverStatus
	if err := json.Unmarshal(data, &list); err != nil || len(list) != 1 || list[0].User != "alice" {
		t.Errorf("list %s (%v), want alice's server", data, err)
	}
}

// events of a start: two steps, then ready, all of the start's trace.
func startEvents() []progressEvent {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	return []progressEvent{
		{Progress: 30, Message: "Scheduled", Time: t0, TraceID: trace},
		{Progress: 50, Message: "Pulling <image> & \"more\"", Time: t0.Add(time.Second), TraceID: trace},
		{Progress: 100, Message: "Server ready", Ready: true, URL: "http://127.0.0.1:8888", Time: t0.Add(2 * time.Second), TraceID: trace},
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	id, event string
	data      progressEvent
}

func parseSSE(t *testing.T, stream string) (events []sseEvent, comments int) {
	t.Helper()
	for _, block := range strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		if block == "" {
			continue
		}
		var e sseEvent
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "":
				comments++
			case "id":
				e.id = v
			case "event":
				e.event = v
			case "data":
				if err := json.Unmarshal([]byte(v), &e.data); err != nil {
					t.Fatalf("data %q: %v", v, err)
				}
			default:
				t.Fatalf("unexpected line %q", line)
			}
		}
		if e.id != "" {
			events = append(events, e)
		}
	}
	return events, comments
}

func TestProgressReplaysAndResumes(t *testing.T) {
	for _, c := range []struct {
		path, lastID string
		wantIDs      []string
	}{
		{"/v1/users/alice/server/progress", "", []string{"1", "2", "3"}},
		{"/v1/users/alice/servers/lab/progress", "", []string{"1", "2", "3"}},
		{"/v1/users/alice/server/progress", "2", []string{"3"}},
		{"/v1/users/alice/servers/lab/progress", "1", []string{"2", "3"}},
		// All seen, or an id past the end: the final event again, never
		// an empty stream.
		{"/v1/users/alice/server/progress", "3", []string{"3"}},
		{"/v1/users/alice/servers/lab/progress", "7", []string{"3"}},
	} {
		t.Run(c.path+"#"+c.lastID, func(t *testing.T) {
			ta := newTestAPI(t, time.Hour)
			for _, s := range []serverID{{User: "alice", Name: ""}, {User: "alice", Name: "lab"}} {
				ta.fake.set(s, "running")
				for _, e := range startEvents() {
					ta.fake.publish(s, e)
				}
			}
			var opts []reqOpt
			if c.lastID != "" {
				opts = append(opts, withHeader("Last-Event-ID", c.lastID))
			}
			resp, data := ta.do(t, "GET", c.path, "", opts...)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
			}
			events, _ := parseSSE(t, string(data))
			var ids []string
			for _, e := range events {
				ids = append(ids, e.id)
			}
			if !reflect.DeepEqual(ids, c.wantIDs) {
				t.Fatalf("ids %v, want %v\n%s", ids, c.wantIDs, data)
			}
			all := startEvents()
			for i, e := range events {
				want := all[len(all)-len(events)+i]
				if e.data.Message != want.Message || e.data.Progress != want.Progress || (e.event == "ready") != want.Ready ||
					e.data.TraceID != want.TraceID {
					t.Errorf("event %s %+v, want %+v", e.event, e.data, want)
				}
			}
			if len(events) > 0 {
				last := events[len(events)-1]
				if last.event != "ready" || last.data.URL != "http://127.0.0.1:8888" || last.data.Progress != 100 || !last.data.Time.Equal(all[2].Time) {
					t.Errorf("last event %+v", last)
				}
			}
		})
	}
}

func TestProgressFailedEvent(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	s := serverID{User: "alice", Name: ""}
	ta.fake.set(s, "failed")
	ta.fake.publish(s, progressEvent{Progress: 100, Failed: true, Reason: "ErrImagePull", Message: "no image", Time: time.Now()})
	_, data := ta.do(t, "GET", "/v1/users/alice/server/progress", "")
	events, _ := parseSSE(t, string(data))
	if len(events) != 1 || events[0].event != "failed" || events[0].data.Reason != "ErrImagePull" {
		t.Errorf("events %+v, want one failed event with its reason", events)
	}
}

// TestProgressFollowsWithKeepalive reads a live stream: keepalive
// comments while nothing happens, each event as soon as it is published
// (flushed), and the end after the final event.
func TestProgressFollowsWithKeepalive(t *testing.T) {
	ta := newTestAPI(t, 20*time.Millisecond)
	s := serverID{User: "alice", Name: "lab"}
	ta.fake.set(s, "starting")
	ta.fake.publish(s, startEvents()[0])
	req, _ := http.NewRequestWithContext(t.Context(), "GET", ta.url+"/v1/users/alice/servers/lab/progress", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var stream strings.Builder
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(stream.String(), want) {
			line, err := r.ReadString('\n')
			stream.WriteString(line)
			if err != nil {
				t.Fatalf("stream ended (%v) before %q:\n%s", err, want, stream.String())
			}
		}
	}
	readUntil("id: 1\n")
	readUntil(": keepalive\n")
	ta.fake.publish(s, startEvents()[1])
	readUntil("id: 2\n")
	ta.fake.publish(s, startEvents()[2])
	rest, err := io.ReadAll(r) // ends after the final event
	if err != nil {
		t.Fatal(err)
	}
	stream.Write(rest)
	events, comments := parseSSE(t, stream.String())
	if len(events) != 3 || events[2].event != "ready" || comments == 0 {
		t.Errorf("%d events, %d keepalives:\n%s", len(events), comments, stream.String())
	}
	validateExchange(t, req, nil, resp, []byte(stream.String()), true)
}
