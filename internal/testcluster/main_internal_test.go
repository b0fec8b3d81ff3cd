package testcluster

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

func TestSetUpFailsInCI(t *testing.T) {
	opts := Options{BinDir: t.TempDir()}
	t.Setenv("CI", "true")
	c, cause, err := setUp(opts)
	if err == nil || c != nil || cause != nil || !errors.Is(err, ErrBinariesMissing) || !strings.Contains(err.Error(), "CI=true") {
		t.Fatalf("setUp under CI=true with no binaries = %v, %v, %v; want an ErrBinariesMissing error that says CI=true", c, cause, err)
	}
	t.Setenv("CI", "")
	c, cause, err = setUp(opts)
	if err != nil || c != nil || !errors.Is(cause, ErrBinariesMissing) {
		t.Fatalf("setUp outside CI with no binaries = %v, %v, %v; want no cluster, ErrBinariesMissing as the cause and no error (tests skip)", c, cause, err)
	}
}

// recorder is a testing.TB that records instead of stopping the test.
type recorder struct {
	testing.TB
	fatal, skipped bool
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = true }
func (r *recorder) Skip(args ...any)  { r.skipped = true }

// Require fails under CI=true and skips elsewhere, counting the skips
// (and only them) for Main's summary.
func TestRequireFailsInCI(t *testing.T) {
	var n atomic.Int64
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	require(r, nil, &n)
	if !r.fatal || r.skipped || n.Load() != 0 {
		t.Errorf("Require(nil) under CI=true: fatal=%v skipped=%v counted=%d, want a failure, not counted", r.fatal, r.skipped, n.Load())
	}
	t.Setenv("CI", "")
	for i := range 2 {
		r = &recorder{TB: t}
		require(r, nil, &n)
		if r.fatal || !r.skipped || n.Load() != int64(i+1) {
			t.Errorf("Require(nil) outside CI, call %d: fatal=%v skipped=%v counted=%d, want a skip, counted", i+1, r.fatal, r.skipped, n.Load())
		}
	}
	r = &recorder{TB: t}
	if c := require(r, &Cluster{}, &n); c == nil || r.fatal || r.skipped || n.Load() != 2 {
		t.Errorf("Require(cluster): %v, fatal=%v skipped=%v counted=%d, want the cluster, no skip counted", c, r.fatal, r.skipped, n.Load())
	}
}

func TestReportSkips(t *testing.T) {
	const pkg = "github.com/spawnkit/spawnkit/spawner"
	cause := fmt.Errorf("%w: kube-apiserver not found in /x;\n run `make testbin`", ErrBinariesMissing)
	for _, tc := range []struct {
		name  string
		n     int64
		cause error
		want  string
	}{
		{"none skipped", 0, cause, ""},
		{"many", 37, cause, "testcluster: 37 integration tests in " + pkg +
			" skipped: no cluster (control-plane binaries missing: kube-apiserver not found in /x; run `make testbin`);" +
			" run make testbin, or set CI=true to fail instead\n"},
		{"one", 1, cause, "testcluster: 1 integration test in " + pkg + " skipped: no cluster (control-plane binaries missing: "},
		{"no cause", 2, nil, "testcluster: 2 integration tests in " + pkg + " skipped: no cluster (unknown cause);"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			reportSkips(&b, pkg, tc.n, tc.cause)
			got := b.String()
			if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") || strings.Count(got, "\n") > 1 {
				t.Errorf("reportSkips(%d) = %q, want one line starting %q", tc.n, got, tc.want)
			}
		})
	}
}

func TestTestPackageIsTheImportPath(t *testing.T) {
	if got, want := testPackage(), "github.com/spawnkit/spawnkit/internal/testcluster"; got != want {
		t.Errorf("testPackage() = %q, want %q", got, want)
	}
}
