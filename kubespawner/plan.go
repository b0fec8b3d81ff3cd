package kubespawner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spawnkit/spawnkit/naming"
)

// literalValues is m with its templated values emptied: the keys of
// templated labels and annotations are not templates (KubeSpawner
// expands values only), and a value without a field renders as itself,
// so both can be checked before any server exists.
func literalValues(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !isTemplate(v) {
			out[k] = v
		} else {
			out[k] = ""
		}
	}
	return out
}

// isTemplate reports whether s holds a template field in either syntax,
// so it can only be checked once rendered.
func isTemplate(s string) bool { return strings.Contains(s, "{") }

func expandString(s string, fields naming.Fields, syntax naming.Syntax) (string, error) {
	v, err := naming.ParseValue(s, syntax)
	if err != nil {
		return "", err
	}
	out, err := v.Expand(fields)
	if err != nil {
		return "", err
	}
	return out.(string), nil
}

// environmentEntries is `environment` in order: as loaded, or sorted by
// name for a Config built in Go.
func (c *Config) EnvironmentEntries() []EnvEntry {
	if c.environment != nil {
		return c.environment
	}
	out := make([]EnvEntry, 0, len(c.Environment))
	for _, k := range slices.Sorted(maps.Keys(c.Environment)) {
		out = append(out, EnvEntry{Name: k, Value: c.Environment[k]})
	}
	return out
}

// Syntax is the syntax of the configuration's templates (template_syntax).
func (c *Config) Syntax() naming.Syntax {
	if c.TemplateSyntax == "go" {
		return naming.Go
	}
	return naming.KubeSpawner
}

// Expand renders s, a template in the configuration's syntax, with a
// server's fields.
func (c *Config) Expand(s string, fields naming.Fields) (string, error) {
	return expandString(s, fields, c.Syntax())
}

// AtInit returns a copy of c as KubeSpawner's __init__ leaves it for the
// server whose fields are given, before any profile applies: port 0 is
// 8888 and working_dir is expanded, in the fields and in the option
// values profiles merge into. A profile's port or working_dir, applied
// later, is used as it is, and its name templates and namespace come too
// late to change the names.
func (c *Config) AtInit(fields *naming.Fields) (*Config, error) {
	out := *c
	if out.Port == 0 {
		out.Port = 8888
	}
	if out.source != nil {
		out.source = maps.Clone(out.source)
		out.source["port"] = out.Port
	}
	if out.Pod.WorkingDir != "" {
		wd, err := out.Expand(out.Pod.WorkingDir, *fields)
		if err != nil {
			return nil, fmt.Errorf("working_dir: %w", err)
		}
		out.Pod.WorkingDir = wd
		for _, k := range []string{"working_dir", "singleuser_working_dir"} {
			if _, ok := out.source[k]; ok {
				out.source[k] = wd
			}
		}
	}
	return &out, nil
}
