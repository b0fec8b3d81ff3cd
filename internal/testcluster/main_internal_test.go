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

func TestVersionsTable(t *testing.T) {
	rows := SupportedVersions()
	if rows[0].Minor != "1.32" || rows[len(rows)-1].Minor != "1.37" {
		t.Errorf("supported minors %s..%s, want 1.32..1.37 (README states that range)", rows[0].Minor, rows[len(rows)-1].Minor)
	}
	for _, tc := range []struct{ env, want, err string }{
		{"", rows[len(rows)-1].Kubernetes, ""},
		{"1.32", rows[0].Kubernetes, ""},
		{"v1.32", rows[0].Kubernetes, ""},
		{" 1.34 ", "v1.34.4", ""},
		{"1.31", "", "SPAWNKIT_K8S=1.31 is not a supported Kubernetes minor (internal/testcluster/versions.txt has 1.32, 1.33, 1.34, 1.35, 1.36, 1.37)"},
		{"1.3", "", "SPAWNKIT_K8S=1.3 is not"},
		{"latest", "", "SPAWNKIT_K8S=latest is not"},
	} {
		v, err := selectVersions(rows, tc.env)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("selectVersions(%q) = %v, %v; want error %q", tc.env, v, err, tc.err)
		case tc.err == "" && (err != nil || v.Kubernetes != tc.want):
			t.Errorf("selectVersions(%q) = %v, %v; want %s", tc.env, v, err, tc.want)
		}
	}
	for _, bad := range []string{
		"1.32 v1.32.2 v3.5.16\n",                               // missing kwok
		"1.32 v1.33.2 v3.5.16 v0.8.0\n",                        // wrong minor
		"1.33 v1.33.2 e k\n1.32 v1.32.2 e k\n",                 // out of order
		"1.9 v1.9.1 e k\n1.10 v1.10.1 e k\n1.10 v1.10.1 e k\n", // duplicate
		"# only comments\n",
	} {
		if _, err := parseVersions(bad); err == nil {
			t.Errorf("parseVersions(%q) accepted a malformed table", bad)
		}
	}
	if _, err := parseVersions("1.9 v1.9.1 e k\n1.10 v1.10.1 e k\n"); err != nil {
		t.Errorf("1.9 before 1.10 refused: %v", err)
	}
}
