package kubespawner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/naming"
)

// ProfileError reports user options that do not fit the profile list.
type ProfileError struct {
	// Profile is the profile slug asked for (or chosen by default),
	// Option the profile option and Choice the value given, where they
	// apply.
	Profile, Option, Choice string
	Msg                     string
	// Err is the cause, when the choices made the options unloadable
	// (a malformed quantity, a value of the wrong type), or
	// ErrOtherCluster.
	Err error
}

func (e *ProfileError) Error() string {
	if e.Err != nil {
		return "kubespawner: " + e.Msg + ": " + e.Err.Error()
	}
	return "kubespawner: " + e.Msg
}

func (e *ProfileError) Unwrap() error { return e.Err }

// Resolve returns the effective configuration for a server's user options
// (profile, <option>, <option>--unlisted-choice), as KubeSpawner's
// load_user_options does: the chosen (or default) profile's overrides,
// then each option's chosen, unlisted or default choice's overrides.
// Unknown profiles or choices, unlisted choices that are not enabled or
// fail validation_regex are *ProfileError.
//
// The overrides merge into the Config's option values: those it was
// loaded with, or, for a Config built in Go, those its fields hold (a
// zero field is an absent option), so a Go-built Config resolves as the
// equivalent YAML does. A Config this package returns (Load,
// Resolve, Factory.Config, Objects.Config) carries the values it was made
// from: a field changed on it afterwards is not what the overrides merge
// into. The result keeps every field that only Go can set (the funcs).
func (c Config) Resolve(ctx context.Context, userOptions map[string]string) (Config, error) {
	return c.ResolveWith(ctx, userOptions, nil)
}

// HubAttributes are the options a hub may pass as StartOptions.Attributes:
// JupyterHub's own Spawner traits that KubeSpawner turns into the
// notebook container's resources.
var HubAttributes = []string{"cpu_limit", "cpu_guarantee", "mem_limit", "mem_guarantee"}

// ResolveWith is Resolve with the hub's attributes (StartOptions.Attributes)
// applied over the configuration's values and under the profile's
// overrides, as KubeSpawner, which reads them from itself, sees them. A key
// outside HubAttributes, or a value the option does not take (a memory
// string without a unit), is an error naming it.
func (c Config) ResolveWith(ctx context.Context, userOptions map[string]string, attrs map[string]any) (Config, error) {
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if !slices.Contains(HubAttributes, k) {
			return Config{}, &ConfigError{Errs: field.ErrorList{field.NotSupported(field.NewPath("attributes").Key(k), k, HubAttributes)}}
		}
	}
	profiles := c.ProfileList
	if c.ProfileListFunc != nil {
		var err error
		if profiles, err = c.ProfileListFunc(ctx); err != nil {
			return Config{}, fmt.Errorf("kubespawner: building the profile list: %w", err)
		}
	}
	if len(profiles) == 0 {
		if err := noProfileList(userOptions); err != nil {
			return Config{}, err
		}
		if len(attrs) == 0 {
			c.resolved = true
			return c, nil
		}
	}
	merged := deepCopyMap(c.source)
	if c.source == nil {
		// A Config built in Go, not yet defaulted (see withDefaults).
		var errs field.ErrorList
		if merged, errs = c.typedOptions(); len(errs) > 0 {
			return Config{}, &ConfigError{Errs: errs}
		}
	}
	if len(attrs) > 0 {
		if merged == nil {
			merged = map[string]any{}
		}
		applyOverrides(merged, attrs)
	}
	if len(profiles) == 0 {
		return c.reload(merged, envNamesOf(c.EnvironmentEntries()), "", userOptions)
	}
	profiles = initializeProfiles(profiles)
	profile, err := pickProfile(profiles, userOptions["profile"])
	if err != nil {
		return Config{}, err
	}
	profileOverrides, err := asJSON(profile.KubeSpawnerOverride)
	if err != nil {
		return Config{}, fmt.Errorf("kubespawner: profile %q: kubespawner_override: %w", profile.Slug, err)
	}
	env := envNamesOf(c.EnvironmentEntries())
	env = env.update(merged["environment"], profileOverrides, profile.envOrder, nil)
	applyOverrides(merged, profileOverrides)
	// escapedFor are the template syntaxes unlisted values were escaped
	// for; the final one must match, or a value could run as a template.
	var escapedFor []string
	for _, opt := range profile.ProfileOptions {
		ch, err := choose(profile.Slug, &opt, userOptions)
		if err != nil {
			return Config{}, err
		}
		overrides := ch.overrides
		if ch.unlisted {
			escapedFor = append(escapedFor, templateSyntax(merged))
		}
		if overrides, err = asJSON(overrides); err != nil {
			return Config{}, fmt.Errorf("kubespawner: profile %q: profile option %s: kubespawner_override: %w", profile.Slug, opt.Name, err)
		}
		var rename func(string) string
		if ch.unlisted {
			overrides = substituteUnlisted(overrides, ch.value, templateSyntax(merged))
			rename = func(k string) string { return strings.ReplaceAll(k, "{value}", ch.value) }
		}
		env = env.update(merged["environment"], overrides, ch.envOrder, rename)
		applyOverrides(merged, overrides)
	}
	for _, syn := range escapedFor {
		if syn != templateSyntax(merged) {
			return Config{}, &ProfileError{Profile: profile.Slug, Msg: "template_syntax changes after an unlisted choice was substituted; set template_syntax in the profile, not in an option's choice"}
		}
	}
	return c.reload(merged, env, profile.Slug, userOptions)
}

// choice is what a profile option contributes to a start: the overrides
// of the choice the user options make, or of the default choice, and the
// order their environment keys were written in. unlisted says the user
// typed value, which "{value}" in the overrides stands for.
type choice struct {
	overrides map[string]any
	envOrder  []string
	unlisted  bool
	value     string
}

// choose picks opt's choice for userOptions, as KubeSpawner's
// load_user_options does: an unlisted value (when the option takes one
// and it passes validation_regex), a listed choice, or the default one.
func choose(slug string, opt *NamedOption, userOptions map[string]string) (choice, error) {
	unlisted := userOptions[opt.Name+"--unlisted-choice"]
	key := userOptions[opt.Name]
	switch {
	case unlisted != "":
		u := opt.UnlistedChoice
		if u == nil || !u.Enabled {
			return choice{}, &ProfileError{Profile: slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("received an unlisted choice for %s, which does not allow one", opt.Name)}
		}
		if err := checkUserValue(unlisted); err != nil {
			return choice{}, &ProfileError{Profile: slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("unlisted choice for %s rejected: %v", opt.Name, err)}
		}
		if u.ValidationRegex != "" {
			re := u.re
			if re == nil {
				// A profile list built in Go (ProfileListFunc) was
				// never loaded: compile it now.
				var err error
				if re, err = compileMatch(u.ValidationRegex); err != nil {
					return choice{}, fmt.Errorf("kubespawner: profile option %s: validation_regex: %w", opt.Name, err)
				}
			}
			if !re.MatchString(unlisted) {
				msg := u.ValidationMessage
				if msg == "" {
					msg = "it does not match " + u.ValidationRegex
				}
				return choice{}, &ProfileError{Profile: slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("unlisted choice %q for %s rejected: %s", unlisted, opt.Name, msg)}
			}
		}
		return choice{overrides: u.KubeSpawnerOverride, envOrder: u.envOrder, unlisted: true, value: unlisted}, nil
	case key != "":
		i := indexChoice(opt.Choices, key)
		if i < 0 {
			return choice{}, &ProfileError{Profile: slug, Option: opt.Name, Choice: key, Msg: fmt.Sprintf("no choice %q for %s; choices: %s", key, opt.Name, choiceKeys(opt.Choices))}
		}
		return choice{overrides: opt.Choices[i].KubeSpawnerOverride, envOrder: opt.Choices[i].envOrder}, nil
	}
	if len(opt.Choices) == 0 {
		return choice{}, &ProfileError{Profile: slug, Option: opt.Name, Msg: fmt.Sprintf("no value for %s, which has no default choice", opt.Name)}
	}
	for _, ch := range opt.Choices {
		if ch.Default {
			return choice{overrides: ch.KubeSpawnerOverride, envOrder: ch.envOrder}, nil
		}
	}
	return choice{}, nil
}

// reload makes the Config of the merged option values, keeping c's
// Go-only fields, and checks it: what the hub's attributes, the profile
// and its choices made of the configuration must be loadable and valid
// before anything uses it. env is the order of environment's names
// through the overrides (envOrderNames.update); slug is the profile's (""
// without one).
func (c Config) reload(merged map[string]any, env envOrderNames, slug string, userOptions map[string]string) (Config, error) {
	data, err := json.Marshal(merged)
	if err != nil {
		return Config{}, err
	}
	out, err := Load(data)
	if err != nil {
		// The base options loaded: the attributes, the profile and the
		// choices made them unloadable.
		if slug == "" {
			return Config{}, fmt.Errorf("kubespawner: the hub's attributes: %w", err)
		}
		return Config{}, &ProfileError{Profile: slug, Msg: fmt.Sprintf("profile %q with user options %v", slug, sortedOptions(userOptions)), Err: err}
	}
	keepGoOnly(&out, &c)
	out.resolved = true
	// The merge went through Go maps, which forget the order of
	// `environment` (see envOrderNames).
	out.environment = orderEnv(out.environment, env)
	check := out.WithDefaults()
	if check.Namespace == "" {
		check.Namespace = c.Namespace
	}
	if err := check.Validate(); err != nil {
		if slug == "" {
			return Config{}, fmt.Errorf("kubespawner: with the hub's attributes: %w", err)
		}
		return Config{}, fmt.Errorf("kubespawner: profile %q with user options: %w", slug, err)
	}
	return out, nil
}

// noProfileList is the error of user options that ask for a profile
// where none is configured.
func noProfileList(userOptions map[string]string) error {
	if p := userOptions["profile"]; p != "" {
		return &ProfileError{Profile: p, Msg: fmt.Sprintf("profile %q requested, but no profile_list is configured", p)}
	}
	return nil
}

// initializeProfiles fills slugs and defaults as KubeSpawner does.
func initializeProfiles(in []Profile) []Profile {
	out := make([]Profile, len(in))
	copy(out, in)
	anyDefault := false
	for i := range out {
		if out[i].Slug == "" {
			out[i].Slug = naming.Slugify(out[i].DisplayName)
		}
		anyDefault = anyDefault || out[i].Default
		opts := make(OrderedOptions, len(out[i].ProfileOptions))
		copy(opts, out[i].ProfileOptions)
		for j := range opts {
			choices := make(OrderedChoices, len(opts[j].Choices))
			copy(choices, opts[j].Choices)
			hasDefault := false
			for _, ch := range choices {
				hasDefault = hasDefault || ch.Default
			}
			if !hasDefault && len(choices) > 0 {
				choices[0].Default = true
			}
			opts[j].Choices = choices
		}
		out[i].ProfileOptions = opts
	}
	if !anyDefault && len(out) > 0 {
		out[0].Default = true
	}
	return out
}

func pickProfile(profiles []Profile, slug string) (Profile, error) {
	var slugs []string
	for _, p := range profiles {
		if slug == "" && p.Default || slug != "" && p.Slug == slug {
			return p, nil
		}
		slugs = append(slugs, p.Slug)
	}
	return Profile{}, &ProfileError{Profile: slug, Msg: fmt.Sprintf("no such profile: %s; options include: %s", slug, strings.Join(slugs, ", "))}
}

func indexChoice(cs OrderedChoices, key string) int {
	for i, c := range cs {
		if c.Key == key {
			return i
		}
	}
	return -1
}

func choiceKeys(cs OrderedChoices) string {
	keys := make([]string, len(cs))
	for i, c := range cs {
		keys[i] = c.Key
	}
	return strings.Join(keys, ", ")
}
