package manager

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The Manager is built only on exported API: the compiler holds it to
// the spawner package's exported identifiers, and this test to the
// spawnkit packages it may import at all (no internal package but the
// leader-election helper, nothing above it in the design's layers).
func TestImportsOnlyTheLayersBelow(t *testing.T) {
	allowed := []string{
		"github.com/spawnkit/spawnkit/internal/leader",
		"github.com/spawnkit/spawnkit/internal/phase",
		"github.com/spawnkit/spawnkit/kubespawner",
		"github.com/spawnkit/spawnkit/naming",
		"github.com/spawnkit/spawnkit/reflector",
		"github.com/spawnkit/spawnkit/spawner",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/spawnkit/spawnkit") && !slices.Contains(allowed, path) {
				t.Errorf("%s imports %s; the Manager may import only %v", f, path, allowed)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
