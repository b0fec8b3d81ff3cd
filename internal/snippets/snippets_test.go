package snippets

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace when a second cluster starts 30 s after this
	// process did and no logger was ever set.
	ctrllog.SetLogger(logr.Discard())
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 2, Responders: true}, &cluster)
}

// runTimeout bounds one program's run: a start on the simulated cluster
// takes well under a second, so a minute means it hangs.
const runTimeout = 2 * time.Minute

// snippet is one ```go block: where it is and what it says.
type snippet struct {
	file string // relative to the repository root
	line int    // of the opening fence
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// markdownFiles are the Markdown files a reader follows: README.md, docs/
// and every README.md below the root, sorted.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "README.md" || (filepath.Dir(rel) == "docs" && strings.HasSuffix(rel, ".md")) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// fence opens a Go block: ```go, perhaps with more words after it.
var fence = regexp.MustCompile("^```go(\\s.*)?$")

// extract returns the ```go blocks of a Markdown file.
func extract(file string, data []byte) ([]snippet, error) {
	var out []snippet
	var cur *snippet
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && fence.MatchString(line):
			cur = &snippet{file: file, line: n}
			body.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: the block has no closing fence", cur)
	}
	return out, sc.Err()
}

var (
	packageMain = regexp.MustCompile(`(?m)^package main$`)
	funcMain    = regexp.MustCompile(`(?m)^func main\(\) \{`)
	// kubeconfigVar is an environment variable a program reads a
	// kubeconfig's path from.
	kubeconfigVar = regexp.MustCompile(`os\.Getenv\("([A-Z0-9_]*KUBECONFIG)"\)`)
)

// TestExtract: blocks are found with the line of their fence; other
// languages and unlabelled blocks are not Go.
func TestExtract(t *testing.T) {
	md := "# x\n\n```go\npackage main\n```\n\n```\nnot go\n```\n\n```yaml\na: b\n```\n\n```go title\nfunc main() {}\n```\n"
	got, err := extract("X.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{{"X.md", 3, "package main\n"}, {"X.md", 15, "func main() {}\n"}}
	if !slices.Equal(got, want) {
		t.Errorf("extract = %+v; want %+v", got, want)
	}
	if _, err := extract("Y.md", []byte("```go\npackage main\n")); err == nil || !strings.Contains(err.Error(), "Y.md:1") {
		t.Errorf("an unclosed block = %v; want an error naming Y.md:1", err)
	}
}

// TestAt: the go command's positions in a snippet's file become the
// Markdown's, so that a failure names the line to fix.
func TestAt(t *testing.T) {
	snippets := []snippet{{file: "README.md", line: 10}, {file: "docs/x.md", line: 100}}
	out := "internal/snippets/_run-1/s1/main.go:12:5: declared and not used: st\n" +
		"# ./internal/snippets/_run-1/s0\n/work/x/internal/snippets/_run-1/s0/main.go:3:1: syntax error\n"
	want := "docs/x.md:112:5: declared and not used: st\n" +
		"# ./internal/snippets/_run-1/s0\nREADME.md:13:1: syntax error\n"
	if got := at(out, snippets); got != want {
		t.Errorf("at =\n%s\nwant\n%s", got, want)
	}
}

// TestSnippets compiles, vets and runs every Go snippet (see the package
// comment).
func TestSnippets(t *testing.T) {
	c := testcluster.Require(t, cluster)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var snippets []snippet
	for _, f := range markdownFiles(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := extract(f, data)
		if err != nil {
			t.Fatal(err)
		}
		snippets = append(snippets, got...)
	}
	if len(snippets) == 0 {
		t.Fatal("no ```go block in README.md or docs/: the extraction is broken")
	}
	t.Logf("%d Go snippets: %v", len(snippets), snippets)

	// One directory per snippet, inside the module so that the programs
	// build with its go.mod (and its vendor of nothing: the module cache).
	work, err := os.MkdirTemp(filepath.Join(root, "internal", "snippets"), "_run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	pkgs := make([]string, len(snippets))
	for i, s := range snippets {
		if !packageMain.MatchString(s.code) || !funcMain.MatchString(s.code) {
			t.Errorf("%s: not a whole program (package main with func main): a reader cannot paste and run it", s)
			continue
		}
		dir := filepath.Join(work, fmt.Sprintf("s%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(s.code), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs[i] = "./" + filepath.ToSlash(mustRel(t, root, dir))
	}
	if t.Failed() {
		return
	}
	ctx := t.Context()
	// gofmt: a snippet is code to copy, so it is formatted as code is.
	files := make([]string, len(pkgs))
	for i, p := range pkgs {
		files[i] = filepath.Join(root, p, "main.go")
	}
	out, err := exec.CommandContext(ctx, "gofmt", append([]string{"-l"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("gofmt -l: %v\n%s", err, at(string(out), snippets))
	}
	for _, f := range strings.Fields(string(out)) {
		i := slices.Index(files, f)
		if i < 0 {
			t.Fatalf("gofmt -l named %s, no snippet's file", f)
		}
		t.Errorf("%s: the block is not gofmt-formatted", snippets[i])
	}
	if out, err := goCmd(ctx, root, append([]string{"vet"}, pkgs...)...); err != nil {
		t.Fatalf("go vet: %v\n%s", err, at(out, snippets))
	}
	bins := make([]string, len(snippets))
	for i, p := range pkgs {
		bins[i] = filepath.Join(work, fmt.Sprintf("s%d.bin", i))
		if out, err := goCmd(ctx, root, "build", "-o", bins[i], p); err != nil {
			t.Errorf("%s: go build: %v\n%s", snippets[i], err, at(out, snippets))
		}
	}
	if t.Failed() {
		return
	}

	// The second clusters, one per other *_KUBECONFIG variable, started
	// when a program first asks for one.
	others := map[string]string{}
	for i, s := range snippets {
		t.Run(fmt.Sprintf("%s:%d", filepath.ToSlash(s.file), s.line), func(t *testing.T) {
			env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
			for _, m := range kubeconfigVar.FindAllStringSubmatch(s.code, -1) {
				name := m[1]
				if name == "KUBECONFIG" {
					continue
				}
				if others[name] == "" {
					second := testcluster.StartSecond(t, c, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1, Responders: true})
					others[name] = second.Kubeconfig
					// The cluster ends with this subtest; a later program
					// that names the variable gets another.
					t.Cleanup(func() { delete(others, name) })
				}
				env = append(env, name+"="+others[name])
			}
			runCtx, cancel := context.WithTimeout(ctx, runTimeout)
			defer cancel()
			cmd := exec.CommandContext(runCtx, bins[i])
			cmd.Env, cmd.Dir = env, work
			// Start's graceful shutdown on SIGTERM, as a hub's; the
			// kill after WaitDelay is only for a program that hangs.
			cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
			cmd.WaitDelay = 20 * time.Second
			begin := time.Now()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: the program failed after %s: %v\n%s", s, time.Since(begin).Round(time.Millisecond), err, out)
			}
			t.Logf("%s ran in %s:\n%s", s, time.Since(begin).Round(time.Millisecond), out)
		})
	}
}

func mustRel(t *testing.T, base, target string) string {
	t.Helper()
	rel, err := filepath.Rel(base, target)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// goCmd runs the go command in the module root and returns its output.
func goCmd(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// at rewrites the go command's positions in the snippets' files
// (…/_run-x/s3/main.go:12:5) to the Markdown's (README.md:140:5), so a
// failure names the line to fix.
func at(out string, snippets []snippet) string {
	re := regexp.MustCompile(`(?:\S*/)?s(\d+)/main\.go:(\d+)`)
	return re.ReplaceAllStringFunc(out, func(m string) string {
		sub := re.FindStringSubmatch(m)
		var i, line int
		fmt.Sscan(sub[1], &i)
		fmt.Sscan(sub[2], &line)
		if i >= len(snippets) {
			return m
		}
		return fmt.Sprintf("%s:%d", snippets[i].file, snippets[i].line+line)
	})
}
