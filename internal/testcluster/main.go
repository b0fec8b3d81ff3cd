package testcluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// StartTimeout bounds Main's start of a cluster.
const StartTimeout = 3 * time.Minute

// InCI reports whether the tests run in CI (CI=true), where a cluster that
// cannot start fails the run instead of skipping integration tests.
func InCI() bool { return os.Getenv("CI") == "true" }

// Main is the body of TestMain for a package that shares one cluster:
//
//	var cluster *testcluster.Cluster
//
//	func TestMain(m *testing.M) {
//		testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle}, &cluster)
//	}
//
// It starts the cluster, stores it in *cluster, runs the tests, stops the
// cluster, checks for leaked goroutines with goleak and exits. When the
// cluster cannot start, Main exits non-zero under CI=true; elsewhere it
// says why, leaves *cluster nil and runs the tests, whose Require calls
// skip. When a test fails, the component logs are kept and their
// directory printed.
func Main(m *testing.M, opts Options, cluster **Cluster) {
	os.Exit(run(m, opts, cluster))
}

func run(m *testing.M, opts Options, cluster **Cluster) int {
	c, err := setUp(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*cluster = c
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
		*cluster = nil
	}
	if code == 0 {
		if err := goleak.Find(LeakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// setUp starts the package's cluster. A cluster that cannot start is an
// error under CI=true; elsewhere it is reported and setUp returns no
// cluster, so that Require skips.
func setUp(opts Options) (*Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := Start(ctx, opts)
	if err == nil {
		return c, nil
	}
	if InCI() {
		return nil, fmt.Errorf("testcluster: cannot start a %s cluster, failing because CI=true: %w", opts.Level, err)
	}
	fmt.Fprintf(os.Stderr, "testcluster: cannot start a %s cluster; integration tests will skip: %v\n", opts.Level, err)
	return nil, nil
}

// LeakOptions are the goroutines goleak may ignore in a package that uses
// a cluster: long-lived daemons of libraries, never spawnkit's own.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		// klog's flush daemon starts on import and never stops.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}

// Require returns the package's cluster, or skips the test when there is
// none (possible only outside CI; see Main).
func Require(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	if c == nil {
		if InCI() {
			t.Fatal("testcluster: no cluster although CI=true")
		} else {
			t.Skip("testcluster: no cluster (see TestMain's output); run `make testbin` first")
		}
	}
	return c
}
