package kubespawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// envDict is an ordered dict with Python's semantics: setting a key that
// exists keeps its position.
type envDict []EnvEntry

func (d *envDict) set(name string, v any) {
	for i := range *d {
		if (*d)[i].Name == name {
			(*d)[i].Value = v
			return
		}
	}
	*d = append(*d, EnvEntry{Name: name, Value: v})
}

// pyFloatString formats f as Python's str(float).
func pyFloatString(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if strings.Contains(s, "e") {
		// Python: 1e-05, Go: 1e-05; Python 1e+16, Go 1e+16.
		return s
	}
	return s
}

// Env is KubeSpawner's get_env for a server: hubEnv (the env the hub
// passes); the limits the hub did not pass; the raw environment
// (JupyterHub's base class); JUPYTER_IMAGE_SPEC and JUPYTER_IMAGE; then
// expanded, the environment rendered for the server. A variable set again keeps its
// place, as in a Python dict.
func (c *Config) Env(hubEnv []corev1.EnvVar, expanded []EnvEntry) []EnvEntry {
	var d envDict
	for _, e := range hubEnv {
		if e.ValueFrom != nil {
			var m map[string]any
			b, _ := json.Marshal(e)
			_ = json.Unmarshal(b, &m)
			delete(m, "name")
			d.set(e.Name, m)
			continue
		}
		d.set(e.Name, e.Value)
	}
	// JupyterHub's get_env adds MEM_LIMIT, MEM_GUARANTEE, CPU_LIMIT and
	// CPU_GUARANTEE from the Spawner's limits. A hub that did not (a Go
	// hub, or a JupyterHub whose limits live in this configuration) gets
	// them from here, in JupyterHub's format (integer bytes, Python
	// floats); the hub's own values win.
	for _, v := range []struct {
		name string
		q    resource.Quantity
		cpu  bool
	}{
		{"MEM_LIMIT", c.Pod.MemLimit, false}, {"MEM_GUARANTEE", c.Pod.MemGuarantee, false},
		{"CPU_LIMIT", c.Pod.CPULimit, true}, {"CPU_GUARANTEE", c.Pod.CPUGuarantee, true},
	} {
		if v.q.IsZero() || slices.ContainsFunc(d, func(e EnvEntry) bool { return e.Name == v.name }) {
			continue
		}
		if v.cpu {
			d.set(v.name, pyFloatString(v.q.AsApproximateFloat64()))
		} else {
			d.set(v.name, strconv.FormatInt(v.q.Value(), 10))
		}
	}
	for _, e := range c.EnvironmentEntries() {
		d.set(e.Name, e.Value)
	}
	d.set("JUPYTER_IMAGE_SPEC", c.Pod.Image)
	d.set("JUPYTER_IMAGE", c.Pod.Image)
	for _, e := range expanded {
		d.set(e.Name, e.Value)
	}
	return d
}

// EnvVars turns get_env's entries (Config.Env) into the container's
// variables and their dict keys (manifest.PodSpec.EnvKeys), as make_pod
// does: a dict value keeps a name of its own, as make_pod names it after
// its key only when it has none; a value that is neither a string, null
// nor a dict is an error naming the variable.
func EnvVars(d []EnvEntry) ([]corev1.EnvVar, []string, error) {
	out := make([]corev1.EnvVar, 0, len(d))
	keys := make([]string, 0, len(d))
	var bad []string
	for _, e := range d {
		switch v := e.Value.(type) {
		case string:
			out = append(out, corev1.EnvVar{Name: e.Name, Value: v})
		case nil:
			out = append(out, corev1.EnvVar{Name: e.Name})
		case map[string]any:
			b, _ := json.Marshal(v)
			var ev corev1.EnvVar
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ev); err != nil {
				return nil, nil, fmt.Errorf("kubespawner: environment: %s: %w", e.Name, err)
			}
			if ev.Name == "" {
				ev.Name = e.Name
			}
			out = append(out, ev)
		default:
			bad = append(bad, fmt.Sprintf("%s: value %v is not a string; quote it (Kubernetes env values are strings)", e.Name, v))
			continue
		}
		keys = append(keys, e.Name)
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("kubespawner: environment: %s", strings.Join(bad, "; "))
	}
	return out, keys, nil
}
