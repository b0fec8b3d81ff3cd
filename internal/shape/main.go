// Command shape measures how the library holds together, for issue 44's
// targets and for anyone who wants to keep them: lines per package,
// exported identifiers per package, library files over a line limit,
// functions over a line or parameter limit, and time.Sleep calls in tests.
//
// The library is every non-test .go file outside internal/, cmd/ and
// examples/ (what a hub imports). Lines are physical lines. An exported
// identifier is an exported top-level const, var, type or func, or an
// exported method or field-less method set entry on an exported type (what
// `go doc -all` lists). A function's lines run from its func keyword to its
// closing brace; its parameters are the named (or unnamed) parameters,
// receiver excluded. Sleeps are counted in every _test.go file; a sleep
// whose line or the line above carries a comment counts as commented.
//
//	go run ./internal/shape            # report
//	go run ./internal/shape -check     # also exit 1 when a target is missed
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type limits struct {
	fileLines, funcLines, params, sleeps int
	pkgLines                             map[string]int
	pkgExports                           map[string]int
}

var targets = limits{
	fileLines: 600, funcLines: 120, params: 5, sleeps: 25,
	pkgLines:   map[string]int{"spawner": 5500},
	pkgExports: map[string]int{"spawner": 110},
}

func main() {
	root := flag.String("root", ".", "module root")
	check := flag.Bool("check", false, "exit 1 when a target is missed")
	flag.Parse()
	r, err := measure(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shape:", err)
		os.Exit(2)
	}
	missed := r.print(os.Stdout, targets)
	if *check && missed > 0 {
		fmt.Fprintf(os.Stderr, "shape: %d target(s) missed\n", missed)
		os.Exit(1)
	}
}

type fileStat struct {
	path  string
	lines int
}

type funcStat struct {
	name          string
	pos           string
	lines, params int
}

type report struct {
	pkgLines, pkgExports map[string]int
	files                []fileStat
	funcs                []funcStat
	sleeps, commented    int
	uncommented          []string
}

func library(rel string) bool {
	first := strings.SplitN(filepath.ToSlash(rel), "/", 2)[0]
	switch first {
	case "internal", "cmd", "examples", "python", "deploy", "docs", "test":
		return false
	}
	return true
}

func measure(root string) (*report, error) {
	r := &report{pkgLines: map[string]int{}, pkgExports: map[string]int{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "build" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			r.countSleeps(fset, f, src, rel)
			return nil
		}
		if !library(rel) {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		lines := strings.Count(string(src), "\n")
		r.pkgLines[pkg] += lines
		r.files = append(r.files, fileStat{rel, lines})
		r.pkgExports[pkg] += exports(f)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			n := 0
			for _, p := range fd.Type.Params.List {
				if len(p.Names) == 0 {
					n++
				}
				n += len(p.Names)
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			r.funcs = append(r.funcs, funcStat{name, fmt.Sprintf("%s:%d", rel, start.Line), end.Line - start.Line + 1, n})
		}
		return nil
	})
	return r, err
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

func exports(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil && len(d.Recv.List) == 1 && !ast.IsExported(recvName(d.Recv.List[0].Type)) {
				continue
			}
			n++
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func (r *report) countSleeps(fset *token.FileSet, f *ast.File, src []byte, rel string) {
	lines := strings.Split(string(src), "\n")
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "time" {
			return true
		}
		r.sleeps++
		line := fset.Position(call.Pos()).Line
		if strings.Contains(lines[line-1], "//") || (line >= 2 && strings.HasPrefix(strings.TrimSpace(lines[line-2]), "//")) {
			r.commented++
		} else {
			r.uncommented = append(r.uncommented, fmt.Sprintf("%s:%d", rel, line))
		}
		return true
	})
}

func (r *report) print(w *os.File, t limits) (missed int) {
	mark := func(bad bool) string {
		if bad {
			missed++
			return "  <- over target"
		}
		return ""
	}
	pkgs := make([]string, 0, len(r.pkgLines))
	total := 0
	for p, n := range r.pkgLines {
		pkgs = append(pkgs, p)
		total += n
	}
	sort.Strings(pkgs)
	fmt.Fprintf(w, "# Library packages (non-test .go outside internal/, cmd/, examples/): %d lines\n", total)
	fmt.Fprintf(w, "%-12s %7s %8s\n", "package", "lines", "exported")
	for _, p := range pkgs {
		bad := false
		if lim, ok := t.pkgLines[p]; ok && r.pkgLines[p] > lim {
			bad = true
		}
		if lim, ok := t.pkgExports[p]; ok && r.pkgExports[p] > lim {
			bad = true
		}
		fmt.Fprintf(w, "%-12s %7d %8d%s\n", p, r.pkgLines[p], r.pkgExports[p], mark(bad))
	}
	sort.Slice(r.files, func(i, j int) bool { return r.files[i].lines > r.files[j].lines })
	over400 := 0
	fmt.Fprintf(w, "\n# Library files over %d lines (target: none)\n", t.fileLines)
	for _, f := range r.files {
		if f.lines > 400 {
			over400++
		}
		if f.lines > t.fileLines {
			fmt.Fprintf(w, "%5d %s%s\n", f.lines, f.path, mark(true))
		}
	}
	fmt.Fprintf(w, "(files over 400 lines: %d)\n", over400)
	sort.Slice(r.funcs, func(i, j int) bool { return r.funcs[i].lines > r.funcs[j].lines })
	fmt.Fprintf(w, "\n# Library functions over %d lines or %d parameters (target: none)\n", t.funcLines, t.params)
	for _, f := range r.funcs {
		if f.lines > t.funcLines || f.params > t.params {
			fmt.Fprintf(w, "%4d lines %2d params  %s  %s%s\n", f.lines, f.params, f.name, f.pos, mark(true))
		}
	}
	fmt.Fprintf(w, "\n# time.Sleep in tests: %d (%d commented; target: <= %d, each commented)%s\n",
		r.sleeps, r.commented, t.sleeps, mark(r.sleeps > t.sleeps || len(r.uncommented) > 0))
	for _, u := range r.uncommented {
		fmt.Fprintf(w, "  uncommented: %s\n", u)
	}
	return missed
}
