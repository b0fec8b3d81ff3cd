package spawner

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

// compileMatch compiles a validation_regex with Python's re.match
// semantics: anchored at the start only.
func compileMatch(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)`)
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
// overrides. User text is data, never code: in the options rendered as
// templates later, the value is escaped for syntax so it renders as
// itself; elsewhere it is substituted as is.
func substituteUnlisted(overrides map[string]any, value, syntax string) map[string]any {
	out := make(map[string]any, len(overrides))
	for k, v := range overrides {
		sub := value
		if slices.Contains(templatedOptions, k) {
			sub = escapeTemplateText(value, syntax)
		}
		out[formatValue(k, value).(string)] = formatValue(v, sub)
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
