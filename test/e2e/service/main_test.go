// Package service holds the end-to-end tests of cmd/spawnkit-service: the
// binary, built once in TestMain (with the race detector when the tests
// have it), run as an operator runs it against the package's simulated
// cluster, and the shipped manifests (deploy/, docs/z2jh.md) that run it.
//
// This file holds the package's shared helpers: the simulated cluster,
// the binary, processes run from it, and restricted identities.
package service

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// cluster is the package's simulated cluster; nil when it could not start
// outside CI (the tests that need it then skip).
var cluster *testcluster.Cluster

// bin is the path of the built command, set by TestMain.
var bin string

// servicePackage is the command the tests run.
const servicePackage = "github.com/spawnkit/spawnkit/cmd/spawnkit-service"

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "spawnkit-service-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bin, err = build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.StartTimeout)
	c, err := testcluster.Start(ctx, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	cancel()
	switch {
	case err != nil && testcluster.InCI():
		fmt.Fprintf(os.Stderr, "testcluster: cannot start a lifecycle cluster, failing because CI=true: %v\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "testcluster: cannot start a lifecycle cluster; cluster tests will skip: %v\n", err)
	}
	cluster = c
	code := m.Run()
	if c != nil {
		if code != 0 {
			c.KeepLogs()
			fmt.Fprintf(os.Stderr, "testcluster: a test failed; component logs kept in %s\n", c.LogDir)
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testcluster: stopping: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(testcluster.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// build builds the command into dir with the race detector when the
// tests have it, so that the processes the tests run are checked too.
func build(dir string) (string, error) {
	out := filepath.Join(dir, "spawnkit-service")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, servicePackage)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", servicePackage, err, log.String())
	}
	return out, nil
}

// proc is one run of the binary; its output is kept (and shown when the
// test fails).
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // after done
}

// startProc runs the binary with args and extra environment (on top of
// a minimal one: the parent's KUBECONFIG etc. never leak in). The test's
// cleanup kills it if it still runs.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}, env...)
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		p.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		p.kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func (p *proc) kill() { _ = p.cmd.Process.Signal(syscall.SIGKILL) }

func (p *proc) signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// wait waits for the process to exit, at most d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s still runs after %s:\n%s", p.name, d, p.out.String())
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// get makes one GET (with a bearer token when not ""), returning the code
// and body; a connection error is code 0.
func get(ctx context.Context, client *http.Client, url, token string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// poll is how often a wait checks its condition: each check costs a
// request to a process or the cluster.
const poll = 50 * time.Millisecond

// pending is a condition's answer to testutil.EventuallyEvery: nil when
// ok, else what it saw.
func pending(ok bool, saw string) error {
	if ok {
		return nil
	}
	return errors.New(saw)
}

// kubeconfigFor writes a kubeconfig file for cfg (a testcluster admin or
// UserConfig identity) into the test's directory.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// httpClient is a client without keep-alives (each request a new
// connection, as a failover test needs); tlsConfig nil means plain HTTP.
func httpClient(tlsConfig *tls.Config) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// lines returns the process's output lines containing every s.
// wantFailure waits for p to exit and fails the test unless it exited
// non-zero with at least one "spawnkit-service:" error line, which it
// returns.
func (p *proc) wantFailure(t *testing.T) []string {
	t.Helper()
	err := p.wait(t, exitBound)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit %v, want a non-zero exit code:\n%s", err, p.out.String())
	}
	msg := p.lines("spawnkit-service:")
	if len(msg) == 0 {
		t.Fatalf("no error line:\n%s", p.out.String())
	}
	return msg
}

func (p *proc) lines(s ...string) []string {
	var out []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		ok := true
		for _, x := range s {
			ok = ok && strings.Contains(l, x)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}
