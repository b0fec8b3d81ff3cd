package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane component that this package started itself
// (envtest starts etcd and kube-apiserver). Its output goes to
// <logDir>/<name>.log.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	// done is closed when the process has exited and been reaped; err is
	// its exit error, valid after done is closed.
	done chan struct{}
	err  error
}

func startProcess(name, bin, logDir string, args ...string) (*process, error) {
	logFile, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("creating log for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The component dies with the test binary even when the binary is
	// killed without running its teardown (for example by go test's
	// -timeout), so no control plane outlives its test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	// This goroutine is owned by the process value: it ends when the
	// process exits, and stop waits for it.
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
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

// stop asks the process to end (SIGTERM), kills it after grace, and waits
// until it has been reaped.
func (p *process) stop(grace time.Duration) error {
	defer p.log.Close()
	if done, _ := p.exited(); done {
		return nil
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
	return nil
}
