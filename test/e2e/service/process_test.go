package service

// Runs of the built binary, with their output.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

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

// lines returns the process's output lines containing every s.
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
