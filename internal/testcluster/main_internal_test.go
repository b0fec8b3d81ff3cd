package testcluster

import (
	"errors"
	"strings"
	"testing"
)

func TestSetUpFailsInCI(t *testing.T) {
	opts := Options{BinDir: t.TempDir()}
	t.Setenv("CI", "true")
	c, err := setUp(opts)
	if err == nil || c != nil || !errors.Is(err, ErrBinariesMissing) || !strings.Contains(err.Error(), "CI=true") {
		t.Fatalf("setUp under CI=true with no binaries = %v, %v; want an ErrBinariesMissing error that says CI=true", c, err)
	}
	t.Setenv("CI", "")
	c, err = setUp(opts)
	if err != nil || c != nil {
		t.Fatalf("setUp outside CI with no binaries = %v, %v; want no cluster and no error (tests skip)", c, err)
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

func TestRequireFailsInCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Require(r, nil)
	if !r.fatal || r.skipped {
		t.Errorf("Require(nil) under CI=true: fatal=%v skipped=%v, want a failure", r.fatal, r.skipped)
	}
	t.Setenv("CI", "")
	r = &recorder{TB: t}
	Require(r, nil)
	if r.fatal || !r.skipped {
		t.Errorf("Require(nil) outside CI: fatal=%v skipped=%v, want a skip", r.fatal, r.skipped)
	}
}
