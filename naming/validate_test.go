package naming

import (
	"errors"
	"strings"
	"testing"
)

func TestInvalidServerNames(t *testing.T) {
	n := mustNew(Options{})
	esc := mustNew(Options{Scheme: SchemeEscape, UserNamespaces: true})
	for _, tc := range []struct {
		name      string
		server    Server
		wantField string
	}{
		{"empty user", Server{}, "username"},
		{"empty user with server", Server{Servername: "srv"}, "username"},
		{"NUL in user", Server{Username: "a\x00b"}, "username"},
		{"only NUL", Server{Username: "\x00"}, "username"},
		{"invalid UTF-8 user", Server{Username: "a\xffb"}, "username"},
		{"truncated UTF-8 user", Server{Username: "\xc3"}, "username"},
		{"NUL in server", Server{Username: "alice", Servername: "x\x00"}, "servername"},
		{"invalid UTF-8 server", Server{Username: "alice", Servername: "\xfe"}, "servername"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, nm := range []*Namer{n, esc} {
				_, err := nm.Names(tc.server)
				var ie *InvalidNameError
				if !errors.As(err, &ie) {
					t.Fatalf("Names(%q, %q) = %v, want *InvalidNameError", tc.server.Username, tc.server.Servername, err)
				}
				if ie.Field != tc.wantField {
					t.Errorf("field = %q, want %q", ie.Field, tc.wantField)
				}
				if _, err := NewFields(tc.server, SchemeSafe, "default"); !IsInvalidName(err) {
					t.Errorf("NewFields = %v, want *InvalidNameError", err)
				}
			}
		})
	}
	// The default server ("") stays valid.
	if _, err := n.Names(Server{Username: "alice"}); err != nil {
		t.Fatal(err)
	}
}

func TestGoTemplateRestrictions(t *testing.T) {
	for _, tc := range []struct {
		name, text, wantConstruct string
	}{
		{"variable declaration", `{{ $x := . }}{{ $x.Map }}`, "variable $x"},
		{"root variable", `{{ $.Username }}`, "variable $"},
		{"dot", `{{ . }}`, "the dot"},
		{"method via dot", `{{ .Map }}`, "unknown field .Map"},
		{"field chain", `{{ .Username.Len }}`, "field chain"},
		{"chain on expression", `{{ (.Username).Foo }}`, "field access"},
		{"range", `{{ range .Username }}x{{ end }}`, "{{range}}"},
		{"with", `{{ with .Username }}{{ . }}{{ end }}`, "{{with}}"},
		{"define", `{{ define "x" }}a{{ end }}{{ .Username }}`, "{{define}}"},
		{"template", `{{ template "name" }}`, "{{template}}"},
		{"block", `{{ block "b" . }}x{{ end }}`, "{{define}}"},
		{"call", `{{ call .Username }}`, "function call"},
		{"if declaration", `{{ if $x := .Username }}a{{ end }}`, "variable $x"},
		{"env", `{{ env "HOME" }}`, "function \"env\" not defined"},
		{"until", `{{ until 1000000000 | len }}`, "function \"until\" not defined"},
		{"unknown field", `{{ .Password }}`, "unknown field .Password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.text, Go)
			var te *TemplateError
			if !errors.As(err, &te) {
				t.Fatalf("Parse(%q) = %v, want *TemplateError", tc.text, err)
			}
			if te.Template != tc.text || !strings.Contains(err.Error(), tc.wantConstruct) {
				t.Errorf("error %q does not name the template and %q", err, tc.wantConstruct)
			}
		})
	}
	// Allowed constructs still parse and run.
	for text, want := range map[string]string{
		`{{ .Username | trunc 3 }}`:                          "ali",
		`{{ if eq .Servername "" }}{{ .Username }}{{ end }}`: "alice",
		`{{ printf "%s-%d" .Username .UserID }}`:             "alice-7",
		`{{ repeat 2 "ab" }}`:                                "abab",
	} {
		tm, err := Parse(text, Go)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		f, _ := NewFields(Server{Username: "alice", UserID: 7}, SchemeSafe, "default")
		if got, err := tm.Execute(f); err != nil || got != want {
			t.Errorf("%q = %q, %v; want %q", text, got, err, want)
		}
	}
	// Output-size bombs fail at execution instead of allocating.
	for _, text := range []string{`{{ repeat 1000000000 "x" }}`, `{{ indent 1000000000 "x" }}`, `{{ nindent -1 "x" }}`} {
		tm, err := Parse(text, Go)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := NewFields(Server{Username: "alice"}, SchemeSafe, "default")
		if _, err := tm.Execute(f); err == nil {
			t.Errorf("%q executed", text)
		}
	}
}
