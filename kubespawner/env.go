package kubespawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// EnvEntry is one variable of a server's environment as KubeSpawner's
// get_env returns it: Value is a string, a dict (an EnvVar's other
// fields, such as valueFrom) or, from a configuration, another JSON
// value.
type EnvEntry struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// decodeEnvironment decodes `environment` in order, keeping each raw
// value; strs holds the string values.
func decodeEnvironment(raw json.RawMessage) ([]EnvEntry, map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("want a mapping of variable names to values")
	}
	var out []EnvEntry
	strs := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		name := tok.(string)
		if s, ok := v.(string); ok {
			strs[name] = s
		} else {
			delete(strs, name)
		}
		// A key given twice: Python's json.loads keeps its first place
		// and the last value.
		if i := slices.IndexFunc(out, func(e EnvEntry) bool { return e.Name == name }); i >= 0 {
			out[i].Value = v
			continue
		}
		out = append(out, EnvEntry{Name: name, Value: v})
	}
	return out, strs, nil
}

// EnvironmentEntries is `environment` in order: as loaded, or sorted by
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
