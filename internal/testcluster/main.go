package testcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
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
// skip, and after them prints one line saying how many skipped and why.
// When a test fails, the component logs are kept and their
// directory printed.
func Main(m *testing.M, opts Options, cluster **Cluster) {
	os.Exit(run(m, opts, cluster))
}

// atExit are the functions AtExit registered.
var atExit struct {
	mu sync.Mutex
	fs []func()
}

// AtExit registers f to run once the package's tests have run, before
// Main stops the cluster and looks for leaked goroutines, the last
// registered first: for what the package's tests share (a
// reflector.Registry, one per process as a hub's), which no test's
// Cleanup may close. A shared Registry must be closed so: its event
// informers outlive their last holder by a while.
func AtExit(f func()) {
	atExit.mu.Lock()
	defer atExit.mu.Unlock()
	atExit.fs = append(atExit.fs, f)
}

func runAtExit() {
	atExit.mu.Lock()
	fs := atExit.fs
	atExit.fs = nil
	atExit.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func run(m *testing.M, opts Options, cluster **Cluster) int {
	c, cause, err := setUp(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*cluster = c
	code := m.Run()
	runAtExit()
	if c == nil {
		reportSkips(os.Stderr, testPackage(), skipped.Load(), cause)
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
// cluster and, as cause, why not, so that Require skips and Main can say
// why.
func setUp(opts Options) (c *Cluster, cause, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err = Start(ctx, opts)
	if err == nil {
		return c, nil, nil
	}
	if InCI() {
		return nil, nil, fmt.Errorf("testcluster: cannot start a %s cluster, failing because CI=true: %w", opts.Level, err)
	}
	fmt.Fprintf(os.Stderr, "testcluster: cannot start a %s cluster; integration tests will skip: %v\n", opts.Level, err)
	return nil, err, nil
}

// skipped counts the tests of this test binary that Require skipped for
// want of a cluster. Tests run in parallel, hence atomic.
var skipped atomic.Int64

// reportSkips prints, when n tests of pkg skipped because the cluster
// could not start (cause), one line that says so and what to do: a
// skip is easy to miss in go test's output, and a green run that tested
// nothing should not look like one that tested everything.
func reportSkips(w io.Writer, pkg string, n int64, cause error) {
	if n == 0 {
		return
	}
	tests := "tests"
	if n == 1 {
		tests = "test"
	}
	why := "unknown cause"
	if cause != nil {
		// One line, whatever the cause's message holds.
		why = strings.Join(strings.Fields(cause.Error()), " ")
	}
	fmt.Fprintf(w, "testcluster: %d integration %s in %s skipped: no cluster (%s); run make testbin, or set CI=true to fail instead\n",
		n, tests, pkg, why)
}

// testPackage is the import path of the package under test: go test
// records the test binary's main package as "<import path>.test". A
// binary without build information (none that go test builds) is named
// by its file instead.
func testPackage() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		return strings.TrimSuffix(bi.Path, ".test")
	}
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
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
// none (possible only outside CI; see Main, which counts the skips).
func Require(t testing.TB, c *Cluster) *Cluster {
	t.Helper()
	return require(t, c, &skipped)
}

// require is Require counting its skips in n.
func require(t testing.TB, c *Cluster, n *atomic.Int64) *Cluster {
	t.Helper()
	if c == nil {
		if InCI() {
			t.Fatal("testcluster: no cluster although CI=true")
		} else {
			n.Add(1)
			t.Skip("testcluster: no cluster (see TestMain's output); run `make testbin` first")
		}
	}
	return c
}

// StartSecond starts another cluster for one test, beside first (the
// package's shared one, which must be running: see Require), and stops
// it when the test ends. With a level that runs pods, its pods get
// addresses of their own (Cluster.PodCIDR differs from first's), as a
// second real cluster's would. A cluster that cannot start fails the test under CI=true and
// skips it elsewhere, as Require does.
func StartSecond(t testing.TB, first *Cluster, opts Options) *Cluster {
	t.Helper()
	first = Require(t, first)
	ctx, cancel := context.WithTimeout(t.Context(), StartTimeout)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		if InCI() {
			t.Fatalf("testcluster: starting a second cluster: %v", err)
		}
		skipped.Add(1)
		t.Skipf("testcluster: starting a second cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// The second cluster's logs are the ones that explain a
			// failure of a test that made it: keep them, and say where.
			c.KeepLogs()
			t.Logf("testcluster: the second cluster's component logs are kept in %s", c.LogDir)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("testcluster: stopping the second cluster: %v", err)
		}
	})
	if c.PodCIDR != "" && c.PodCIDR == first.PodCIDR {
		t.Fatalf("testcluster: both clusters give pods addresses from %s", c.PodCIDR)
	}
	return c
}
