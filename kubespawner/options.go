package kubespawner

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/manifest"
)

// optionField is a field of Config, or of its Pod, that an option of the
// KubeSpawner dictionary decodes into.
type optionField struct {
	key   string
	index []int // for reflect.Value.FieldByIndex on a Config
}

// fieldSets sorts Config's fields by how a Config rebuilt from its option
// dictionary (Load, as Resolve does) gets them back.
type fieldSets struct {
	// options are the fields an option decodes into: the JSON-tagged
	// ones and Pod's make_pod options (podOptionKeys).
	options []optionField
	// goOnly are the exported fields no option carries: tagged json:"-"
	// (the funcs), and Pod's fields that no make_pod option sets.
	// keepGoOnly copies them, so a new one is kept without a change.
	goOnly [][]int
}

// configFields sorts Config's fields, once.
var configFields = sync.OnceValue(func() fieldSets {
	var s fieldSets
	podKeys := map[string]string{} // "fsgid": "fs_gid": the PodSpec field's name, folded
	for _, k := range podOptionKeys {
		podKeys[strings.ReplaceAll(k, "_", "")] = k
	}
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported():
			// State Load derives from the options again.
		case f.Name == "HubOptions":
			// The hub's options (hubOptions), added by typedOptions.
		case f.Name == "ProfileList":
			// Not an option profiles merge into (decodeSource).
		case f.Name == "Pod":
			for j := range f.Type.NumField() {
				folded := strings.ToLower(f.Type.Field(j).Name)
				if key, ok := podKeys[folded]; ok {
					s.options = append(s.options, optionField{key, []int{i, j}})
					delete(podKeys, folded)
				} else {
					s.goOnly = append(s.goOnly, []int{i, j})
				}
			}
		case name == "-":
			s.goOnly = append(s.goOnly, []int{i})
		default:
			s.options = append(s.options, optionField{name, []int{i}})
		}
	}
	if len(podKeys) > 0 {
		panic(fmt.Sprintf("kubespawner: make_pod options without a manifest.PodSpec field: %v", slices.Sorted(maps.Values(podKeys))))
	}
	return s
})

// keepGoOnly copies into dst the fields of from that no option carries
// (configFields' goOnly): Resolve rebuilds its result from options, and
// only Go can carry a func.
func keepGoOnly(dst, from *Config) {
	d, f := reflect.ValueOf(dst).Elem(), reflect.ValueOf(from).Elem()
	for _, index := range configFields().goOnly {
		d.FieldByIndex(index).Set(f.FieldByIndex(index))
	}
}

// typedOptions is the option dictionary of a Config built in Go: what a
// configuration file that sets its fields loads as (decodeSource), for
// Resolve to merge profile overrides into. A field at its zero value is
// left out, as an option absent from a file: Load decodes both to
// the zero value, an override's mapping replaces both, and a Go Config's
// empty Image, which as an explicit "" Load refuses, is the
// default image. A field that cannot be an option is an error naming it.
func (c *Config) typedOptions() (map[string]any, field.ErrorList) {
	var errs field.ErrorList
	opts := map[string]any{}
	set := func(key string, raw []byte) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(key), string(raw), "is not JSON: "+err.Error()))
			return
		}
		opts[key] = v
	}
	cv := reflect.ValueOf(c).Elem()
	for _, f := range configFields().options {
		v := cv.FieldByIndex(f.index)
		if v.IsZero() {
			continue
		}
		value := optionValue(f.key, v.Interface())
		raw, err := json.Marshal(value)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(f.key), fmt.Sprintf("%T", value),
				"cannot be written as the option that profile overrides merge into: "+err.Error()))
			continue
		}
		set(f.key, raw)
	}
	for _, k := range slices.Sorted(maps.Keys(c.HubOptions)) {
		if !slices.Contains(hubOptions, k) {
			errs = append(errs, field.Invalid(field.NewPath(k), string(c.HubOptions[k]),
				"is in HubOptions but is not an option that acts in the hub: set its own Config field"))
			continue
		}
		set(k, c.HubOptions[k])
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return opts, nil
}

// optionValue is a field's value as KubeSpawner writes the option, where
// its JSON form is not that: allow_privilege_escalation is true, false or
// null; cpu_limit and cpu_guarantee are a float of CPUs; mem_limit and
// mem_guarantee a number of bytes (KubeSpawner's "1G" is 2^30 bytes, a
// Go Quantity's 10^9).
func optionValue(key string, v any) any {
	switch v := v.(type) {
	case manifest.PrivilegeEscalation:
		switch v {
		case manifest.EscalationAllowed:
			return true
		case manifest.EscalationUnset:
			return nil
		}
		return false
	case resource.Quantity:
		switch key {
		case "cpu_limit", "cpu_guarantee":
			return v.AsApproximateFloat64()
		case "mem_limit", "mem_guarantee":
			return v.Value()
		}
	}
	return v
}
