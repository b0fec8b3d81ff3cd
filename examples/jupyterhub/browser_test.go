package jupyterhub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// screenshotEnv, set to 1, makes the test save its screenshot of the
// spawn-pending page as spawn-pending.png, which README.md shows.
const screenshotEnv = "SPAWNKIT_UPDATE_SCREENSHOT"

// maxScreenshot bounds the committed screenshot's size.
const maxScreenshot = 300 << 10

// screenshotSpawnPending logs in as user with headless Chromium, opens the
// spawn-pending page of a starting server, waits until the page's event
// log shows spawnkit's last event (the pod is ready, JupyterHub waits for
// the server to answer), takes a screenshot and checks that the log
// holds the Kubernetes events spawnkit relayed. It skips without Chromium and playwright-core, except under
// CI=true.
func screenshotSpawnPending(t *testing.T, s *stack, user, server string) {
	t.Helper()
	if s.tools.browserMissing != nil {
		if testcluster.InCI() {
			t.Fatalf("browser, required because CI=true: %v", s.tools.browserMissing)
		}
		t.Logf("no screenshot of the spawn-pending page: %v", s.tools.browserMissing)
		return
	}
	dir := t.TempDir()
	png := filepath.Join(dir, "spawn-pending.png")
	pending := "/hub/spawn-pending/" + url.PathEscape(user)
	if server != "" {
		pending += "/" + url.PathEscape(server)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "spawn_pending.js"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.tools.node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+s.tools.playwrightModules,
		"HUB="+s.hubURL(),
		"HUB_USER="+user,
		"PENDING_PATH="+pending,
		// Relayed from the service's final event: every event of the
		// start is on the page by then.
		"EXPECT=waiting for it to respond",
		"PNG="+png,
		"CHROMIUM="+s.tools.chromium,
		"PROFILE_DIR="+filepath.Join(dir, "profile"),
		// Chromium's crash handler and caches write here, not in $HOME.
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_CACHE_HOME="+filepath.Join(dir, "cache"),
	)
	// node (and with it Chromium, whose pipe closes) dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	begin := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("screenshot of %s: %v\n%s", pending, err, stderr.String())
	}
	var page struct {
		Log     []string `json:"log"`
		Message string   `json:"message"`
	}
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("screenshot script's output %q: %v", out, err)
	}
	t.Logf("spawn-pending page after %s: %q", time.Since(begin).Round(time.Millisecond), page.Log)
	relayed := 0
	for _, line := range page.Log {
		if strings.Contains(line, "[Normal]") {
			relayed++
		}
	}
	if relayed == 0 || len(page.Log) < 2 || page.Log[0] != "Server requested" {
		t.Fatalf("the spawn-pending page's event log %q lacks spawnkit's progress messages", page.Log)
	}
	data, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) > maxScreenshot {
		t.Fatalf("screenshot: %d bytes, want a PNG of at most %d", len(data), maxScreenshot)
	}
	if os.Getenv(screenshotEnv) == "1" {
		if err := os.WriteFile("spawn-pending.png", data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("saved spawn-pending.png (%d bytes)", len(data))
	}
}

// browserSession is a user's cookie session with JupyterHub, over plain
// HTTP: enough for its login and spawn forms.
type browserSession struct {
	t      *testing.T
	s      *stack
	client *http.Client
}

func newBrowserSession(t *testing.T, s *stack) *browserSession {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browserSession{t: t, s: s, client: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

// login signs in through DummyAuthenticator's form.
func (b *browserSession) login(ctx context.Context, user string) {
	b.t.Helper()
	b.get(ctx, "/hub/login")
	b.post(ctx, "/hub/login", url.Values{"username": {user}, "password": {"any"}})
}

func (b *browserSession) get(ctx context.Context, path string) string {
	b.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.s.hubURL()+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browserSession) post(ctx context.Context, path string, form url.Values) string {
	b.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.s.hubURL()+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// do sends a request, following redirects within the hub, and returns
// the final page; a status other than 200 fails the test.
func (b *browserSession) do(req *http.Request) string {
	b.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("%s %s = %s %.500s", req.Method, req.URL.Path, resp.Status, data)
	}
	return string(data)
}
