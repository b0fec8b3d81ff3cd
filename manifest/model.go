package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Override replaces one top-level field of a container or pod spec, as an
// entry of KubeSpawner's extra_container_config or extra_pod_config.
type Override struct {
	// Key is the field's JSON name ("imagePullPolicy") or its snake_case
	// spelling ("image_pull_policy").
	Key string
	// Value is the field's new JSON value; null (or empty) removes the
	// field.
	Value json.RawMessage
}

// Overrides are applied in order, so when a key appears twice (or in both
// spellings) the later one wins. Decoding a JSON object keeps its key
// order.
type Overrides []Override

// UnmarshalJSON decodes a JSON object, keeping its key order.
func (o *Overrides) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*o = nil
		return nil
	}
	pairs, err := orderedObject(data)
	if err != nil {
		return err
	}
	out := make(Overrides, len(pairs))
	for i, p := range pairs {
		out[i] = Override{Key: p.key, Value: p.value}
	}
	*o = out
	return nil
}

// MarshalJSON encodes the overrides as a JSON object in order.
func (o Overrides) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, ov := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(ov.Key)
		b.Write(k)
		b.WriteByte(':')
		if len(ov.Value) == 0 {
			b.WriteString("null")
		} else {
			b.Write(ov.Value)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type pair struct {
	key   string
	value json.RawMessage
}

// orderedObject splits a JSON object into its members, in order.
func orderedObject(data []byte) ([]pair, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", abbreviate(data))
	}
	var pairs []pair
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		pairs = append(pairs, pair{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return pairs, nil
}

func abbreviate(data []byte) string {
	s := string(bytes.TrimSpace(data))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// fieldTable maps the spellings of a struct type's top-level JSON fields
// to their JSON names and Go types.
type fieldTable struct {
	byName map[string]fieldInfo // JSON name -> info
	byFold map[string]string    // lowercased name without '_' -> JSON name
}

type fieldInfo struct {
	name string
	typ  reflect.Type
}

var fieldTables sync.Map // reflect.Type -> *fieldTable

func fieldsOf(t reflect.Type) *fieldTable {
	if ft, ok := fieldTables.Load(t); ok {
		return ft.(*fieldTable)
	}
	ft := &fieldTable{byName: map[string]fieldInfo{}, byFold: map[string]string{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				add(f.Type)
				continue
			}
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			ft.byName[name] = fieldInfo{name: name, typ: f.Type}
			ft.byFold[fold(name)] = name
		}
	}
	add(t)
	v, _ := fieldTables.LoadOrStore(t, ft)
	return v.(*fieldTable)
}

// fold makes "image_pull_policy", "imagePullPolicy" and "host_ip" /
// "hostIP" compare equal, as the Kubernetes Python client's attribute maps
// do for the snake_case attribute and camelCase JSON name of each field.
func fold(key string) string { return strings.ToLower(strings.ReplaceAll(key, "_", "")) }

// canonical returns the JSON name for a top-level key in either spelling.
func (ft *fieldTable) canonical(key string) (fieldInfo, bool) {
	if fi, ok := ft.byName[key]; ok {
		return fi, true
	}
	if name, ok := ft.byFold[fold(key)]; ok {
		return ft.byName[name], true
	}
	return fieldInfo{}, false
}

// strictDecode decodes raw into target, rejecting unknown fields.
func strictDecode(raw []byte, target any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// decodeModel decodes a KubeSpawner-style model dict (or a list of them)
// into target, a pointer to a Kubernetes API struct or slice of structs.
// As the Kubernetes Python client does, top-level keys may be camelCase or
// snake_case; nested keys must be the API's camelCase names. Unlike
// KubeSpawner, which passes a nested unknown key on for the API server to
// silently drop, an unknown key at any depth is an error naming it.
func decodeModel(raw json.RawMessage, target any, path string) error {
	rv := reflect.ValueOf(target).Elem()
	if rv.Kind() == reflect.Slice {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s: want a list: %w", path, err)
		}
		out := reflect.MakeSlice(rv.Type(), len(items), len(items))
		for i, item := range items {
			if err := decodeModel(item, out.Index(i).Addr().Interface(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		rv.Set(out)
		return nil
	}
	normalized, err := normalizeKeys(raw, rv.Type(), path)
	if err != nil {
		return err
	}
	if err := strictDecode(normalized, target); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// normalizeKeys rewrites a JSON object's top-level keys to the JSON names
// of t's fields, later keys winning over earlier ones.
func normalizeKeys(raw json.RawMessage, t reflect.Type, path string) ([]byte, error) {
	pairs, err := orderedObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ft := fieldsOf(t)
	obj := make(map[string]json.RawMessage, len(pairs))
	for _, p := range pairs {
		fi, ok := ft.canonical(p.key)
		if !ok {
			return nil, fmt.Errorf("%s: %s has no field %q", path, t.Name(), p.key)
		}
		obj[fi.name] = p.value
	}
	return json.Marshal(obj)
}

// applyOverrides replaces top-level fields of *target (a container or pod
// spec) as KubeSpawner's update_k8s_model does: whole fields, no deep
// merge; null removes. Every bad entry is reported at its own path: an
// unknown key, or a value that does not decode into its field.
func applyOverrides[T any](target *T, overrides Overrides, path *field.Path) field.ErrorList {
	if len(overrides) == 0 {
		return nil
	}
	current, err := json.Marshal(target)
	if err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(current, &obj); err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	typ := reflect.TypeFor[T]()
	ft := fieldsOf(typ)
	var errs field.ErrorList
	for _, ov := range overrides {
		p := path.Child(ov.Key)
		fi, ok := ft.canonical(ov.Key)
		if !ok {
			errs = append(errs, field.Invalid(p, abbreviate(ov.Value), fmt.Sprintf("%s has no such field", typ.Name())))
			continue
		}
		if isNull(ov.Value) {
			delete(obj, fi.name)
			continue
		}
		if err := strictDecode(ov.Value, reflect.New(fi.typ).Interface()); err != nil {
			errs = append(errs, field.Invalid(p, abbreviate(ov.Value), err.Error()))
			continue
		}
		obj[fi.name] = ov.Value
	}
	if len(errs) > 0 {
		return errs
	}
	merged, err := json.Marshal(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	var out T
	if err := strictDecode(merged, &out); err != nil {
		return field.ErrorList{field.InternalError(path, err)}
	}
	*target = out
	return nil
}

// mergeJSON returns base with every top-level member of over set on it
// (Python's dict.update): over's fields win, base's other fields stay.
func mergeJSON[T any](base, over *T) (*T, error) {
	if over == nil {
		return base, nil
	}
	if base == nil {
		return over, nil
	}
	a, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(over)
	if err != nil {
		return nil, err
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(a, &obj); err != nil {
		return nil, err
	}
	upd := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &upd); err != nil {
		return nil, err
	}
	for k, v := range upd {
		obj[k] = v
	}
	merged, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(merged, out); err != nil {
		return nil, err
	}
	return out, nil
}

// dropKeys returns v without the top-level JSON keys given: what a null
// in a dict.update removes.
func dropKeys[T any](v *T, keys []string) (*T, error) {
	if len(keys) == 0 || v == nil {
		return v, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	for _, k := range keys {
		delete(obj, k)
	}
	if b, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	out := new(T)
	return out, json.Unmarshal(b, out)
}
