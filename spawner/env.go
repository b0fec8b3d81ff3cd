package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// envDict is an ordered dict with Python's semantics: setting a key that
// exists keeps its position.
type envDict []kubespawner.EnvEntry

func (d *envDict) set(name string, v any) {
	for i := range *d {
		if (*d)[i].Name == name {
			(*d)[i].Value = v
			return
		}
	}
	*d = append(*d, kubespawner.EnvEntry{Name: name, Value: v})
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

// serverEnv is KubeSpawner's get_env: the hub's env; the raw
// environment (JupyterHub's base class); JUPYTER_IMAGE_SPEC and
// JUPYTER_IMAGE; then the expanded environment. A variable set again
// keeps its place, as in a Python dict.
func serverEnv(cfg *kubespawner.Config, r *rendered, opts *StartOptions) envDict {
	var d envDict
	for _, e := range opts.Env {
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
		{"MEM_LIMIT", cfg.Pod.MemLimit, false}, {"MEM_GUARANTEE", cfg.Pod.MemGuarantee, false},
		{"CPU_LIMIT", cfg.Pod.CPULimit, true}, {"CPU_GUARANTEE", cfg.Pod.CPUGuarantee, true},
	} {
		if v.q.IsZero() || slices.ContainsFunc(d, func(e kubespawner.EnvEntry) bool { return e.Name == v.name }) {
			continue
		}
		if v.cpu {
			d.set(v.name, pyFloatString(v.q.AsApproximateFloat64()))
		} else {
			d.set(v.name, strconv.FormatInt(v.q.Value(), 10))
		}
	}
	for _, e := range cfg.EnvironmentEntries() {
		d.set(e.Name, e.Value)
	}
	d.set("JUPYTER_IMAGE_SPEC", cfg.Pod.Image)
	d.set("JUPYTER_IMAGE", cfg.Pod.Image)
	for _, e := range r.environment {
		d.set(e.Name, e.Value)
	}
	return d
}

// envVars turns get_env's dict into the container's variables and their
// dict keys (manifest.PodSpec.EnvKeys): a dict value keeps a name of its
// own, as make_pod names it after its key only when it has none.
func envVars(d envDict) ([]corev1.EnvVar, []string, error) {
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
				return nil, nil, fmt.Errorf("spawner: environment: %s: %w", e.Name, err)
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
		return nil, nil, fmt.Errorf("spawner: environment: %s", strings.Join(bad, "; "))
	}
	return out, keys, nil
}

// moveToSecret turns each variable of env named in names that has a
// value into a reference to that key of the Secret secret, and returns
// the values it took (nil when none): the Secret's data.
func moveToSecret(env []corev1.EnvVar, names []string, secret string) map[string]string {
	var data map[string]string
	for i := range env {
		e := &env[i]
		if e.ValueFrom != nil || e.Value == "" || !slices.Contains(names, e.Name) {
			continue
		}
		if data == nil {
			data = make(map[string]string, len(names))
		}
		data[e.Name] = e.Value
		e.Value = ""
		e.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: e.Name}}
	}
	return data
}

// EnvSecretName is the name of the environment Secret of the pod named
// pod: the pod's name and ".env". A pod name has no dot under the
// default templates, so it never collides with another server's
// internal-SSL Secret (named as the pod).
func EnvSecretName(pod string) string { return pod + ".env" }
