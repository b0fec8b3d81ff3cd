package service

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/spawner"
)

// lockedBuffer collects log lines from the Manager's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
	b.buf.WriteByte('\n')
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestE2ETokenIsNeverExposed: the hub's API token, passed in a start's
// env, is found in the server's environment Secret and nowhere else: not
// in the pod, not in the namespace's events, not in any answer of the
// API (statuses, progress, lists, errors of a refused and of a failed
// start) or its headers, not in the log at any verbosity, not in
// /metrics or /readyz.
func TestE2ETokenIsNeverExposed(t *testing.T) {
	e := newE2E(t)
	var logs lockedBuffer
	log := funcr.New(func(prefix, args string) { logs.add(prefix + " " + args) }, funcr.Options{Verbosity: 10})
	reg := prometheus.NewRegistry()
	s := e.startServiceWith(t, log, reg)

	var raw [16]byte
	_, _ = rand.Read(raw[:])
	token := "hubtok" + hex.EncodeToString(raw[:])
	env := fmt.Sprintf(`"env": {"JUPYTERHUB_API_TOKEN": %q, "JPY_API_TOKEN": %q, "JUPYTERHUB_USER": "ada"}`, token, token)

	var answers []string
	keep := func(resp *http.Response, data []byte) {
		var h bytes.Buffer
		_ = resp.Header.Write(&h)
		answers = append(answers, resp.Request.Method+" "+resp.Request.URL.String()+"\n"+h.String()+string(data))
	}
	do := func(method, path, body string, code int) {
		t.Helper()
		resp, data := s.do(t, method, path, body)
		if resp.StatusCode != code {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, code)
		}
		keep(resp, data)
	}
	ada := "/v1/users/ada/server"
	do("POST", ada, "{"+env+"}", http.StatusAccepted)
	do("GET", ada+"/progress", "", http.StatusOK)
	do("GET", ada, "", http.StatusOK)
	do("POST", ada, "{"+env+"}", http.StatusOK) // idempotent: already running
	do("GET", "/v1/servers", "", http.StatusOK)
	// Refused before anything is made: an option no profile has.
	do("POST", "/v1/users/ada/servers/bad", `{"user_options": {"profile": "no-such-profile"}, `+env+`}`, http.StatusBadRequest)
	// Accepted, then failed: the pod exits.
	do("POST", "/v1/users/ada/servers/exits", `{"user_options": {"profile": "exit3"}, `+env+`}`, http.StatusAccepted)
	do("GET", "/v1/users/ada/servers/exits/progress", "", http.StatusOK)
	do("GET", "/v1/users/ada/servers/exits", "", http.StatusOK)
	do("DELETE", ada, "", http.StatusOK)
	for _, path := range []string{"/metrics", "/readyz"} {
		resp, err := http.Get(s.probes + path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path == "/metrics" && !strings.Contains(string(data), "spawnkit_manager_starts_total") {
			t.Fatalf("/metrics lacks the Manager's metrics:\n%s", data)
		}
		keep(resp, data)
	}

	ctx := t.Context()
	secrets, err := e.c.Client.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, sec := range secrets.Items {
		if string(sec.Data["JUPYTERHUB_API_TOKEN"]) == token && string(sec.Data["JPY_API_TOKEN"]) == token {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no environment Secret holds the token: the search below would prove nothing")
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := e.c.Client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podsJSON, _ := json.Marshal(pods)
	eventsJSON, _ := json.Marshal(events)
	if len(pods.Items) == 0 || !strings.Contains(string(podsJSON), spawner.EnvSecretName("jupyter-ada--exits")) {
		t.Fatalf("the pods do not reference their Secret: %s", podsJSON)
	}
	logText := logs.String()
	if !strings.Contains(logText, `"msg"="phase"`) || !strings.Contains(logText, `"msg"="request"`) {
		t.Fatalf("the log lacks the Manager's or the API's lines: the search would prove nothing:\n%s", logText)
	}
	for what, text := range map[string]string{
		"the pods":          string(podsJSON),
		"the events":        string(eventsJSON),
		"the API answers":   strings.Join(answers, "\n"),
		"the log":           logText,
		"/metrics, /readyz": strings.Join(answers[len(answers)-2:], "\n"),
	} {
		if strings.Contains(text, token) || strings.Contains(text, hex.EncodeToString(raw[:])) {
			t.Errorf("the token is in %s:\n%s", what, text)
		}
	}
}

// TestE2EHubAttributes: the resource attributes in a spawn request reach
// the notebook container; a key the service does not take is refused
// before anything is made.
func TestE2EHubAttributes(t *testing.T) {
	e := newE2E(t)
	s := e.startService(t)
	resp, data := s.do(t, "POST", "/v1/users/ada/server", `{"attributes": {"mem_limit": "3G", "cpu_limit": 1.5, "cpu_guarantee": null}}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %s", resp.StatusCode, data)
	}
	st := decodeStatus(t, data)
	pod := e.podOf(t, st)
	lim := pod.Spec.Containers[0].Resources.Limits
	if m, c := lim.Memory().Value(), lim.Cpu().MilliValue(); m != 3<<30 || c != 1500 {
		t.Errorf("limits memory %d cpu %dm, want 3G (JupyterHub's, 3*2^30) and 1500m", m, c)
	}
	// Outside the OpenAPI document, so sent without its check.
	x := s.send(t.Context(), "POST", "/v1/users/bob/server", `{"attributes": {"image": "evil:latest"}}`)
	if x.err != nil {
		t.Fatal(x.err)
	}
	if x.resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(x.data), "image") {
		t.Errorf("an attribute the service does not take: %d %s, want 400 naming it", x.resp.StatusCode, x.data)
	}
}
