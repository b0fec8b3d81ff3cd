package kubespawner

import (
	"encoding/json"
	"strings"
)

// asJSON returns overrides in the shapes json.Unmarshal gives
// (map[string]any, []any, float64, ...), as a loaded profile list's are.
// One built in Go may hold a map[string]string or a []string, which must
// merge, and take an unlisted {value}, as a decoded mapping or list does.
func asJSON(overrides map[string]any) (map[string]any, error) {
	if isJSONShaped(overrides) {
		return overrides, nil
	}
	data, err := json.Marshal(overrides)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = json.Unmarshal(data, &out)
	return out, err
}

// isJSONShaped reports whether v holds only what json.Unmarshal makes of
// JSON in an any.
func isJSONShaped(v any) bool {
	switch v := v.(type) {
	case nil, bool, float64, string:
		return true
	case map[string]any:
		for _, e := range v {
			if !isJSONShaped(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range v {
			if !isJSONShaped(e) {
				return false
			}
		}
		return true
	}
	return false
}

// applyOverrides is KubeSpawner's _apply_overrides over the option map: a
// mapping merges recursively into a mapping (null removes a key), any
// other value replaces the option.
func applyOverrides(target map[string]any, overrides map[string]any) {
	for k, v := range overrides {
		if vm, ok := v.(map[string]any); ok {
			if k == "environment" && target[k] == nil {
				// KubeSpawner's environment is never None: unset, it is
				// {}, which the mapping updates (a null leaves).
				target[k] = map[string]any{}
			}
			if tm, ok := target[k].(map[string]any); ok {
				recursiveUpdate(tm, vm)
				continue
			}
			target[k] = deepCopyMap(vm)
			continue
		}
		target[k] = v
	}
}

func recursiveUpdate(target, update map[string]any) {
	for k, v := range update {
		switch v := v.(type) {
		case map[string]any:
			tm, ok := target[k].(map[string]any)
			if !ok {
				tm = map[string]any{}
				target[k] = tm
			}
			recursiveUpdate(tm, v)
		case nil:
			delete(target, k)
		default:
			target[k] = v
		}
	}
}

func deepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = deepCopyValue(v)
	}
	return out
}

func deepCopyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return deepCopyMap(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopyValue(e)
		}
		return out
	}
	return v
}

// formatValue replaces "{value}" in every string (keys included), as
// KubeSpawner's recursive_format does for unlisted choices: with value in
// strings, with key in mapping keys, which are never rendered as
// templates.
func formatValue(v any, value, key string) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "{value}", value)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = formatValue(e, value, key)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[strings.ReplaceAll(k, "{value}", key)] = formatValue(e, value, key)
		}
		return out
	}
	// null stays null, as in recursive_format: in an override it
	// removes a key or unsets an option.
	return v
}

// decodeSource keeps a loaded config's option values for Resolve.
func decodeSource(jsonData []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(jsonData, &m); err != nil {
		return nil, err
	}
	delete(m, "profile_list")
	return m, nil
}
