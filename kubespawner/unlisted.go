package kubespawner

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// maxUnlistedValue bounds the length of a user's unlisted choice.
const maxUnlistedValue = 4096

// templatedOptions are the options whose strings are rendered as templates
// (with the server's fields) after profiles are applied.
var templatedOptions = []string{"extra_labels", "extra_annotations", "environment", "volumes", "volume_mounts", "pod_connect_ip"}

// pyMatch is a validation_regex with Python's re.match semantics:
// anchored at the start only; outside multiline mode '$' matches at the
// end and before a final newline, and \Z only at the end.
type pyMatch struct {
	// oneLine is the pattern for values without a newline before their
	// last byte: '$' is Go's multiline '$', which there is exactly
	// Python's. lines is the one for other values: '$' is "\n?\z", which
	// differs only where the pattern goes on to match that final newline
	// after the '$' (Python's "(?s).*a$\n" matches "x\na\n", lines does not).
	oneLine, lines *regexp.Regexp
}

// MatchString reports whether re.match(pattern, s) would match.
func (m *pyMatch) MatchString(s string) bool {
	if strings.IndexByte(strings.TrimSuffix(s, "\n"), '\n') < 0 {
		return m.oneLine.MatchString(s)
	}
	return m.lines.MatchString(s)
}

// compileMatch compiles a validation_regex with Python's re.match
// semantics (see pyMatch).
func compileMatch(expr string) (*pyMatch, error) {
	oneLine, err := regexp.Compile(`^(?:` + pythonDollar(expr, `(?m:$)`) + `)`)
	if err != nil {
		return nil, err
	}
	lines, err := regexp.Compile(`^(?:` + pythonDollar(expr, `(?:\n?\z)`) + `)`)
	if err != nil {
		return nil, err
	}
	return &pyMatch{oneLine: oneLine, lines: lines}, nil
}

// pythonDollar rewrites a Python pattern for Go's regexp: each '$' that
// is not escaped, not in a character class and not in multiline mode
// ((?m) or (?m:...) in force) becomes dollar, and \Z (Python's end of
// the string, which RE2 does not know) becomes \z.
func pythonDollar(expr, dollar string) string {
	var b strings.Builder
	multiline := []bool{false} // per open group
	inClass := false
	for i := 0; i < len(expr); i++ {
		ch := expr[i]
		top := len(multiline) - 1
		switch {
		case ch == '\\' && i+1 < len(expr):
			if !inClass && expr[i+1] == 'Z' {
				b.WriteString(`\z`)
			} else {
				b.WriteString(expr[i : i+2])
			}
			i++
			continue
		case inClass:
			inClass = ch != ']'
		case ch == '[':
			inClass = true
			b.WriteByte(ch)
			// A ']' first (after an optional '^') is a literal.
			if i+1 < len(expr) && expr[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(expr) && expr[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
			continue
		case ch == '(':
			m := multiline[top]
			if strings.HasPrefix(expr[i:], "(?") {
				j := i + 2
				for j < len(expr) && strings.IndexByte("aiLmsux-", expr[j]) >= 0 {
					j++
				}
				if j < len(expr) && (expr[j] == ')' || expr[j] == ':') {
					on, off, _ := strings.Cut(expr[i+2:j], "-")
					if strings.Contains(on, "m") {
						m = true
					}
					if strings.Contains(off, "m") {
						m = false
					}
					if expr[j] == ')' {
						// Flags for the rest of the group.
						multiline[top] = m
						b.WriteString(expr[i : j+1])
						i = j
						continue
					}
				}
			}
			multiline = append(multiline, m)
		case ch == ')':
			if top > 0 {
				multiline = multiline[:top]
			}
		case ch == '$' && !multiline[top]:
			b.WriteString(dollar)
			continue
		}
		b.WriteByte(ch)
	}
	return b.String()
}

// checkUserValue rejects unlisted choices no option can use.
func checkUserValue(v string) error {
	switch {
	case len(v) > maxUnlistedValue:
		return fmt.Errorf("it is %d bytes long, more than %d", len(v), maxUnlistedValue)
	case !utf8.ValidString(v):
		return errors.New("it is not valid UTF-8")
	case strings.IndexByte(v, 0) >= 0:
		return errors.New("it contains a NUL byte")
	}
	return nil
}

// templateSyntax is the template syntax the merged options select.
func templateSyntax(merged map[string]any) string {
	if s, ok := merged["template_syntax"].(string); ok && s != "" {
		return s
	}
	return "kubespawner"
}

// substituteUnlisted replaces "{value}" with a user's unlisted choice in
// overrides. User text is data, never code: in the strings of the options
// rendered as templates later, the value is escaped for syntax so it
// renders as itself; elsewhere, and in mapping keys (never rendered), it
// is substituted as is.
func substituteUnlisted(overrides map[string]any, value, syntax string) map[string]any {
	out := make(map[string]any, len(overrides))
	for k, v := range overrides {
		sub := value
		if slices.Contains(templatedOptions, k) {
			sub = escapeTemplateText(value, syntax)
		}
		out[strings.ReplaceAll(k, "{value}", value)] = formatValue(v, sub, value)
	}
	return out
}

// escapeTemplateText makes s render as itself in a template of syntax:
// braces double in the KubeSpawner syntax; in the Go syntax every '{'
// becomes an action printing it, so no "{{" can form.
func escapeTemplateText(s, syntax string) string {
	if syntax == "go" {
		return strings.ReplaceAll(s, "{", `{{"{"}}`)
	}
	return strings.NewReplacer("{", "{{", "}", "}}").Replace(s)
}

// sortedOptions formats user options in key order, for messages.
func sortedOptions(opts map[string]string) string {
	keys := slices.Sorted(maps.Keys(opts))
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := opts[k]
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		parts[i] = fmt.Sprintf("%s=%q", k, v)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
