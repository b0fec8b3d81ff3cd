// Package service holds the end-to-end tests of cmd/spawnkit-service: the
// binary, built once in TestMain (with the race detector when the tests
// have it), run as an operator runs it against the package's simulated
// cluster, and the shipped manifests (deploy/, docs/z2jh.md) that run it.
//
// main_test.go starts the cluster and builds the binary; process_test.go
// runs it; fixtures_test.go holds what the tests share: a namespace and
// configuration of their own, a running service, requests and waits.
package service

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"

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
