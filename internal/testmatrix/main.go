// Command testmatrix runs spawnkit's test suite once per supported
// Kubernetes minor (internal/testcluster/versions.txt) and prints one
// table: the release the API server reported, packages passed, and every
// skipped test with its reason. `make test-matrix` runs it.
//
// For each minor it builds (or finds cached) that row's control-plane
// binaries with internal/tools/build.sh, then runs
//
//	CI=true SPAWNKIT_K8S=<minor> SPAWNKIT_TESTBIN=<dir> SPAWNKIT_JAEGER=<path> go test -race -count=1 -json <packages>
//
// Jaeger, the trace tests' OTLP receiver, does not depend on the minor:
// internal/tools/jaeger.sh builds (or finds cached) it once, first.
//
// and reads the JSON stream. The reported release comes from the
// "testcluster: api server vX.Y.Z ready" lines the simulated clusters
// print, so a run against the wrong binaries shows in the table. It exits
// non-zero when any package fails on any minor.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

func main() {
	minors := flag.String("minors", "", "comma-separated minors to run (default: every row of versions.txt)")
	pkgs := flag.String("packages", "./...", "space-separated packages to test")
	out := flag.String("out", "", "also write the table, as Markdown, to this file")
	timeout := flag.String("timeout", "20m", "go test -timeout")
	logs := flag.String("logs", "", "also keep each minor's `go test -json` stream in this directory, as <minor>.json (the output of failed tests is there)")
	flag.Parse()

	rows := testcluster.SupportedVersions()
	if *minors != "" {
		var picked []testcluster.Versions
		for _, m := range strings.Split(*minors, ",") {
			v, err := selectMinor(rows, m)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testmatrix:", err)
				os.Exit(2)
			}
			picked = append(picked, v)
		}
		rows = picked
	}

	jaeger, err := buildJaeger()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testmatrix:", err)
		os.Exit(1)
	}
	var results []result
	failed := false
	for _, v := range rows {
		r := run(v, strings.Fields(*pkgs), *timeout, *logs, jaeger)
		results = append(results, r)
		failed = failed || r.err != nil || len(r.failed) > 0
		fmt.Fprintf(os.Stderr, "testmatrix: %s: %d/%d packages passed in %s\n", v.Minor, r.passed, r.total, r.took.Round(time.Second))
	}
	table := render(results, time.Now())
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testmatrix:", err)
			os.Exit(1)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// topLevel is the top-level test of a (sub)test name.
func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

func selectMinor(rows []testcluster.Versions, m string) (testcluster.Versions, error) {
	m = strings.TrimPrefix(strings.TrimSpace(m), "v")
	for _, v := range rows {
		if v.Minor == m {
			return v, nil
		}
	}
	return testcluster.Versions{}, fmt.Errorf("minor %q is not in internal/testcluster/versions.txt", m)
}

type skip struct{ test, reason string }

type result struct {
	v       testcluster.Versions
	servers []string // releases the API servers reported
	passed  int
	total   int
	failed  []string
	tests   map[string][]string // failed package -> its failed top-level tests
	skips   []skip
	took    time.Duration // the tests, without the binaries' build
	failOut io.Writer     // where read writes a failed test's output (nil: nowhere)
	err     error         // the run itself failed (build, go test could not start)
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

var serverLine = regexp.MustCompile(`testcluster: api server (v\d+\.\d+\.\d+\S*) ready`)

// buildJaeger builds Jaeger (or finds it cached) and returns its path.
func buildJaeger() (string, error) {
	build := exec.Command("internal/tools/jaeger.sh")
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return "", fmt.Errorf("building jaeger: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func run(v testcluster.Versions, pkgs []string, timeout, logs, jaeger string) (r result) {
	r.v = v
	build := exec.Command("internal/tools/build.sh")
	build.Env = append(os.Environ(), "SPAWNKIT_K8S="+v.Minor)
	build.Stderr = os.Stderr
	dirOut, err := build.Output()
	if err != nil {
		r.err = fmt.Errorf("building the %s binaries: %w", v.Kubernetes, err)
		return r
	}
	lines := strings.Split(strings.TrimSpace(string(dirOut)), "\n")
	dir := lines[len(lines)-1]

	args := append([]string{"test", "-race", "-count=1", "-timeout", timeout, "-json"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CI=true", "SPAWNKIT_K8S="+v.Minor, "SPAWNKIT_TESTBIN="+dir, "SPAWNKIT_JAEGER="+jaeger)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.err = err
		return r
	}
	fmt.Fprintf(os.Stderr, "testmatrix: %s: go %s (binaries in %s, jaeger %s)\n", v.Minor, strings.Join(args, " "), dir, jaeger)
	// A row's time is its tests': a first build of the binaries (minutes)
	// would make rows incomparable.
	begin := time.Now()
	defer func() { r.took = time.Since(begin) }()
	if err := cmd.Start(); err != nil {
		r.err = err
		return r
	}
	var in io.Reader = stdout
	if logs != "" {
		if err := os.MkdirAll(logs, 0o755); err != nil {
			r.err = err
			return r
		}
		f, err := os.Create(filepath.Join(logs, v.Minor+".json"))
		if err != nil {
			r.err = err
			return r
		}
		defer f.Close()
		in = io.TeeReader(stdout, f)
	}
	r.failOut = os.Stderr
	r.read(in)
	if err := cmd.Wait(); err != nil && len(r.failed) == 0 {
		// go test failed without a failing package: a build error, say.
		r.err = fmt.Errorf("go test: %w: %s", err, lastLines(stderr.String(), 5))
	}
	return r
}

// read consumes a `go test -json` stream: package results, skipped tests
// with the last line they logged (t.Skip's reason), and the API server
// releases the clusters reported.
func (r *result) read(in io.Reader) {
	lastOutput := map[string]string{} // package/test -> last log line
	// The output of each top-level test (and of each package outside
	// its tests) so far, written to r.failOut when it fails: a failure in
	// CI is then diagnosable from the log alone. A passing test's is
	// dropped; at most keepLines lines of each are kept (the last).
	outputs := map[string][]string{}
	const keepLines = 2000
	flush := func(key string, failed bool) {
		if failed && r.failOut != nil {
			fmt.Fprintf(r.failOut, "testmatrix: %s: output of failed %s:\n%s", r.v.Minor, key, strings.Join(outputs[key], ""))
		}
		delete(outputs, key)
	}
	servers := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Action {
		case "output":
			if m := serverLine.FindStringSubmatch(e.Output); m != nil {
				servers[m[1]] = true
			}
			key := e.Package
			if e.Test != "" {
				key += " " + topLevel(e.Test)
			}
			if lines := append(outputs[key], e.Output); len(lines) > keepLines {
				outputs[key] = lines[len(lines)-keepLines:]
			} else {
				outputs[key] = lines
			}
			line := strings.TrimSpace(e.Output)
			if e.Test != "" && line != "" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- ") {
				lastOutput[e.Package+" "+e.Test] = line
			}
		case "skip":
			if e.Test == "" {
				flush(e.Package, false)
				continue // a package with no tests
			}
			if !strings.Contains(e.Test, "/") {
				flush(e.Package+" "+topLevel(e.Test), false)
			}
			r.skips = append(r.skips, skip{test: shortPkg(e.Package) + "." + e.Test, reason: lastOutput[e.Package+" "+e.Test]})
		case "pass", "fail":
			if e.Test == "" {
				flush(e.Package, e.Action == "fail")
			} else if !strings.Contains(e.Test, "/") {
				flush(e.Package+" "+e.Test, e.Action == "fail")
			}
			if e.Test != "" {
				if e.Action == "fail" && !strings.Contains(e.Test, "/") {
					if r.tests == nil {
						r.tests = map[string][]string{}
					}
					p := shortPkg(e.Package)
					r.tests[p] = append(r.tests[p], e.Test)
				}
				continue
			}
			r.total++
			if e.Action == "pass" {
				r.passed++
			} else {
				r.failed = append(r.failed, shortPkg(e.Package))
			}
		}
	}
	for s := range servers {
		r.servers = append(r.servers, s)
	}
	sort.Strings(r.servers)
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/spawnkit/spawnkit/") }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func render(results []result, at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Test matrix, %s (go test -race, CI=true)\n\n", at.UTC().Format("2006-01-02"))
	b.WriteString("| minor | API server | packages passed | failed | skipped tests (reason) | test time |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range results {
		server := strings.Join(r.servers, ", ")
		if server == "" {
			server = "none started"
		} else if !slices.Equal(r.servers, []string{r.v.Kubernetes}) {
			server += " (expected " + r.v.Kubernetes + ")"
		}
		var fails []string
		for _, p := range r.failed {
			if ts := r.tests[p]; len(ts) > 0 {
				p += " (" + strings.Join(ts, ", ") + ")"
			}
			fails = append(fails, p)
		}
		failed := strings.Join(fails, ", ")
		if r.err != nil {
			failed = strings.TrimSpace(failed + " " + r.err.Error())
		}
		if failed == "" {
			failed = "none"
		}
		var skips []string
		for _, s := range r.skips {
			skips = append(skips, fmt.Sprintf("%s (%s)", s.test, s.reason))
		}
		skipped := strings.Join(skips, "; ")
		if skipped == "" {
			skipped = "none"
		}
		fmt.Fprintf(&b, "| %s | %s | %d/%d | %s | %s | %s |\n",
			r.v.Minor, server, r.passed, r.total, escape(failed), escape(skipped), r.took.Round(time.Second))
	}
	return b.String()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
