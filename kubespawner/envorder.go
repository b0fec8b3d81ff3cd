package kubespawner

import (
	"encoding/json"
	"maps"
	"slices"
)

// The order of `environment` through overrides. KubeSpawner's environment
// is a Python dict that the profile's and the choices' overrides update in
// place (recursive_update): a name set again keeps its place, a new name
// comes last in the override's order, a name set to null leaves. get_env
// keeps that order, and make_pod stores the variables by name in it, so of
// two entries naming one variable the later wins. The merge itself goes
// through Go maps, which have no order: envOrderNames follows it alongside.

// overrideEnvOrder returns the keys of kubespawner_override.environment in
// raw (a profile or a choice as JSON) in the order written; nil when there
// is none or it is not a mapping.
func overrideEnvOrder(raw []byte) []string {
	var o struct {
		Override map[string]json.RawMessage `json:"kubespawner_override"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return nil
	}
	env, ok := o.Override["environment"]
	if !ok {
		return nil
	}
	var keys []string
	if unmarshalOrdered(env, func(k string, _ json.RawMessage) error {
		keys = append(keys, k)
		return nil
	}) != nil {
		return nil
	}
	return keys
}

// envOrderNames are the names of `environment` in the dict's order.
type envOrderNames []string

func envNamesOf(entries []EnvEntry) envOrderNames {
	out := make(envOrderNames, len(entries))
	for i, e := range entries {
		out[i] = e.Name
	}
	return out
}

// update follows the override ov, applied over the option values whose
// environment is before. written is the order of ov's environment keys
// as loaded, before rename made them what ov holds (an unlisted choice's
// {value}); keys it does not hold (a profile list built in Go) come in
// name order.
func (n envOrderNames) update(before any, ov map[string]any, written []string, rename func(string) string) envOrderNames {
	v, ok := ov["environment"]
	if !ok {
		return n
	}
	env, isMap := v.(map[string]any)
	if !isMap {
		return nil // replaced; loading refuses a value that is not null
	}
	merges := before == nil
	if _, ok := before.(map[string]any); ok {
		merges = true
	}
	var out envOrderNames
	if merges {
		out = slices.Clone(n)
	}
	keys := make([]string, 0, len(env))
	for _, k := range written {
		if rename != nil {
			k = rename(k)
		}
		if _, ok := env[k]; ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		i := slices.Index(out, k)
		switch {
		case env[k] == nil && merges:
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
		case i < 0:
			out = append(out, k)
		}
	}
	return out
}

// orderEnv returns entries in the order of names, then any others as
// they come.
func orderEnv(entries []EnvEntry, names envOrderNames) []EnvEntry {
	if entries == nil {
		return nil
	}
	at := make(map[string]int, len(entries))
	for i, e := range entries {
		at[e.Name] = i
	}
	out := make([]EnvEntry, 0, len(entries))
	taken := make([]bool, len(entries))
	for _, name := range names {
		if i, ok := at[name]; ok && !taken[i] {
			out = append(out, entries[i])
			taken[i] = true
		}
	}
	for i, e := range entries {
		if !taken[i] {
			out = append(out, e)
		}
	}
	return out
}
