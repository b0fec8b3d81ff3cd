package kubespawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// checkProfiles checks what of a profile list can be checked without user
// options: unique slugs, compilable validation_regex, overrides that are
// JSON (a list built in Go may hold any Go value). The overrides' values
// are checked when Resolve applies them.
func checkProfiles(profiles []Profile) field.ErrorList {
	var errs field.ErrorList
	slugs := map[string]bool{}
	checkOverrides := func(p *field.Path, overrides map[string]any) {
		// An unknown key in an override is set as a plain attribute by
		// KubeSpawner's setattr and silently does nothing; it is
		// refused here, at load, naming it, as an unknown top-level
		// option is (rule unknown-option), whether or not a start ever
		// chooses that profile.
		for _, k := range slices.Sorted(maps.Keys(overrides)) {
			if !isOptionKey(k) {
				errs = append(errs, field.Invalid(p.Child("kubespawner_override").Key(k), k,
					unknownOptionMsg(k)+"; KubeSpawner would set it as a plain attribute, which does nothing"))
			}
		}
		if isJSONShaped(overrides) {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(overrides)) {
			if _, err := json.Marshal(overrides[k]); err != nil {
				errs = append(errs, field.Invalid(p.Child("kubespawner_override").Key(k), fmt.Sprintf("%T", overrides[k]), "is not JSON: "+err.Error()))
			}
		}
	}
	for _, p := range initializeProfiles(profiles) {
		pp := field.NewPath("profile_list").Key(p.Slug)
		if p.Slug == "" {
			errs = append(errs, field.Required(pp.Child("slug"), "a slug or a display_name to make one from"))
		}
		if slugs[p.Slug] {
			errs = append(errs, field.Duplicate(pp.Child("slug"), p.Slug))
		}
		slugs[p.Slug] = true
		checkOverrides(pp, p.KubeSpawnerOverride)
		for _, o := range p.ProfileOptions {
			op := pp.Child("profile_options").Key(o.Name)
			for _, ch := range o.Choices {
				checkOverrides(op.Child("choices").Key(ch.Key), ch.KubeSpawnerOverride)
			}
			if u := o.UnlistedChoice; u != nil {
				checkOverrides(op.Child("unlisted_choice"), u.KubeSpawnerOverride)
			}
			if u := o.UnlistedChoice; u != nil && u.ValidationRegex != "" && u.re == nil {
				if _, err := compileMatch(u.ValidationRegex); err != nil {
					errs = append(errs, field.Invalid(op.Child("unlisted_choice", "validation_regex"), u.ValidationRegex, err.Error()))
				}
			}
			if len(o.Choices) == 0 && (o.UnlistedChoice == nil || !o.UnlistedChoice.Enabled) {
				errs = append(errs, field.Required(op.Child("choices"), "a choice or an enabled unlisted_choice"))
			}
		}
	}
	return errs
}

// OverrideNamespaces are the namespaces a profile override can put a
// server in (kubespawner_override "namespace", a literal in KubeSpawner,
// never expanded), from the static profile list or, with
// ProfileListFunc, as ProfileNamespaces declares them. open names the
// first unlisted choice whose override makes the namespace the user's
// typed value: no list can hold those.
func (c *Config) OverrideNamespaces() (namespaces []string, open string) {
	if c.ProfileListFunc != nil {
		return slices.Clone(c.ProfileNamespaces), ""
	}
	add := func(o map[string]any) {
		// A name no namespace can have is refused when the profile is
		// chosen (its objects cannot be made); it is never watched.
		if ns, ok := o["namespace"].(string); ok && len(validation.IsDNS1123Label(ns)) == 0 && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	for _, p := range c.ProfileList {
		add(p.KubeSpawnerOverride)
		for _, opt := range p.ProfileOptions {
			for _, ch := range opt.Choices {
				add(ch.KubeSpawnerOverride)
			}
			if u := opt.UnlistedChoice; u != nil && u.Enabled {
				if ns, ok := u.KubeSpawnerOverride["namespace"].(string); ok && strings.Contains(ns, "{value}") {
					if open == "" {
						open = fmt.Sprintf("profile %q, option %q", p.Slug, opt.Name)
					}
					continue
				}
				add(u.KubeSpawnerOverride)
			}
		}
	}
	return namespaces, open
}
