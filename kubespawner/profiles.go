package kubespawner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/naming"
)

// Profile is one entry of KubeSpawner's profile_list.
type Profile struct {
	DisplayName string `json:"display_name"`
	// Slug identifies the profile in user options; generated from
	// DisplayName when empty.
	Slug        string `json:"slug,omitempty"`
	Default     bool   `json:"default,omitempty"`
	Description string `json:"description,omitempty"`
	// KubeSpawnerOverride holds option names and values applied over the
	// Config: a mapping merges into a mapping option (null removes a key),
	// anything else replaces the option. The environment names it adds
	// come after those already set, in the order written (a name set
	// again keeps its place), as in KubeSpawner's dict; in a profile
	// list built in Go, which has no order, in name order.
	KubeSpawnerOverride map[string]any `json:"kubespawner_override,omitempty"`
	// ProfileOptions are the profile's choices, in order.
	ProfileOptions OrderedOptions `json:"profile_options,omitempty"`
	// envOrder is the order of KubeSpawnerOverride's environment keys
	// as loaded (see overrideEnvOrder).
	envOrder []string
}

// UnmarshalJSON decodes strictly and keeps the order of the override's
// environment keys.
func (p *Profile) UnmarshalJSON(data []byte) error {
	type plain Profile
	var v plain
	if err := strictJSON(data, &v); err != nil {
		return err
	}
	*p = Profile(v)
	p.envOrder = overrideEnvOrder(data)
	return nil
}

// ProfileOption is one choice a user makes within a profile.
type ProfileOption struct {
	DisplayName    string          `json:"display_name"`
	Choices        OrderedChoices  `json:"choices,omitempty"`
	UnlistedChoice *UnlistedChoice `json:"unlisted_choice,omitempty"`
}

// Choice is one predefined value of a ProfileOption.
type Choice struct {
	DisplayName         string         `json:"display_name"`
	Default             bool           `json:"default,omitempty"`
	KubeSpawnerOverride map[string]any `json:"kubespawner_override,omitempty"`
	// envOrder: as Profile's.
	envOrder []string
}

// UnmarshalJSON decodes strictly and keeps the order of the override's
// environment keys.
func (c *Choice) UnmarshalJSON(data []byte) error {
	type plain Choice
	var v plain
	if err := strictJSON(data, &v); err != nil {
		return err
	}
	*c = Choice(v)
	c.envOrder = overrideEnvOrder(data)
	return nil
}

// UnlistedChoice lets a user type a value of their own; "{value}" in its
// overrides is replaced by it.
type UnlistedChoice struct {
	Enabled              bool           `json:"enabled"`
	DisplayName          string         `json:"display_name,omitempty"`
	DisplayNameInChoices string         `json:"display_name_in_choices,omitempty"`
	ValidationRegex      string         `json:"validation_regex,omitempty"`
	ValidationMessage    string         `json:"validation_message,omitempty"`
	KubeSpawnerOverride  map[string]any `json:"kubespawner_override,omitempty"`
	// re is ValidationRegex compiled when the configuration is loaded.
	re *pyMatch
	// envOrder: as Profile's.
	envOrder []string
}

// UnmarshalJSON decodes strictly and compiles validation_regex once, so a
// bad pattern fails Load instead of a start.
func (u *UnlistedChoice) UnmarshalJSON(data []byte) error {
	type plain UnlistedChoice
	var p plain
	if err := strictJSON(data, &p); err != nil {
		return err
	}
	*u = UnlistedChoice(p)
	u.envOrder = overrideEnvOrder(data)
	if u.ValidationRegex != "" {
		re, err := compileMatch(u.ValidationRegex)
		if err != nil {
			return fmt.Errorf("validation_regex: %w", err)
		}
		u.re = re
	}
	return nil
}

// OrderedOptions keeps profile_options in their configured order.
type OrderedOptions []NamedOption

// NamedOption is a profile option with its name.
type NamedOption struct {
	Name string
	ProfileOption
}

// OrderedChoices keeps choices in their configured order (the first is
// the default when none is marked).
type OrderedChoices []NamedChoice

// NamedChoice is a choice with its key.
type NamedChoice struct {
	Key string
	Choice
}

func (o *OrderedOptions) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, func(key string, raw json.RawMessage) error {
		var opt ProfileOption
		if err := strictJSON(raw, &opt); err != nil {
			return fmt.Errorf("profile option %s: %w", key, err)
		}
		*o = append(*o, NamedOption{Name: key, ProfileOption: opt})
		return nil
	})
}

func (o OrderedOptions) MarshalJSON() ([]byte, error) {
	return marshalOrdered(len(o), func(i int) (string, any) { return o[i].Name, o[i].ProfileOption })
}

func (c *OrderedChoices) UnmarshalJSON(data []byte) error {
	return unmarshalOrdered(data, func(key string, raw json.RawMessage) error {
		var ch Choice
		if err := strictJSON(raw, &ch); err != nil {
			return fmt.Errorf("choice %s: %w", key, err)
		}
		*c = append(*c, NamedChoice{Key: key, Choice: ch})
		return nil
	})
}

func (c OrderedChoices) MarshalJSON() ([]byte, error) {
	return marshalOrdered(len(c), func(i int) (string, any) { return c[i].Key, c[i].Choice })
}

func unmarshalOrdered(data []byte, add func(key string, raw json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("want a mapping")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if err := add(tok.(string), raw); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

func marshalOrdered(n int, at func(i int) (string, any)) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range n {
		k, v := at(i)
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

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
		return "spawner: " + e.Msg + ": " + e.Err.Error()
	}
	return "spawner: " + e.Msg
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
			return Config{}, fmt.Errorf("spawner: building the profile list: %w", err)
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
		return Config{}, fmt.Errorf("spawner: profile %q: kubespawner_override: %w", profile.Slug, err)
	}
	env := envNamesOf(c.EnvironmentEntries())
	env = env.update(merged["environment"], profileOverrides, profile.envOrder, nil)
	applyOverrides(merged, profileOverrides)
	// escapedFor are the template syntaxes unlisted values were escaped
	// for; the final one must match, or a value could run as a template.
	var escapedFor []string
	for _, opt := range profile.ProfileOptions {
		unlisted := userOptions[opt.Name+"--unlisted-choice"]
		choice := userOptions[opt.Name]
		var overrides map[string]any
		var envOrder []string
		substitute := false
		switch {
		case unlisted != "":
			u := opt.UnlistedChoice
			if u == nil || !u.Enabled {
				return Config{}, &ProfileError{Profile: profile.Slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("received an unlisted choice for %s, which does not allow one", opt.Name)}
			}
			if err := checkUserValue(unlisted); err != nil {
				return Config{}, &ProfileError{Profile: profile.Slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("unlisted choice for %s rejected: %v", opt.Name, err)}
			}
			if u.ValidationRegex != "" {
				re := u.re
				if re == nil {
					// A profile list built in Go (ProfileListFunc) was
					// never loaded: compile it now.
					var err error
					if re, err = compileMatch(u.ValidationRegex); err != nil {
						return Config{}, fmt.Errorf("spawner: profile option %s: validation_regex: %w", opt.Name, err)
					}
				}
				if !re.MatchString(unlisted) {
					msg := u.ValidationMessage
					if msg == "" {
						msg = "it does not match " + u.ValidationRegex
					}
					return Config{}, &ProfileError{Profile: profile.Slug, Option: opt.Name, Choice: unlisted, Msg: fmt.Sprintf("unlisted choice %q for %s rejected: %s", unlisted, opt.Name, msg)}
				}
			}
			overrides, envOrder, substitute = u.KubeSpawnerOverride, u.envOrder, true
			escapedFor = append(escapedFor, templateSyntax(merged))
		case choice != "":
			i := indexChoice(opt.Choices, choice)
			if i < 0 {
				return Config{}, &ProfileError{Profile: profile.Slug, Option: opt.Name, Choice: choice, Msg: fmt.Sprintf("no choice %q for %s; choices: %s", choice, opt.Name, choiceKeys(opt.Choices))}
			}
			overrides, envOrder = opt.Choices[i].KubeSpawnerOverride, opt.Choices[i].envOrder
		default:
			if len(opt.Choices) == 0 {
				return Config{}, &ProfileError{Profile: profile.Slug, Option: opt.Name, Msg: fmt.Sprintf("no value for %s, which has no default choice", opt.Name)}
			}
			for _, ch := range opt.Choices {
				if ch.Default {
					overrides, envOrder = ch.KubeSpawnerOverride, ch.envOrder
					break
				}
			}
		}
		if overrides, err = asJSON(overrides); err != nil {
			return Config{}, fmt.Errorf("spawner: profile %q: profile option %s: kubespawner_override: %w", profile.Slug, opt.Name, err)
		}
		var rename func(string) string
		if substitute {
			overrides = substituteUnlisted(overrides, unlisted, templateSyntax(merged))
			rename = func(k string) string { return strings.ReplaceAll(k, "{value}", unlisted) }
		}
		env = env.update(merged["environment"], overrides, envOrder, rename)
		applyOverrides(merged, overrides)
	}
	for _, syn := range escapedFor {
		if syn != templateSyntax(merged) {
			return Config{}, &ProfileError{Profile: profile.Slug, Msg: "template_syntax changes after an unlisted choice was substituted; set template_syntax in the profile, not in an option's choice"}
		}
	}
	return c.reload(merged, env, profile.Slug, userOptions)
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
			return Config{}, fmt.Errorf("spawner: the hub's attributes: %w", err)
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
			return Config{}, fmt.Errorf("spawner: with the hub's attributes: %w", err)
		}
		return Config{}, fmt.Errorf("spawner: profile %q with user options: %w", slug, err)
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
