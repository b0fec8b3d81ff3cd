package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func write(t *testing.T, root, rel, src string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// measure counts library lines and exports, long and wide functions, and
// sleeps in tests with and without a comment, and leaves internal/ out of
// the library.
func TestMeasure(t *testing.T) {
	root := t.TempDir()
	long := "package lib\n\n// Exported is long.\nfunc Exported(a, b, c, d, e, f int) {\n" + strings.Repeat("\t_ = a\n", 130) + "}\n\ntype T struct{}\n\nfunc (T) M() {}\n\nfunc (t) hidden() {}\n\ntype t struct{}\n\nconst C, d = 1, 2\n"
	write(t, root, "lib/lib.go", long)
	write(t, root, "internal/x/x.go", "package x\n\nfunc Big(a, b, c, d, e, f int) {}\n")
	write(t, root, "lib/lib_test.go", "package lib\n\nimport \"time\"\n\nfunc f() {\n\ttime.Sleep(1)\n\t// a signal would need a clock\n\ttime.Sleep(2)\n\ttime.Sleep(3) // pacing\n}\n")
	r, err := measure(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.pkgExports["lib"], 4; got != want { // Exported, T, T.M, C
		t.Errorf("exports = %d, want %d", got, want)
	}
	if r.pkgLines["lib"] != strings.Count(long, "\n") {
		t.Errorf("lines = %d, want %d", r.pkgLines["lib"], strings.Count(long, "\n"))
	}
	if _, ok := r.pkgLines["internal/x"]; ok {
		t.Error("internal/x counted as library")
	}
	var exported *funcStat
	for i := range r.funcs {
		if r.funcs[i].name == "Exported" {
			exported = &r.funcs[i]
		}
	}
	if exported == nil || exported.params != 6 || exported.lines != 132 {
		t.Errorf("Exported measured as %+v, want 6 params, 132 lines", exported)
	}
	if r.sleeps != 3 || r.commented != 2 || len(r.uncommented) != 1 {
		t.Errorf("sleeps %d, commented %d, uncommented %v; want 3, 2, one", r.sleeps, r.commented, r.uncommented)
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if missed := r.print(f, targets); missed != 2 { // the long, wide function; the sleeps
		t.Errorf("missed = %d, want 2", missed)
	}
}
