package naming

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spawnkit/spawnkit/internal/vectorrules"
)

// The reference vectors were produced by the real kubespawner 7.1 and
// escapism 1.0.1 (see testdata/README.md). NAMING_VECTORS names another
// file of the same schema to check instead.

type stringCase struct {
	Input  string            `json:"input"`
	Errors map[string]string `json:"errors"`
	Fields map[string]any    `json:"-"`
}

type userServerCase struct {
	Username     string `json:"username"`
	Servername   string `json:"servername"`
	UserID       int64  `json:"user_id"`
	HubNamespace string `json:"hub_namespace_detected"`
	MultiSlug    string `json:"multi_slug_username_servername"`
	BySlugScheme map[string]struct {
		Without        map[string]string `json:"names_without_user_namespaces"`
		With           map[string]string `json:"names_with_user_namespaces"`
		TemplateFields map[string]any    `json:"template_fields"`
		LegacyPVCName  string            `json:"legacy_pvc_name"`
		ExtraTemplates map[string]string `json:"extra_templates"`
		PodLabels      map[string]string `json:"pod_labels"`
	} `json:"by_slug_scheme"`
}

type multiSlugCase struct {
	Names     []string `json:"names"`
	MaxLength *int     `json:"max_length"`
	Result    *string  `json:"result"`
	Error     *string  `json:"error"`
}

type vectorFile struct {
	Cases           []json.RawMessage `json:"cases"`
	UserServerCases []userServerCase  `json:"user_server_cases"`
	MultiSlugCases  []multiSlugCase   `json:"multi_slug_cases"`
	Counts          map[string]int    `json:"counts"`
}

// labelDeviations are the only places spawnkit deliberately differs from
// KubeSpawner 7.1. Its is_valid_label matches [a-z0-9._-] with
// re.IGNORECASE on a Unicode string, which also accepts U+0130 'İ', U+0131
// 'ı', U+017F 'ſ' and U+212A KELVIN SIGN inside a value; the API server
// rejects such a label value, so KubeSpawner could never have created a
// pod with it and no existing object carries it. spawnkit follows the API
// server: IsValidLabel is false and SafeLabel hashes.
var labelDeviationRunes = []rune{'\u0130', '\u0131', '\u017f', '\u212a'}

// rules are where spawnkit deliberately differs from KubeSpawner 7.1 in
// naming, each selected by a predicate over the case's input
// (isLabelDeviation, invalidServer), never by case name.
var rules = []struct{ name, reason string }{
	{"api-label-charset", "KubeSpawner's is_valid_label folds case on Unicode and so accepts U+0130, U+0131, U+017F and U+212A in a label value, which the API server rejects, so spawnkit follows the API server (IsValidLabel is false and SafeLabel hashes)"},
	{"invalid-server", "no hub has a user with an empty name, a NUL byte or invalid UTF-8, so spawnkit refuses such a server where KubeSpawner would hash it into a name"},
}

func isLabelDeviation(field, input string, pythonValid bool) bool {
	return (field == "is_valid_label" || field == "safe_slug_label") && pythonValid &&
		strings.ContainsFunc(input, func(r rune) bool { return slices.Contains(labelDeviationRunes, r) })
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	path := os.Getenv("NAMING_VECTORS")
	if path == "" {
		path = "testdata/naming-vectors.json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading vectors: %v", err)
	}
	var vf vectorFile
	if err := json.Unmarshal(data, &vf); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	t.Logf("vectors from %s", path)
	return vf
}

func TestVectors(t *testing.T) {
	vf := loadVectors(t)
	checked := 0
	byRule := map[string]int{}
	for _, r := range rules {
		if err := vectorrules.Check(r.name, r.reason); err != nil {
			t.Error(err)
		}
	}

	slugFuncs := map[string]func(string) (string, error){
		"escape_slug":             func(s string) (string, error) { return EscapeSlug(s), nil },
		"safe_slug":               func(s string) (string, error) { return SafeSlug(s, 0) },
		"safe_slug_max_length_11": func(s string) (string, error) { return SafeSlug(s, 11) },
		"safe_slug_max_length_12": func(s string) (string, error) { return SafeSlug(s, 12) },
		"safe_slug_max_length_32": func(s string) (string, error) { return SafeSlug(s, 32) },
		"safe_slug_max_length_48": func(s string) (string, error) { return SafeSlug(s, 48) },
		"safe_slug_max_length_63": func(s string) (string, error) { return SafeSlug(s, 63) },
		"safe_slug_label":         func(s string) (string, error) { return SafeLabel(s), nil },
		"strip_and_hash":          func(s string) (string, error) { return StripAndHash(s, 0) },
	}
	predicates := map[string]func(string) bool{
		"is_valid_object_name": IsValidObjectName,
		"is_valid_label":       IsValidLabel,
	}

	for i, raw := range vf.Cases {
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		input, _ := c["input"].(string)
		errs, _ := c["errors"].(map[string]any)
		pythonValidLabel, _ := c["is_valid_label"].(bool)
		name := fmt.Sprintf("cases[%d] %q", i, input)
		for field, fn := range slugFuncs {
			want, present := c[field]
			if !present {
				t.Errorf("%s: vector has no field %s", name, field)
				continue
			}
			got, err := fn(input)
			if wantErr, ok := errs[field]; ok {
				if err == nil {
					t.Errorf("%s: %s = %q, want error %v", name, field, got, wantErr)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %s: unexpected error %v", name, field, err)
				continue
			}
			if isLabelDeviation(field, input, pythonValidLabel) {
				byRule["api-label-charset"]++
				if got == want || !IsValidLabel(got) {
					t.Errorf("%s: %s = %q: the listed deviation should give a valid label other than KubeSpawner's %q", name, field, got, want)
				}
				continue
			}
			if got != want {
				t.Errorf("%s: %s = %q, want %q", name, field, got, want)
			}
		}
		for field, fn := range predicates {
			want, _ := c[field].(bool)
			got := fn(input)
			if isLabelDeviation(field, input, pythonValidLabel) {
				byRule["api-label-charset"]++
				if got || len(validation.IsValidLabelValue(input)) == 0 {
					t.Errorf("%s: %s deviation: got %v; the API server's own check must reject it", name, field, got)
				}
				continue
			}
			if got != want {
				t.Errorf("%s: %s = %v, want %v", name, field, got, want)
			}
		}
		checked++
	}

	for i, c := range vf.UserServerCases {
		name := fmt.Sprintf("user_server_cases[%d] (%q, %q)", i, c.Username, c.Servername)
		s := Server{Username: c.Username, Servername: c.Servername, UserID: c.UserID}
		if got, err := MultiSlug([]string{c.Username, c.Servername}, 0); err != nil || got != c.MultiSlug {
			t.Errorf("%s: multi_slug = %q, %v; want %q", name, got, err, c.MultiSlug)
		}
		if len(c.BySlugScheme) != 2 {
			t.Errorf("%s: want both schemes, vector has %d", name, len(c.BySlugScheme))
		}
		for scheme, want := range c.BySlugScheme {
			sname := name + " scheme " + scheme
			for _, userNS := range []bool{false, true} {
				wantNames := want.Without
				if userNS {
					wantNames = want.With
				}
				n, err := New(Options{Scheme: Scheme(scheme), HubNamespace: c.HubNamespace, UserNamespaces: userNS})
				if err != nil {
					t.Fatalf("%s: New: %v", sname, err)
				}
				got, err := n.render(s)
				if invalidServer(s) {
					byRule["invalid-server"]++
					if !IsInvalidName(err) {
						t.Errorf("%s: render = %v, want an *InvalidNameError", sname, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: render: %v", sname, err)
					continue
				}
				gotNames := map[string]string{
					"namespace": got.Namespace, "pod_name": got.Pod, "dns_name": got.DNS,
					"secret_name": got.Secret, "pvc_name": got.PVC,
				}
				compareMaps(t, fmt.Sprintf("%s user namespaces=%v", sname, userNS), gotNames, wantNames)
				checkValidation(t, sname, n, s, got, userNS)

				if userNS {
					continue
				}
				if got.LegacyPVC != want.LegacyPVCName {
					t.Errorf("%s: legacy_pvc_name = %q, want %q", sname, got.LegacyPVC, want.LegacyPVCName)
				}
				wantFields := make(map[string]string, len(want.TemplateFields))
				for k, v := range want.TemplateFields {
					switch v := v.(type) {
					case string:
						wantFields[k] = v
					case float64:
						wantFields[k] = strconv.FormatInt(int64(v), 10)
					default:
						t.Errorf("%s: template field %s has type %T", sname, k, v)
					}
				}
				compareMaps(t, sname+" template_fields", got.Fields.Map(), wantFields)
				for text, wantOut := range want.ExtraTemplates {
					tmpl, err := Parse(text, KubeSpawner)
					if err != nil {
						t.Errorf("%s: Parse(%q): %v", sname, text, err)
						continue
					}
					if out, err := tmpl.Execute(got.Fields); err != nil || out != wantOut {
						t.Errorf("%s: template %q = %q, %v; want %q", sname, text, out, err, wantOut)
					}
				}
				labels := PodLabels(s, "", nil, KubeSpawnerCommonLabels())
				compareMaps(t, sname+" pod_labels", labels, want.PodLabels)
			}
		}
		checked++
	}

	for i, c := range vf.MultiSlugCases {
		maxLen := 0
		if c.MaxLength != nil {
			maxLen = *c.MaxLength
		}
		got, err := MultiSlug(c.Names, maxLen)
		name := fmt.Sprintf("multi_slug_cases[%d] %q max %d", i, c.Names, maxLen)
		switch {
		case c.Error != nil && err == nil:
			t.Errorf("%s = %q, want error %s", name, got, *c.Error)
		case c.Error == nil && err != nil:
			t.Errorf("%s: unexpected error %v", name, err)
		case c.Result != nil && got != *c.Result:
			t.Errorf("%s = %q, want %q", name, got, *c.Result)
		}
		checked++
	}

	total := len(vf.Cases) + len(vf.UserServerCases) + len(vf.MultiSlugCases)
	if want := vf.Counts["total"]; want != 0 && want != total {
		t.Errorf("file says %d cases in all, holds %d", want, total)
	}
	if checked != total || total == 0 {
		t.Errorf("checked %d of %d cases", checked, total)
	}
	t.Logf("checked %d cases (%d string, %d user/server, %d multi_slug); deviations by rule: %v",
		checked, len(vf.Cases), len(vf.UserServerCases), len(vf.MultiSlugCases), byRule)
}

// checkValidation asserts that Names fails exactly when the pod name or
// user namespace is one the API server would reject, naming that field,
// and that Names.Check reports exactly the invalid secret, claim and DNS
// names.
func checkValidation(t *testing.T, name string, n *Namer, s Server, rendered Names, userNS bool) {
	t.Helper()
	var wantInvalid []string
	if len(validation.IsDNS1123Label(rendered.Pod)) > 0 {
		wantInvalid = append(wantInvalid, "pod_name")
	}
	if userNS && len(validation.IsDNS1123Label(rendered.Namespace)) > 0 {
		wantInvalid = append(wantInvalid, "namespace")
	}
	got, err := n.Names(s)
	if len(wantInvalid) == 0 {
		if err != nil {
			t.Errorf("%s: Names: %v", name, err)
		} else if got.Pod != rendered.Pod || got.PVC != rendered.PVC {
			t.Errorf("%s: Names differs from the rendered names", name)
		}
		for _, c := range []struct{ field, value string }{{"secret_name", rendered.Secret}, {"pvc_name", rendered.PVC}, {"dns_name", rendered.DNS}} {
			invalid := len(validation.IsDNS1123Subdomain(c.value)) > 0
			cerr := got.Check(c.field)
			switch {
			case invalid && (cerr == nil || !IsInvalidName(cerr) || !strings.Contains(cerr.Error(), c.field) || !strings.Contains(cerr.Error(), c.value)):
				t.Errorf("%s: Check(%s) of invalid %q = %v, want an *InvalidNameError naming the field and value", name, c.field, c.value, cerr)
			case !invalid && cerr != nil:
				t.Errorf("%s: Check(%s) of valid %q = %v", name, c.field, c.value, cerr)
			}
		}
		return
	}
	if err == nil {
		t.Errorf("%s: Names accepted invalid %v", name, wantInvalid)
		return
	}
	for _, field := range wantInvalid {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %q does not name %s", name, err, field)
		}
	}
	var ine *InvalidNameError
	if !errors.As(err, &ine) || !IsInvalidName(err) {
		t.Errorf("%s: error %v is not an *InvalidNameError", name, err)
	}
}

func compareMaps(t *testing.T, name string, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: missing %s (want %q)", name, k, want[k])
		} else if g != want[k] {
			t.Errorf("%s: %s = %q, want %q", name, k, g, want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %q", name, k, got[k])
		}
	}
}

// invalidServer reports whether s has an empty user name or a name with a
// NUL byte or invalid UTF-8, which Namer rejects.
func invalidServer(s Server) bool {
	return s.Username == "" || strings.ContainsRune(s.Username+s.Servername, 0) || !utf8.ValidString(s.Username+s.Servername)
}
