package naming

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// keys are the values of every key constant in labels.go, by name.
var keys = map[string]string{
	"LabelUsername":               LabelUsername,
	"LabelServername":             LabelServername,
	"LabelComponent":              LabelComponent,
	"LabelAppComponent":           LabelAppComponent,
	"LabelManagedBy":              LabelManagedBy,
	"LabelCluster":                LabelCluster,
	"AnnotationUsername":          AnnotationUsername,
	"AnnotationServername":        AnnotationServername,
	"AnnotationJupyterHubVersion": AnnotationJupyterHubVersion,
	"AnnotationState":             AnnotationState,
	"AnnotationStartID":           AnnotationStartID,
	"LegacyLabelCluster":          LegacyLabelCluster,
}

// Every label and annotation key is a constant in labels.go, spawnkit's
// own keys are under Domain, and docs/labels.md lists each key with its
// constant.
func TestEveryKeyInOnePlaceAndDocumented(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "labels.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok {
			for _, id := range v.Names {
				if strings.HasPrefix(id.Name, "Label") || strings.HasPrefix(id.Name, "Annotation") || strings.HasPrefix(id.Name, "LegacyLabel") {
					declared[id.Name] = true
				}
			}
		}
		return true
	})
	for name := range declared {
		if _, ok := keys[name]; !ok {
			t.Errorf("labels.go declares %s, which this test's keys do not list", name)
		}
	}
	for name := range keys {
		if !declared[name] {
			t.Errorf("keys lists %s, which labels.go does not declare", name)
		}
	}
	for _, own := range []string{LabelCluster, AnnotationState, AnnotationStartID} {
		if !strings.HasPrefix(own, Domain) {
			t.Errorf("spawnkit's key %q is not under %q", own, Domain)
		}
	}
	doc, err := os.ReadFile("../docs/labels.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range keys {
		row := "| `" + key + "` | `" + name + "` |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/labels.md has no row %q", row)
		}
	}
}
