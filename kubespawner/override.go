package kubespawner

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Override returns c with overrides applied, as a profile's
// kubespawner_override applies them: keys are option names, a mapping
// merges into a mapping option (null removes a key), anything else
// replaces the option. It is for the base configuration of one cluster
// of several: a cluster whose servers are reached through another
// pod_connect_ip, or pull from another image registry.
//
// The result is what loading c's options with the overrides applied
// gives (Load), checked as Load checks, keeping c's
// profile_list (unless the overrides set one) and every field that only
// Go can set (the funcs). It is not resolved: Resolve applies a profile
// over it as over c, and the profile's overrides win over these. As in
// Resolve, the overrides merge into the option values c was made from
// (see Resolve). A key that is not an option, or a value its option does
// not take, is an error naming the override and the key. c is not
// changed.
func (c Config) Override(overrides map[string]any) (Config, error) {
	keys := slices.Sorted(maps.Keys(overrides))
	for _, k := range keys {
		if !isOptionKey(k) {
			return Config{}, fmt.Errorf("kubespawner: override %q: %w", k, &ConfigError{Errs: field.ErrorList{field.Invalid(field.NewPath(k), k,
				unknownOptionMsg(k))}})
		}
		if _, err := json.Marshal(overrides[k]); err != nil {
			return Config{}, fmt.Errorf("kubespawner: override %q: %w", k, &ConfigError{Errs: field.ErrorList{field.Invalid(field.NewPath(k),
				fmt.Sprintf("%T", overrides[k]), "is not JSON: "+err.Error())}})
		}
	}
	ov, err := asJSON(overrides)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: override: %w", err)
	}
	merged := deepCopyMap(c.source)
	if c.source == nil {
		// A Config built in Go, not yet defaulted (see withDefaults).
		var errs field.ErrorList
		if merged, errs = c.typedOptions(); len(errs) > 0 {
			return Config{}, &ConfigError{Errs: errs}
		}
	}
	// ov is a Go map: the environment names it adds come in name order.
	env := envNamesOf(c.EnvironmentEntries()).update(merged["environment"], ov, nil, nil)
	applyOverrides(merged, ov)
	data, err := json.Marshal(merged)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: override: %w", err)
	}
	_, ownProfiles := ov["profile_list"]
	out, err := loadConfig(data, func(out *Config) {
		keepGoOnly(out, &c)
		if !ownProfiles {
			out.ProfileList = c.ProfileList
		}
		// As in reload: the merge went through Go maps, which forget
		// the order of `environment`.
		out.environment = orderEnv(out.environment, env)
	})
	if err != nil {
		quoted := make([]string, len(keys))
		for i, k := range keys {
			quoted[i] = fmt.Sprintf("%q", k)
		}
		return Config{}, fmt.Errorf("kubespawner: override %s: %w", strings.Join(quoted, ", "), err)
	}
	return out, nil
}

// WithOptions returns the configuration that c's options give with
// options set over them, as a hub's configuration (c.KubeSpawner.<option>)
// sets KubeSpawner's traits: each key is an option name and its value the
// whole value of that option, so a mapping replaces c's mapping rather
// than merging into it (unlike Override). A null value unsets the option
// (its default applies). The values are JSON as written: the order of an
// `environment` mapping and of the profiles is kept. The result is
// checked as Load checks; it keeps c's funcs and, unless options
// set profile_list, c's profile list. An unknown key or a bad value is an
// error naming the option. c is not changed.
func (c Config) WithOptions(options map[string]json.RawMessage) (Config, error) {
	merged := map[string]json.RawMessage{}
	src := c.source
	if src == nil {
		var errs field.ErrorList
		if src, errs = c.typedOptions(); len(errs) > 0 {
			return Config{}, &ConfigError{Errs: errs}
		}
	}
	for k, v := range src {
		raw, err := json.Marshal(v)
		if err != nil {
			return Config{}, fmt.Errorf("kubespawner: option %q: %w", k, err)
		}
		merged[k] = raw
	}
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(options)) {
		if !isOptionKey(k) {
			errs = append(errs, field.Invalid(field.NewPath(k), k, unknownOptionMsg(k)))
			continue
		}
		if v := options[k]; string(v) == "null" {
			delete(merged, k)
		} else {
			merged[k] = v
		}
	}
	if len(errs) > 0 {
		return Config{}, &ConfigError{Errs: errs}
	}
	data, err := json.Marshal(merged)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: options: %w", err)
	}
	_, ownProfiles := options["profile_list"]
	_, ownEnv := options["environment"]
	base := envNamesOf(c.EnvironmentEntries())
	return loadConfig(data, func(out *Config) {
		keepGoOnly(out, &c)
		if !ownProfiles {
			out.ProfileList = c.ProfileList
		}
		if !ownEnv {
			// c's environment went through a Go map above.
			out.environment = orderEnv(out.environment, base)
		}
	})
}
