package jupyterhub_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// tools are the programs the test runs besides its own.
type tools struct {
	// Debian's JupyterHub and Debian's python3 (not the first python3 on
	// PATH, which may be a pyenv or a virtualenv without JupyterHub), which
	// makes the venv JupyterHub runs from (package_test.go) and runs the
	// Python unit tests.
	python, jupyterhub string
	// node and configurable-http-proxy's script, from an npm prefix under
	// the spawnkit cache (npm install --prefix <cache>/spawnkit/chp).
	node, chp string
	// chromium and playwright-core (npm install --prefix
	// <cache>/spawnkit/playwright) for the spawn-pending page; empty when
	// missing, browserMissing says why.
	chromium, playwrightModules string
	browserMissing              error
}

// cacheDir is spawnkit's cache, where .ci/run installs the npm packages:
// $XDG_CACHE_HOME/spawnkit, else ~/.cache/spawnkit (as testcluster's
// binaries).
func cacheDir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "spawnkit")
}

// findTools locates every program, or says what is missing and how to
// install it.
func findTools() (tools, error) {
	tl := tools{
		python:            "/usr/bin/python3",
		jupyterhub:        "/usr/bin/jupyterhub",
		chp:               filepath.Join(cacheDir(), "chp", "node_modules", "configurable-http-proxy", "bin", "configurable-http-proxy"),
		chromium:          "/usr/bin/chromium",
		playwrightModules: filepath.Join(cacheDir(), "playwright", "node_modules"),
	}
	var missing []string
	for _, f := range []string{tl.python, tl.jupyterhub} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, fmt.Sprintf("%s (apt-get install jupyterhub)", f))
		}
	}
	if len(missing) == 0 {
		if out, err := exec.Command(tl.python, "-c", "import jupyterhub").CombinedOutput(); err != nil {
			missing = append(missing, fmt.Sprintf("the jupyterhub module for %s: %v: %s", tl.python, err, out))
		}
		if err := requireInstallTools(tl.python); err != nil {
			missing = append(missing, err.Error())
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node (Node.js 20 or later from NodeSource; then make prereqs)")
	}
	tl.node = node
	if _, err := os.Stat(tl.chp); err != nil {
		missing = append(missing, fmt.Sprintf("%s (npm install --prefix %s configurable-http-proxy@5.3)", tl.chp, filepath.Join(cacheDir(), "chp")))
	}
	if len(missing) > 0 {
		return tl, fmt.Errorf("missing: %s", strings.Join(missing, "; "))
	}
	if _, err := os.Stat(tl.chromium); err != nil {
		tl.browserMissing = fmt.Errorf("%s missing (apt-get install chromium)", tl.chromium)
	} else if _, err := os.Stat(filepath.Join(tl.playwrightModules, "playwright-core")); err != nil {
		tl.browserMissing = fmt.Errorf("playwright-core missing (npm install --prefix %s playwright-core@1.65)", filepath.Join(cacheDir(), "playwright"))
	}
	return tl, nil
}

// process is one program the test started. It dies with the test binary
// (a parent-death signal), and stop ends it by its PID.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// done is closed once the process has exited and been reaped; err is
	// its exit error, valid after done is closed.
	done chan struct{}
	err  error
}

// startProcess starts bin with args in dir, its output appended to logPath.
func startProcess(name, dir, logPath string, env []string, bin string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log for %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Killed with the test binary even when that one dies without its
	// cleanups (go test -timeout), as testcluster's components are.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	// Owned by p: ends when the process exits; stop waits for it.
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL after grace, and waits until the
// process has been reaped. It is safe to call more than once.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.name, p.cmd.Process.Pid, grace)
}

// exited reports whether the process has ended, with its exit error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// logTail returns the last n lines of a log file.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether a line of the log at path contains every
// one of parts.
func logContains(path string, parts ...string) bool { return logCount(path, parts...) > 0 }

// logCount is how many lines of the log at path contain every one of
// parts.
func logCount(path string, parts ...string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// logTime returns the time stamp of the first line of a JupyterHub log
// that contains every one of parts ("[W 2006-01-02 15:04:05.000 JupyterHub
// ...", local time).
func logTime(path string, parts ...string) (time.Time, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if !all || len(line) < 26 || line[0] != '[' {
			continue
		}
		ts, err := time.ParseInLocation("2006-01-02 15:04:05.000", line[3:26], time.Local)
		if err != nil {
			continue
		}
		return ts, true
	}
	return time.Time{}, false
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	addr, err := testcluster.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// buildService builds cmd/spawnkit-service into dir.
func buildService(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "spawner-service")
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "./cmd/spawnkit-service")
	cmd.Dir = filepath.Join("..", "..") // the module root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/spawnkit-service: %w\n%s", err, out.String())
	}
	return bin, nil
}

// waitHTTP polls url with client (nil: a plain one) until it answers with
// want, or ctx ends; p, when set, must not have exited meanwhile.
func waitHTTP(ctx context.Context, client *http.Client, url, header string, want int, p *process) error {
	if client == nil {
		client = http.DefaultClient
	}
	client = &http.Client{Transport: client.Transport, Timeout: 2 * time.Second}
	var last string
	for {
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s exited (%v) before %s answered; log:\n%s", p.name, err, url, logTail(p.logPath, 30))
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if header != "" {
			k, v, _ := strings.Cut(header, ": ")
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer %d: last %s", url, want, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// requireTools returns the tools or skips (fails under CI=true).
func requireTools(t *testing.T) tools {
	t.Helper()
	if toolsErr != nil {
		if testcluster.InCI() {
			t.Fatalf("JupyterHub test prerequisites, required because CI=true: %v", toolsErr)
		}
		t.Skipf("JupyterHub test prerequisites: %v", toolsErr)
	}
	return found
}
