package service

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// cluster is the package's simulated cluster for e2e_test.go; nil when it
// could not start outside CI (the e2e tests then skip).
var cluster *testcluster.Cluster

// TestMain is testcluster.Main with one more check between the run and
// the teardown: that the tests produced every answer openapi.yaml
// documents. (testcluster.Main exits itself, so it cannot be extended.)
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.StartTimeout)
	c, err := testcluster.Start(ctx, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	cancel()
	switch {
	case err != nil && testcluster.InCI():
		fmt.Fprintf(os.Stderr, "testcluster: cannot start a lifecycle cluster, failing because CI=true: %v\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "testcluster: cannot start a lifecycle cluster; e2e tests will skip: %v\n", err)
	}
	cluster = c
	code := m.Run()
	// Every documented answer must have been seen, when every test ran.
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" && !testing.Short() {
		if err := checkCoverage(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if c != nil {
		if code != 0 {
			c.KeepLogs()
			fmt.Fprintf(os.Stderr, "testcluster: a test failed; component logs kept in %s\n", c.LogDir)
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testcluster: stopping: %v\n", err)
			code = 1
		}
		cluster = nil
	}
	if code == 0 {
		if err := goleak.Find(testcluster.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
