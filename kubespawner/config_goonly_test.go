package kubespawner

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/manifest"
)

// goOnlyProfiles is the profile list the fields under test are resolved
// with. Its override touches none of them, and shows that Resolve
// rebuilt the Config.
func goOnlyProfiles() []Profile {
	return []Profile{{DisplayName: "Only", KubeSpawnerOverride: map[string]any{"extra_labels": map[string]any{"profile": "only"}}}}
}

const goOnlyYAML = `
namespace: jhub
profile_list:
- display_name: Only
  kubespawner_override:
    extra_labels: {profile: only}
`

// derivedState are Config's unexported fields: state Load derives
// from the options, which Resolve's result has of its own. keepGoOnly
// copies exported fields only, so a new unexported field fails
// TestResolveKeepsGoOnlyFields until it is decided here whether Resolve
// derives it again or must keep it.
var derivedState = []string{"source", "warnings", "environment", "resolved"}

// goOnlySamples are non-zero values, valid in a configuration, for the
// types that sampleValue cannot make from their kind; goOnlySamplesAt
// are those for a field whose type's sample does not fit it.
var (
	goOnlySamples = map[reflect.Type]any{
		reflect.TypeFor[map[string]json.RawMessage](): map[string]json.RawMessage{"default_url": json.RawMessage(`"/lab"`)},
		reflect.TypeFor[corev1.PullPolicy]():          corev1.PullIfNotPresent,
		reflect.TypeFor[resource.Quantity]():          resource.MustParse("1"),
		reflect.TypeFor[corev1.SecurityContext]():     corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		reflect.TypeFor[corev1.PodSecurityContext]():  corev1.PodSecurityContext{FSGroup: ptr.To[int64](100)},
		reflect.TypeFor[corev1.Lifecycle](): corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		reflect.TypeFor[corev1.EnvVar]():      corev1.EnvVar{Name: "SAMPLE", Value: "1"},
		reflect.TypeFor[corev1.Volume]():      corev1.Volume{Name: "sample", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		reflect.TypeFor[corev1.VolumeMount](): corev1.VolumeMount{Name: "sample", MountPath: "/sample"},
		reflect.TypeFor[corev1.Container]():   corev1.Container{Name: "sample", Image: "busybox:1"},
		reflect.TypeFor[corev1.Toleration](): corev1.Toleration{Key: "sample", Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoSchedule},
		reflect.TypeFor[corev1.PreferredSchedulingTerm](): corev1.PreferredSchedulingTerm{Weight: 1, Preference: sampleNodeTerm},
		reflect.TypeFor[corev1.NodeSelectorTerm]():        sampleNodeTerm,
		reflect.TypeFor[corev1.PodAffinityTerm]():         samplePodTerm,
		reflect.TypeFor[corev1.WeightedPodAffinityTerm](): corev1.WeightedPodAffinityTerm{Weight: 1, PodAffinityTerm: samplePodTerm},
	}
	goOnlySamplesAt = map[string]any{
		"Pod.ExtraContainerConfig": manifest.Overrides{{Key: "stdin", Value: json.RawMessage(`true`)}},
		"Pod.ExtraPodConfig":       manifest.Overrides{{Key: "dnsPolicy", Value: json.RawMessage(`"Default"`)}},
	}
	sampleNodeTerm = corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "sample", Operator: corev1.NodeSelectorOpExists}}}
	samplePodTerm = corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sample"}}}
)

// sampleValue is a non-zero value of typ: from goOnlySamples, or made
// from its kind.
func sampleValue(typ reflect.Type) (reflect.Value, bool) {
	if s, ok := goOnlySamples[typ]; ok {
		return reflect.ValueOf(s), true
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("sample")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Pointer:
		e, ok := sampleValue(typ.Elem())
		if !ok {
			return v, false
		}
		p := reflect.New(typ.Elem())
		p.Elem().Set(e)
		v.Set(p)
	case reflect.Slice:
		e, ok := sampleValue(typ.Elem())
		if !ok {
			return v, false
		}
		v.Set(reflect.Append(reflect.MakeSlice(typ, 0, 1), e))
	case reflect.Map:
		k, okKey := sampleValue(typ.Key())
		e, okElem := sampleValue(typ.Elem())
		if !okKey || !okElem {
			return v, false
		}
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(k, e)
	default:
		return v, false
	}
	return v, true
}

// jsonLessField is a field that Config's JSON form does not hold: tagged
// json:"-", or a field of a struct of spawnkit's so tagged (Pod).
type jsonLessField struct {
	path  string // "UIDFunc", "Pod.RestrictedSecurity"
	index []int
	typ   reflect.Type
	// carried is whether the option dictionary carries it under keys of
	// its own (the hub's options, the make_pod options): a value set on
	// a loaded Config after Load is not among its options.
	carried bool
}

func jsonLessFields() []jsonLessField {
	makePod := map[string]bool{}
	for _, k := range podOptionKeys {
		makePod[strings.ReplaceAll(k, "_", "")] = true
	}
	var out []jsonLessField
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if !f.IsExported() || f.Tag.Get("json") != "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && strings.HasPrefix(f.Type.PkgPath(), "github.com/spawnkit/spawnkit") {
			for j := range f.Type.NumField() {
				sf := f.Type.Field(j)
				out = append(out, jsonLessField{path: f.Name + "." + sf.Name, index: []int{i, j}, typ: sf.Type,
					carried: makePod[strings.ToLower(sf.Name)]})
			}
			continue
		}
		out = append(out, jsonLessField{path: f.Name, index: []int{i}, typ: f.Type, carried: f.Name == "HubOptions"})
	}
	return out
}

// TestResolveKeepsGoOnlyFields sets every field of Config that its JSON
// does not hold (tagged json:"-", and the fields of Pod) to a non-zero
// value, resolves a profile, and checks that each survives: on a Config
// built in Go, all of them (kept by keepGoOnly, or carried by the options
// typedOptions makes); on a loaded Config, those the loaded options do
// not carry. A field added with json:"-" is set and checked here without
// a change, so Resolve cannot drop it silently.
func TestResolveKeepsGoOnlyFields(t *testing.T) {
	rt := reflect.TypeFor[Config]()
	var unexported []string
	for i := range rt.NumField() {
		if !rt.Field(i).IsExported() {
			unexported = append(unexported, rt.Field(i).Name)
		}
	}
	if !slices.Equal(unexported, derivedState) {
		t.Errorf("Config's unexported fields are %v, derivedState %v: decide whether Resolve derives or keeps the new one", unexported, derivedState)
	}

	for _, tc := range []struct {
		name string
		base func(t *testing.T) Config
	}{
		{"built in Go", func(*testing.T) Config { return Config{Namespace: "jhub", ProfileList: goOnlyProfiles()} }},
		{"loaded", func(t *testing.T) Config {
			c, err := Load([]byte(goOnlyYAML))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.base(t)
			loaded := cfg.source != nil
			v := reflect.ValueOf(&cfg).Elem()
			called := map[string]bool{}
			var checked []jsonLessField
			for _, f := range jsonLessFields() {
				if loaded && f.carried {
					continue
				}
				var sample reflect.Value
				if f.typ.Kind() == reflect.Func {
					sample = marker(f.typ, called, f.path)
				} else if s, ok := goOnlySamplesAt[f.path]; ok {
					sample = reflect.ValueOf(s)
				} else if s, ok := sampleValue(f.typ); ok {
					sample = s
				} else {
					t.Fatalf("no sample value for %s (%s): add one to goOnlySamples", f.path, f.typ)
				}
				if sample.IsZero() {
					t.Fatalf("the sample for %s is its zero value", f.path)
				}
				v.FieldByIndex(f.index).Set(sample)
				checked = append(checked, f)
			}
			got, err := cfg.Resolve(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.ExtraLabels["profile"] != "only" {
				t.Fatalf("Resolve did not apply the profile: extra_labels %v", got.ExtraLabels)
			}
			clear(called) // Resolve called ProfileListFunc
			gv := reflect.ValueOf(&got).Elem()
			for _, f := range checked {
				g, want := gv.FieldByIndex(f.index), v.FieldByIndex(f.index)
				if f.typ.Kind() == reflect.Func {
					if g.IsNil() {
						t.Errorf("%s was dropped", f.path)
						continue
					}
					args := make([]reflect.Value, f.typ.NumIn())
					for i := range args {
						args[i] = reflect.Zero(f.typ.In(i))
					}
					g.Call(args)
					if !called[f.path] {
						t.Errorf("%s is not the func that was set", f.path)
					}
					continue
				}
				gotJSON, _ := json.Marshal(g.Interface())
				wantJSON, _ := json.Marshal(want.Interface())
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("%s = %s, want %s", f.path, gotJSON, wantJSON)
				}
			}
			t.Logf("%d fields checked", len(checked))
		})
	}
}

// marker is a func of type ft that records its call in called[path].
// Its results are zero, but for a profile list, which is goOnlyProfiles,
// so that ProfileListFunc gives Resolve a profile to apply.
func marker(ft reflect.Type, called map[string]bool, path string) reflect.Value {
	return reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
		called[path] = true
		out := make([]reflect.Value, ft.NumOut())
		for i := range out {
			if ft.Out(i) == reflect.TypeFor[[]Profile]() {
				out[i] = reflect.ValueOf(goOnlyProfiles())
			} else {
				out[i] = reflect.Zero(ft.Out(i))
			}
		}
		return out
	})
}
