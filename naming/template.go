package naming

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

// Syntax is the language a template is written in; "" means KubeSpawner.
type Syntax string

const (
	// KubeSpawner is Python str.format with named fields, as in
	// KubeSpawner's configuration: "jupyter-{user_server}". "{{" and "}}"
	// stand for literal braces. Conversions ("{x!r}") and format specs
	// ("{userid:06d}", "{username:>8}") mean what Python's str.format
	// makes of them on KubeSpawner's values (userid is an int, the other
	// fields strings); attribute and index lookups are rejected.
	KubeSpawner Syntax = "kubespawner"
	// Go is text/template over Fields with sprig's hermetic text functions:
	// "jupyter-{{ .UserServer | trunc 40 }}". Functions that read the
	// environment, the clock, random sources or the network are absent, so
	// a template always renders the same name for the same server.
	Go Syntax = "go"
)

func (s Syntax) String() string {
	if s == "" {
		return string(KubeSpawner)
	}
	return string(s)
}

// Template is a parsed name template. It is immutable and safe for
// concurrent use: parse once, execute many times.
type Template struct {
	text   string
	syntax Syntax
	// parts is the KubeSpawner form: literals and field keys alternating.
	parts []part
	// tmpl is the Go form.
	tmpl *template.Template
	// refs are the snake_case keys of the fields the template reads.
	refs []string
	// keepDash turns off the trailing-'-' strip (KubeSpawner formats its
	// DNS name template without it).
	keepDash bool
}

type part struct {
	literal string
	field   string  // a field key; empty for a literal
	py      pyField // the field's conversion and format spec
}

// TemplateError reports a template that cannot be parsed or refers to
// something that does not exist.
type TemplateError struct {
	Template string
	Syntax   Syntax
	Err      error
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("naming: %s template %q: %v", e.Syntax, e.Template, e.Err)
}

func (e *TemplateError) Unwrap() error { return e.Err }

// Parse parses a template and checks every field and function it uses
// against Fields, so a template that parses always executes.
func Parse(text string, syntax Syntax) (*Template, error) {
	return parseFor(text, syntax, fieldKeys)
}

// parseFor parses a template whose fields must be among keys (the
// snake_case names; Go templates use the matching Go names).
func parseFor(text string, syntax Syntax, keys []fieldKey) (*Template, error) {
	if syntax == "" {
		syntax = KubeSpawner
	}
	t := &Template{text: text, syntax: syntax}
	var err error
	switch syntax {
	case KubeSpawner:
		t.parts, err = parseFormat(text)
		for _, p := range t.parts {
			if p.field == "" || err != nil {
				continue
			}
			if !slices.ContainsFunc(keys, func(k fieldKey) bool { return k.snake == p.field }) {
				err = fmt.Errorf("unknown field {%s}; known fields: %s", p.field, knownFields(keys, syntax))
			} else if !slices.Contains(t.refs, p.field) {
				t.refs = append(t.refs, p.field)
			}
		}
		for i := range t.parts {
			if err != nil || t.parts[i].field == "" {
				continue
			}
			t.parts[i].py.isInt = t.parts[i].field == "userid"
			if cerr := t.parts[i].py.check(); cerr != nil {
				err = fmt.Errorf("field {%s}: %w", t.parts[i].field, cerr)
			}
		}
	case Go:
		t.tmpl, err = template.New("name").Option("missingkey=error").Funcs(hermeticFuncs()).Parse(text)
		if err == nil {
			t.refs, err = goRefs(t.tmpl, keys, syntax)
		}
	default:
		err = fmt.Errorf("unknown syntax")
	}
	if err != nil {
		return nil, &TemplateError{Template: text, Syntax: syntax, Err: err}
	}
	return t, nil
}

// String returns the template's source text.
func (t *Template) String() string { return t.text }

// Syntax returns the template's syntax.
func (t *Template) Syntax() Syntax { return t.syntax }

// References returns the snake_case keys of the fields the template reads
// (for Go templates, the fields of the top-level data it reads), in order
// of first use.
func (t *Template) References() []string { return slices.Clone(t.refs) }

// Execute renders the template with f. As in KubeSpawner, trailing '-'
// characters are stripped from the result unless the template text itself
// ends in '-' (so "{username}--{servername}" renders "alice" for the
// default server).
func (t *Template) Execute(f Fields) (string, error) {
	return t.execute(f)
}

// fieldSource is what a template renders from: Fields, or the two fields
// of the DNS name template.
type fieldSource interface {
	field(key string) (string, bool)
}

func (t *Template) execute(data fieldSource) (string, error) {
	var out string
	switch t.syntax {
	case KubeSpawner:
		var b strings.Builder
		for _, p := range t.parts {
			if p.field == "" {
				b.WriteString(p.literal)
				continue
			}
			v, ok := data.field(p.field)
			if !ok {
				return "", &TemplateError{Template: t.text, Syntax: t.syntax, Err: fmt.Errorf("field {%s} is not available here", p.field)}
			}
			if p.py.conv != 0 || p.py.spec != nil {
				var err error
				if v, err = p.py.format(v); err != nil {
					return "", &TemplateError{Template: t.text, Syntax: t.syntax, Err: fmt.Errorf("field {%s}: %w", p.field, err)}
				}
			}
			b.WriteString(v)
		}
		out = b.String()
	case Go:
		var b strings.Builder
		if err := t.tmpl.Execute(&b, data); err != nil {
			return "", &TemplateError{Template: t.text, Syntax: t.syntax, Err: err}
		}
		out = b.String()
	}
	if !t.keepDash && !strings.HasSuffix(t.text, "-") {
		out = strings.TrimRight(out, "-")
	}
	return out, nil
}

// parseFormat parses Python str.format syntax restricted to named fields
// (with conversions and format specs, pyformat.go).
func parseFormat(text string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '{' && i+1 < len(text) && text[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(text) && text[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '}':
			return nil, fmt.Errorf("single '}' at offset %d (write '}}' for a literal brace)", i)
		case c == '{':
			end := strings.IndexByte(text[i+1:], '}')
			if end < 0 {
				return nil, fmt.Errorf("'{' at offset %d is never closed", i)
			}
			inner := text[i+1 : i+1+end]
			name, rest := inner, ""
			if j := strings.IndexAny(inner, "!:"); j >= 0 {
				name, rest = inner[:j], inner[j:]
			}
			if name == "" {
				return nil, fmt.Errorf("empty field {%s} at offset %d: positional fields are not supported", inner, i)
			}
			if strings.ContainsAny(name, ".[{") {
				return nil, fmt.Errorf("field {%s} at offset %d: attributes and indexes are not supported (the Go syntax has functions for this)", inner, i)
			}
			py, err := parseConversion(rest)
			if err != nil {
				return nil, fmt.Errorf("field {%s} at offset %d: %w", inner, i, err)
			}
			flush()
			parts = append(parts, part{field: name, py: py})
			i += end + 1
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}

func knownFields(keys []fieldKey, syntax Syntax) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		if syntax == Go {
			names[i] = "." + k.goName
		} else {
			names[i] = k.snake
		}
	}
	return strings.Join(names, ", ")
}

// nonHermetic are sprig functions whose result depends on something other
// than their arguments (clock, environment, randomness, network) or that
// generate keys; sprig's HermeticTxtFuncMap already drops most of them,
// this list makes sure of all.
var nonHermetic = []string{
	"now", "date", "dateInZone", "date_in_zone", "dateModify", "date_modify", "mustDateModify",
	"must_date_modify", "htmlDate", "htmlDateInZone", "ago", "duration", "durationRound",
	"unixEpoch", "toDate", "mustToDate",
	"env", "expandenv", "getHostByName",
	"randAlphaNum", "randAlpha", "randAscii", "randNumeric", "randBytes", "randInt", "uuidv4",
	"shuffle", "genPrivateKey", "derivePassword", "buildCustomCert", "genCA", "genCAWithKey",
	"genSelfSignedCert", "genSelfSignedCertWithKey", "genSignedCert", "genSignedCertWithKey",
	"encryptAES", "decryptAES",
}

var hermeticFuncs = sync.OnceValue(func() template.FuncMap {
	funcs := maps.Clone(sprig.HermeticTxtFuncMap())
	for _, name := range nonHermetic {
		delete(funcs, name)
	}
	boundFuncs(funcs)
	return funcs
})
