package jupyterhub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/spawner"
)

// pythonDir is the spawnkit-jupyterhub package's source, python/ at the
// module root.
var pythonDir = filepath.Join("..", "..", "python")

// pythonEnv keeps the user's Python setup out of every Python the test
// runs: no PYTHONPATH (the package comes from where pip put it, nothing
// else), no user site-packages, no pip configuration, no bytecode
// written next to the sources.
var pythonEnv = []string{"PYTHONPATH=", "PYTHONNOUSERSITE=1", "PIP_CONFIG_FILE=" + os.DevNull, "PYTHONDONTWRITEBYTECODE=1"}

// venv is the virtual environment the package is installed into, as an
// operator installs it: over Debian's JupyterHub (--system-site-packages),
// with pip, offline.
type venv struct {
	dir    string
	python string // its interpreter, which runs JupyterHub
	took   time.Duration
}

var (
	installOnce sync.Once
	installed   venv
	installErr  error
)

// requirePackage installs the package once per test binary and returns
// the venv; an install that fails fails the test (the prerequisites were
// checked by findTools, so a failure is the package's).
func requirePackage(t *testing.T) venv {
	t.Helper()
	installOnce.Do(func() {
		installed, installErr = installPackage(context.Background())
	})
	if installErr != nil {
		t.Fatalf("installing spawnkit-jupyterhub: %v", installErr)
	}
	return installed
}

// venvRoot holds one venv per test binary, named by its PID, under
// spawnkit's cache (outside the repository); those of binaries that
// have exited are removed by the next one.
func venvRoot() string { return filepath.Join(cacheDir(), "jupyterhub-venv") }

// installPackage creates a fresh venv over Debian's JupyterHub and
// installs ../../python into it with pip, offline and without build
// isolation (the build backend, hatchling, is Debian's python3-hatchling):
//
//	python3 -m venv --system-site-packages DIR
//	DIR/bin/pip install --no-build-isolation --no-index <repo>/python
func installPackage(ctx context.Context) (venv, error) {
	begin := time.Now()
	removeDeadVenvs()
	dir := filepath.Join(venvRoot(), strconv.Itoa(os.Getpid()))
	if err := os.RemoveAll(dir); err != nil {
		return venv{}, err
	}
	if err := os.MkdirAll(venvRoot(), 0o755); err != nil {
		return venv{}, err
	}
	src, err := filepath.Abs(pythonDir)
	if err != nil {
		return venv{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	v := venv{dir: dir, python: filepath.Join(dir, "bin", "python")}
	steps := [][]string{
		{found.python, "-m", "venv", "--system-site-packages", dir},
		{filepath.Join(dir, "bin", "pip"), "install", "--no-build-isolation", "--no-index",
			"--disable-pip-version-check", "--no-input", "--quiet", src},
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), pythonEnv...)
		cmd.Dir = os.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			return v, fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	v.took = time.Since(begin)
	return v, nil
}

// removeDeadVenvs removes the venvs of test binaries that have exited.
func removeDeadVenvs() {
	entries, err := os.ReadDir(venvRoot())
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(venvRoot(), e.Name()))
		}
	}
}

// run runs the venv's Python with args and returns its output.
func (v venv) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, v.python, args...)
	cmd.Env = append(os.Environ(), pythonEnv...)
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", v.python, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var pyVersion = regexp.MustCompile(`(?m)^__version__ = "([^"]+)"$`)

// TestPythonVersion: the Python package is versioned with the Go module:
// its version (spawnkit_jupyterhub/_version.py, which pyproject.toml
// reads) is spawner.Version.
func TestPythonVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(pythonDir, "spawnkit_jupyterhub", "_version.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := pyVersion.FindSubmatch(data)
	if m == nil {
		t.Fatalf("_version.py has no __version__ = \"...\" line:\n%s", data)
	}
	if got := string(m[1]); got != spawner.Version {
		t.Errorf("python/spawnkit_jupyterhub/_version.py has version %q, spawner.Version is %q: set both", got, spawner.Version)
	}
	project, err := os.ReadFile(filepath.Join(pythonDir, "pyproject.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`dynamic = ["version"]`, `path = "spawnkit_jupyterhub/_version.py"`} {
		if !bytes.Contains(project, []byte(want)) {
			t.Errorf("pyproject.toml lacks %s: the package's version must come from _version.py", want)
		}
	}
}

// TestPythonUnitTests runs python/tests with Debian's python3 and
// JupyterHub: the parts of the spawner contract that JupyterHub 3.0
// cannot exercise, against stand-ins of the JupyterHub 5.x and 6.0 calls
// (python/tests/hubstubs.py), and the retries and TLS, against a fake
// service. Once on each of tornado's HTTP clients
// (SPAWNKIT_TEST_HTTP_CLIENT): the simple one, and the curl one that
// JupyterHub uses whenever pycurl is installed (skipped without pycurl,
// unless CI=true).
func TestPythonUnitTests(t *testing.T) {
	requireTools(t)
	for _, client := range []string{"simple", "curl"} {
		t.Run(client, func(t *testing.T) {
			if client == "curl" {
				if out, err := exec.Command(found.python, "-c", "import pycurl").CombinedOutput(); err != nil {
					if testcluster.InCI() {
						t.Fatalf("pycurl, required because CI=true (apt-get install python3-pycurl): %v: %s", err, out)
					}
					t.Skipf("pycurl is not installed (apt-get install python3-pycurl): %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, found.python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
			cmd.Dir = pythonDir
			cmd.Env = append(append(os.Environ(), pythonEnv...), "SPAWNKIT_TEST_HTTP_CLIENT="+client)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("SPAWNKIT_TEST_HTTP_CLIENT=%s %s -m unittest in python/: %v\n%s", client, found.python, err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			summary := lines[len(lines)-1]
			for _, l := range lines {
				if strings.HasPrefix(l, "Ran ") {
					summary = l + ", " + summary
				}
			}
			t.Logf("python/tests on the %s client: %s", client, summary)
		})
	}
}

// testPackage checks the installed package as an operator would see it:
// its version and JupyterHub's, the entry point JupyterHub resolves
// "spawnkit" through, and JupyterHub's log naming the class it loaded
// from the venv.
func testPackage(t *testing.T, s *stack) {
	ctx := t.Context()
	out, err := s.venv.run(ctx, "-m", "spawnkit_jupyterhub", "--version")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "spawnkit-jupyterhub "+spawner.Version || !strings.HasPrefix(lines[1], "jupyterhub 3.") {
		t.Errorf("python -m spawnkit_jupyterhub --version printed %q, want spawnkit-jupyterhub %s and Debian's jupyterhub 3.x", out, spawner.Version)
	}
	out, err = s.venv.run(ctx, "-c", `import importlib.metadata as m
ep, = [e for e in m.entry_points(group="jupyterhub.spawners") if e.name == "spawnkit"]
print(ep.value, m.version("spawnkit-jupyterhub"), ep.load().__module__)`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "spawnkit_jupyterhub:SpawnkitSpawner " + spawner.Version + " spawnkit_jupyterhub.spawner"; strings.TrimSpace(out) != want {
		t.Errorf("the jupyterhub.spawners entry point spawnkit: %q, want %q", strings.TrimSpace(out), want)
	}
	if want := "Using Spawner: spawnkit_jupyterhub.spawner.SpawnkitSpawner-" + spawner.Version; !logContains(s.logPath("jupyterhub"), want) {
		t.Errorf("JupyterHub's log does not say %q", want)
	}
	t.Logf("spawnkit-jupyterhub installed into a fresh venv in %s", s.venv.took.Round(time.Millisecond))
}

// requireInstallTools is part of findTools: what a venv and an offline
// pip install of the package need besides Debian's python3.
func requireInstallTools(python string) error {
	out, err := exec.Command(python, "-c", "import venv, ensurepip, hatchling").CombinedOutput()
	if err != nil {
		return fmt.Errorf("venv, ensurepip and hatchling for %s (apt-get install python3-venv python3-hatchling): %v: %s", python, err, bytes.TrimSpace(out))
	}
	return nil
}
