package naming

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Value is a parsed nested configuration value (volumes, volume mounts,
// labels, environment, ...) whose strings are templates, as KubeSpawner's
// _expand_all treats them: every string inside lists and maps is a
// template; map keys and other scalars are kept as they are. It is
// immutable and safe for concurrent use.
type Value struct {
	kind  valueKind
	tmpl  *Template
	list  []*Value
	keys  []string // map keys, sorted for deterministic errors
	items map[string]*Value
	typed string // "[]string" or "map[string]string" for typed containers
	other any
}

type valueKind int

const (
	valueOther valueKind = iota
	valueString
	valueList
	valueMap
)

// ParseValue parses every string in v as a template. v may hold strings,
// []any, []string, map[string]any and map[string]string, nested in any
// way (as decoded from JSON or YAML); anything else is kept as it is. An
// error names the path of the bad template, such as volumes[2].path.
func ParseValue(v any, syntax Syntax) (*Value, error) {
	return parseValue(v, syntax, "")
}

func parseValue(v any, syntax Syntax, path string) (*Value, error) {
	at := func(p string) string {
		if p == "" {
			return "value"
		}
		return p
	}
	switch v := v.(type) {
	case string:
		t, err := Parse(v, syntax)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(path), err)
		}
		return &Value{kind: valueString, tmpl: t}, nil
	case []string:
		out := &Value{kind: valueList, typed: "[]string", list: make([]*Value, len(v))}
		for i, s := range v {
			var err error
			if out.list[i], err = parseValue(s, syntax, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := &Value{kind: valueList, list: make([]*Value, len(v))}
		for i, e := range v {
			var err error
			if out.list[i], err = parseValue(e, syntax, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]string:
		out := &Value{kind: valueMap, typed: "map[string]string", keys: slices.Sorted(maps.Keys(v)), items: make(map[string]*Value, len(v))}
		for _, k := range out.keys {
			var err error
			if out.items[k], err = parseValue(v[k], syntax, joinPath(path, k)); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := &Value{kind: valueMap, keys: slices.Sorted(maps.Keys(v)), items: make(map[string]*Value, len(v))}
		for _, k := range out.keys {
			var err error
			if out.items[k], err = parseValue(v[k], syntax, joinPath(path, k)); err != nil {
				return nil, err
			}
		}
		return out, nil
	default:
		return &Value{kind: valueOther, other: v}, nil
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Expand renders every template in the value with f and returns a new
// value of the same shape and container types; the parsed value is not
// changed. Non-string scalars are returned as they were given (shared, not
// copied).
func (v *Value) Expand(f Fields) (any, error) {
	return v.expand(f, "")
}

func (v *Value) expand(f Fields, path string) (any, error) {
	switch v.kind {
	case valueString:
		s, err := v.tmpl.Execute(f)
		if err != nil && path != "" {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, err
	case valueList:
		if v.typed == "[]string" {
			out := make([]string, len(v.list))
			for i, e := range v.list {
				s, err := e.expand(f, path+"["+strconv.Itoa(i)+"]")
				if err != nil {
					return nil, err
				}
				out[i] = s.(string)
			}
			return out, nil
		}
		out := make([]any, len(v.list))
		for i, e := range v.list {
			var err error
			if out[i], err = e.expand(f, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return nil, err
			}
		}
		return out, nil
	case valueMap:
		if v.typed == "map[string]string" {
			out := make(map[string]string, len(v.keys))
			for _, k := range v.keys {
				s, err := v.items[k].expand(f, joinPath(path, k))
				if err != nil {
					return nil, err
				}
				out[k] = s.(string)
			}
			return out, nil
		}
		out := make(map[string]any, len(v.keys))
		for _, k := range v.keys {
			var err error
			if out[k], err = v.items[k].expand(f, joinPath(path, k)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v.other, nil
}
