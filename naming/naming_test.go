package naming

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		syntax     Syntax
		want       string // substring of the error
	}{
		{"unknown field", "jupyter-{usernam}", KubeSpawner, "unknown field {usernam}"},
		{"single close brace", "jupyter-}", KubeSpawner, "single '}'"},
		{"unclosed", "jupyter-{username", KubeSpawner, "never closed"},
		{"positional", "jupyter-{}", KubeSpawner, "positional"},
		{"conversion", "{username!x}", KubeSpawner, "unknown conversion specifier"},
		{"format spec", "{username:=10}", KubeSpawner, "alignment not allowed"},
		{"attribute", "{username.upper}", KubeSpawner, "attributes"},
		{"go unknown field", "{{ .Usernam }}", Go, "unknown field .Usernam"},
		{"go unknown function", "{{ .Username | frobnicate }}", Go, `"frobnicate" not defined`},
		{"go env is absent", `{{ env "HOME" }}`, Go, `"env" not defined`},
		{"go now is absent", `{{ now }}`, Go, `"now" not defined`},
		{"go random is absent", `{{ randAlpha 5 }}`, Go, `"randAlpha" not defined`},
		{"go uuid is absent", `{{ uuidv4 }}`, Go, `"uuidv4" not defined`},
		{"go syntax error", "{{ .Username ", Go, "unclosed action"},
		{"bad syntax value", "x", Syntax("python"), "unknown syntax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.text, tc.syntax)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tc.text)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			var te *TemplateError
			if !errors.As(err, &te) || te.Template != tc.text {
				t.Errorf("error %v is not a *TemplateError naming the template", err)
			}
		})
	}
}

func TestExecuteBothSyntaxes(t *testing.T) {
	f, err := NewFields(Server{Username: "Alice", Servername: "gpu", UserID: 7}, SchemeSafe, "jhub")
	if err != nil {
		t.Fatal(err)
	}
	f.PodName = "jupyter-x"
	for _, tc := range []struct {
		text   string
		syntax Syntax
		want   string
	}{
		{"{{literal}}-{userid}", KubeSpawner, "{literal}-7"},
		{"{unescaped_username}/{safe_user_server}", KubeSpawner, "Alice/alice---3bc51062--gpu"},
		{"{username}-{servername}-", KubeSpawner, "alice---3bc51062-gpu-"},
		{"{{ .UnescapedUsername | lower | trunc 3 }}-{{ .UserID }}", Go, "ali-7"},
		{"{{ .PodName }}.{{ .Namespace }}", Go, "jupyter-x.jhub"},
		{"{{ .Username }}-{{ .Servername }}--", Go, "alice---3bc51062-gpu--"},
		{"{{ if .Servername }}{{ .Servername }}{{ else }}default{{ end }}", Go, "gpu"},
		{"{{ sha256sum .UnescapedUsername | trunc 8 }}", Go, "3bc51062"},
	} {
		tmpl, err := Parse(tc.text, tc.syntax)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.text, err)
		}
		got, err := tmpl.Execute(f)
		if err != nil || got != tc.want {
			t.Errorf("%s %q = %q, %v; want %q", tc.syntax, tc.text, got, err, tc.want)
		}
	}
}

func TestTrailingDashStrip(t *testing.T) {
	f, _ := NewFields(Server{Username: "bob"}, SchemeSafe, "default")
	for text, want := range map[string]string{
		"{username}--{servername}":                   "bob",
		"{username}-{servername}-":                   "bob--",
		"{{ .Username }}--{{ .Servername }}":         "bob",
		"{{ .Username }}--{{ .Servername }}{{/**/}}": "bob",
	} {
		syntax := KubeSpawner
		if strings.Contains(text, ".") {
			syntax = Go
		}
		tmpl, err := Parse(text, syntax)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := tmpl.Execute(f); got != want {
			t.Errorf("%q = %q, want %q", text, got, want)
		}
	}
}

func TestReferences(t *testing.T) {
	for text, want := range map[string][]string{
		"{pod_name}-{username}-{pod_name}":                         {"pod_name", "username"},
		"{{ .PVCName }}{{ if .Servername }}{{ .UserID }}{{ end }}": {"pvc_name", "servername", "userid"},
	} {
		syntax := KubeSpawner
		if strings.Contains(text, "{{") {
			syntax = Go
		}
		tmpl, err := Parse(text, syntax)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.References(); !reflect.DeepEqual(got, want) {
			t.Errorf("References(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"scheme", Options{Scheme: "base64"}, `not "base64"`},
		{"hub namespace", Options{HubNamespace: "Not_Valid"}, "hub namespace"},
		{"pod uses pvc", Options{PodTemplate: "{pvc_name}-x"}, "pod_name template"},
		{"namespace uses pod", Options{UserNamespaces: true, NamespaceTemplate: "ns-{pod_name}"}, "computed after the namespace"},
		{"go namespace uses pod", Options{Syntax: Go, NamespaceTemplate: "{{ .PodName }}"}, "computed after"},
		{"dns uses username", Options{DNSTemplate: "{username}.svc"}, "unknown field {username}"},
		{"bad pvc template", Options{PVCTemplate: "claim-{nope}"}, "pvc_name template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestNamesGoSyntaxMatchesKubeSpawnerSyntax(t *testing.T) {
	ks, err := New(Options{HubNamespace: "jhub", UserNamespaces: true})
	if err != nil {
		t.Fatal(err)
	}
	gt, err := New(Options{HubNamespace: "jhub", UserNamespaces: true, Syntax: Go})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Server{{Username: "alice"}, {Username: "Bob@example.com", Servername: "GPU 1"}, {Username: strings.Repeat("x", 80), Servername: "y"}} {
		a, errA := ks.Names(s)
		b, errB := gt.Names(s)
		if errA != nil || errB != nil {
			t.Fatalf("%+v: %v / %v", s, errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%+v: KubeSpawner syntax %+v, Go syntax %+v", s, a, b)
		}
	}
}

func TestNamesInvalidEscapeName(t *testing.T) {
	n, err := New(Options{Scheme: SchemeEscape})
	if err != nil {
		t.Fatal(err)
	}
	// 40 escaped '.' characters are 120 characters: too long for a pod.
	_, err = n.Names(Server{Username: strings.Repeat(".", 40)})
	var ine *InvalidNameError
	if !errors.As(err, &ine) {
		t.Fatalf("err = %v, want *InvalidNameError", err)
	}
	if ine.Field != "pod_name" || ine.Template != DefaultPodTemplate || !strings.HasPrefix(ine.Value, "jupyter--2e") || len(ine.Reasons) == 0 {
		t.Errorf("error = %+v; want the pod_name field, template, value and reasons", ine)
	}
}

func TestLabelsAndAnnotations(t *testing.T) {
	s := Server{Username: "Ünïcode User", Servername: "my server"}
	labels := PodLabels(s, "", map[string]string{"team": "a", LabelComponent: "overridden"}, KubeSpawnerCommonLabels())
	if labels[LabelComponent] != DefaultComponent || labels["team"] != "a" || labels["heritage"] != "jupyterhub" {
		t.Errorf("labels = %v", labels)
	}
	for k, v := range labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q invalid: %v", k, v, errs)
		}
	}
	ann := Annotations(s, map[string]string{"x": "y"})
	if ann[AnnotationUsername] != s.Username || ann[AnnotationServername] != s.Servername || ann["x"] != "y" {
		t.Errorf("annotations = %v", ann)
	}
	if _, ok := Annotations(Server{Username: "a"}, nil)[AnnotationServername]; ok {
		t.Error("default server got a servername annotation")
	}
}

func TestEscapeSlugInvalidUTF8(t *testing.T) {
	if got := EscapeSlug("a\xffb\xc3"); got != "a-ffb-c3" {
		t.Errorf("EscapeSlug(invalid UTF-8) = %q, want each bad byte escaped", got)
	}
}

func TestSafeSlugLimits(t *testing.T) {
	if _, err := SafeSlug("needs--hash", 11); err == nil {
		t.Error("SafeSlug with max length 11 hashed instead of failing")
	}
	if got, err := SafeSlug("short", 11); err != nil || got != "short" {
		t.Errorf("SafeSlug(short, 11) = %q, %v", got, err)
	}
	if _, err := MultiSlug(nil, 0); err == nil {
		t.Error("MultiSlug of no names succeeded")
	}
}
