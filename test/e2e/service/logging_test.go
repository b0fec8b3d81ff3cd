package service

// The binary's log: -v raises its verbosity, and no level prints a token.

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// TestBinaryVerbosity: with -v 1 the V(1) lines appear (the HTTP bounds
// at start, a successful read's request line); by default none does,
// while the V(0) request lines (an error's) do.
func TestBinaryVerbosity(t *testing.T) {
	c := testcluster.Require(t, cluster)
	const token = "verbosity-test-token"
	e := newBinEnv(t, c, token)
	quiet := e.start(t, "spawnkit-service")
	verbose := e.start(t, "spawnkit-service -v 1", "-v", "1")
	for _, s := range []*binService{quiet, verbose} {
		s.waitReady(t)
		if r := binDo(t, httpClient(nil), http.MethodGet, "http://"+s.listen+"/v1/servers", token); r.code != http.StatusOK {
			t.Fatalf("%s: GET /v1/servers: %d %s", s.name, r.code, r.body)
		}
		if r := binDo(t, httpClient(nil), http.MethodGet, "http://"+s.listen+"/v1/users/nobody/server", token); r.code != http.StatusNotFound {
			t.Fatalf("%s: GET of an unknown server: %d %s, want 404", s.name, r.code, r.body)
		}
		// Lines are written in the order the requests were answered:
		// once the error's is there, the list's would be too.
		s.waitLines(t, 0, "the error's request line", `"level"=0`, `"msg"="request"`, `"status"=404`)
	}
	// A successful read (a hub's poll, a list) is V(1): a hub polls every
	// server every 30 s.
	if l := quiet.lines(`"msg"="request"`, `"status"=200`); len(l) > 0 {
		t.Errorf("the default verbosity logged a successful read:\n%s", strings.Join(l, "\n"))
	}
	if l := verbose.lines(`"level"=1`, `"msg"="request"`, `"path"="/v1/servers"`, `"status"=200`); len(l) != 1 {
		t.Errorf("-v 1 logged %d lines of the list at V(1), want 1:\n%s", len(l), verbose.out.String())
	}
	if l := verbose.lines(`"level"=1`, "HTTP bounds"); len(l) != 1 {
		t.Errorf("-v 1 logged %d lines of the HTTP bounds at V(1), want 1:\n%s", len(l), verbose.out.String())
	}
	if l := quiet.lines(`"level"=1`); len(l) > 0 {
		t.Errorf("the default verbosity logged V(1) lines:\n%s", strings.Join(l, "\n"))
	}
}

// TestBinaryLogsNoToken runs the binary at the highest -v and drives a
// server's whole life with the hub's API token in its env, next to
// requests with a wrong token, the token in the wrong scheme or in the
// query string, and a malformed start: the hub's token reaches the
// server's Secret, and neither it nor the service's token is anywhere
// in the output, as text or in a hex dump (client-go dumps the bodies of
// its requests so from V(8), which is why -v stops below it).
func TestBinaryLogsNoToken(t *testing.T) {
	c := testcluster.Require(t, cluster)
	token, hubToken := "service-"+randomHex(t), "hub-"+randomHex(t)
	e := newBinEnv(t, c, token)
	v := strconv.Itoa(maxVerbosity(t))
	s := e.start(t, "spawnkit-service -v "+v, "-v", v)
	s.waitReady(t)
	const user = "token-log"
	api := "http://" + s.listen
	start := `{"env": {"JUPYTERHUB_API_TOKEN": "` + hubToken + `"}}`
	for _, r := range []struct {
		what, method, path, auth, body string
		want                           int
	}{
		{"a start with a wrong token", http.MethodPost, serverPath(user), "Bearer wrong-" + randomHex(t), start, http.StatusUnauthorized},
		{"a start with the token in another scheme", http.MethodPost, serverPath(user), "Token " + token, start, http.StatusUnauthorized},
		{"the token in the query", http.MethodGet, "/v1/servers?token=" + token, "", "", http.StatusUnauthorized},
		{"a malformed start", http.MethodPost, serverPath(user), "Bearer " + token, `{"env": {"JUPYTERHUB_API_TOKEN": "` + hubToken + `"}, "no_such_field": 1}`, http.StatusBadRequest},
		{"a start", http.MethodPost, serverPath(user), "Bearer " + token, start, http.StatusAccepted},
	} {
		if code, body := logDo(t, r.method, api+r.path, r.auth, r.body); code != r.want {
			t.Fatalf("%s: %d %s, want %d", r.what, code, body, r.want)
		}
	}
	waitRunning(t, s, token, user)
	if code, body := logDo(t, http.MethodGet, api+serverPath(user)+"/progress", "Bearer "+token, ""); code != http.StatusOK || !strings.Contains(body, "event: ready") {
		t.Errorf("the start's progress: %d %s, want a stream ending ready", code, body)
	}
	if code, _ := logDo(t, http.MethodGet, api+serverPath(user), "Bearer wrong-"+randomHex(t), ""); code != http.StatusUnauthorized {
		t.Errorf("a poll with a wrong token: %d, want 401", code)
	}
	secrets, err := c.Client.CoreV1().Secrets(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reached := false
	for _, sec := range secrets.Items {
		for _, v := range sec.Data {
			reached = reached || string(v) == hubToken
		}
	}
	if !reached {
		t.Errorf("the hub's token is in no Secret of %s: the start did not pass it on", e.ns)
	}
	if code, body := logDo(t, http.MethodDelete, api+serverPath(user), "Bearer "+token, ""); code != http.StatusOK {
		t.Errorf("the stop: %d %s, want 200", code, body)
	}

	// The log was written, at the raised level.
	s.waitLines(t, 3, "the refused requests' lines", `"msg"="request"`, `"status"=401`)
	if len(s.lines(`"level"=1`)) == 0 {
		t.Errorf("no V(1) line at -v %s:\n%s", v, s.out.String())
	}
	out := s.out.String()
	for name, tok := range map[string]string{"the service's token": token, "the hub's token": hubToken} {
		if inLog(out, tok) {
			t.Errorf("%s is in the output:\n%s", name, out)
		}
	}
	s.mustRun(t)
}

// maxVerbosity is the binary's highest -v, as its help states it.
func maxVerbosity(t *testing.T) int {
	t.Helper()
	p := startProc(t, "spawnkit-service -h", nil, "-h")
	if err := p.wait(t, exitBound); err != nil {
		t.Fatalf("-h: %v\n%s", err, p.out.String())
	}
	m := regexp.MustCompile(`log verbosity, 0 to (\d+)`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("-h does not state the highest -v:\n%s", p.out.String())
	}
	v, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hexDumpRow is a row of encoding/hex's Dump inside a funcr value (its
// newlines escaped): the offset, up to 16 bytes in hex, and their text.
var hexDumpRow = regexp.MustCompile(`[0-9a-f]{8}  [0-9a-f ]{3,50} \|(.*?)\|(?:\\n|"| \[)`)

// inLog reports whether s is in the log out as text, or in the text
// column of a hex dump, where 16-byte rows split it.
func inLog(out, s string) bool {
	if strings.Contains(out, s) {
		return true
	}
	var text strings.Builder
	for _, m := range hexDumpRow.FindAllStringSubmatch(out, -1) {
		text.WriteString(m[1])
	}
	return strings.Contains(text.String(), s)
}

// logDo makes one request with the Authorization header auth (none when
// "") and a JSON body (none when ""), returning the code and body; a
// connection error fails the test.
func logDo(t *testing.T, method, url, auth, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, string(data)
}
