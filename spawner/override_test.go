package spawner

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

const overrideYAML = `
namespace: jhub
image: quay.io/jupyter/base-notebook:1
pod_connect_ip: "{username}.us.example.org"
extra_labels: {team: data, tier: free}
environment: {B: "2", A: "1"}
profile_list:
- display_name: Big
  slug: big
  default: true
  kubespawner_override: {mem_limit: 2G}
- display_name: Custom image
  slug: custom
  kubespawner_override: {image: custom:1}
`

// euOverrides are a cluster's changes to the base configuration.
var euOverrides = map[string]any{
	"pod_connect_ip": "{username}.eu.example.org",
	"image":          "registry.eu.example.org/jupyter/base-notebook:1",
	"extra_labels":   map[string]any{"region": "eu", "tier": nil},
	"environment":    map[string]string{"C": "3"},
}

// Override applies overrides as a profile's kubespawner_override does,
// and the result resolves a profile over them: both are visible, the
// profile winning where both set an option; the profile list and the
// Go-only fields are kept, and the original Config is unchanged.
func TestOverride(t *testing.T) {
	srv := naming.Server{Username: "ada", UserID: 7}
	loaded := mustLoad(t, overrideYAML)
	uid := func(naming.Server) *int64 { return ptr.To[int64](1234) }
	goBuilt := kubespawner.Config{
		Namespace:    "jhub",
		Pod:          manifest.PodSpec{Image: "quay.io/jupyter/base-notebook:1"},
		PodConnectIP: "{username}.us.example.org",
		ExtraLabels:  map[string]string{"team": "data", "tier": "free"},
		Environment:  map[string]string{"A": "1", "B": "2"},
		UIDFunc:      uid,
		ProfileList: []kubespawner.Profile{
			{DisplayName: "Big", Slug: "big", Default: true, KubeSpawnerOverride: map[string]any{"mem_limit": "2G"}},
			{DisplayName: "Custom image", Slug: "custom", KubeSpawnerOverride: map[string]any{"image": "custom:1"}},
		},
	}
	dynamic := goBuilt
	dynamic.ProfileList = nil
	dynamic.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) { return goBuilt.ProfileList, nil }
	for name, base := range map[string]kubespawner.Config{
		"loaded": loaded, "Go-built": goBuilt, "Go-built, defaulted": goBuilt.WithDefaults(), "Go-built with ProfileListFunc": dynamic,
	} {
		t.Run(name, func(t *testing.T) {
			before := base.Resolve // the original's answers, compared after the override
			wantBefore, err := before(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			eu, err := base.Override(euOverrides)
			if err != nil {
				t.Fatal(err)
			}
			if hidden(&eu, "resolved").Bool() {
				t.Error("Override's result is marked resolved")
			}
			if len(eu.ProfileList) != len(base.ProfileList) || (eu.ProfileListFunc == nil) != (base.ProfileListFunc == nil) {
				t.Errorf("the profile list was not kept: %d profiles, func %v", len(eu.ProfileList), eu.ProfileListFunc != nil)
			}
			if (eu.UIDFunc == nil) != (base.UIDFunc == nil) {
				t.Errorf("UIDFunc kept: %v, want %v", eu.UIDFunc != nil, base.UIDFunc != nil)
			}
			if eu.PodConnectIP != "{username}.eu.example.org" || eu.Pod.Image != "registry.eu.example.org/jupyter/base-notebook:1" {
				t.Errorf("overridden: pod_connect_ip %q, image %q", eu.PodConnectIP, eu.Pod.Image)
			}
			if want := map[string]string{"team": "data", "region": "eu"}; !reflect.DeepEqual(eu.ExtraLabels, want) {
				t.Errorf("extra_labels = %v, want %v (a mapping merges, null removes)", eu.ExtraLabels, want)
			}
			for _, tc := range []struct {
				userOptions map[string]string
				image, mem  string
			}{
				{nil, "registry.eu.example.org/jupyter/base-notebook:1", "2147483648"},
				{map[string]string{"profile": "custom"}, "custom:1", "0"},
			} {
				got, err := eu.Resolve(t.Context(), tc.userOptions)
				if err != nil {
					t.Fatalf("%v: %v", tc.userOptions, err)
				}
				if got.PodConnectIP != "{username}.eu.example.org" || got.Pod.Image != tc.image || got.Pod.MemLimit.String() != tc.mem {
					t.Errorf("%v: pod_connect_ip %q, image %q, mem_limit %s; want the override's host, %q, %s",
						tc.userOptions, got.PodConnectIP, got.Pod.Image, &got.Pod.MemLimit, tc.image, tc.mem)
				}
				o, err := Plan(t.Context(), srv, eu, StartOptions{UserOptions: tc.userOptions, HubNamespace: "jhub"})
				if err != nil {
					t.Fatalf("%v: Plan: %v", tc.userOptions, err)
				}
				if o.State.ConnectHost != "ada.eu.example.org" || o.Pod.Spec.Containers[0].Image != tc.image {
					t.Errorf("%v: planned host %q, image %q", tc.userOptions, o.State.ConnectHost, o.Pod.Spec.Containers[0].Image)
				}
				if base.UIDFunc != nil {
					if sc := o.Pod.Spec.Containers[0].SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1234 {
						t.Errorf("%v: UIDFunc lost: %+v", tc.userOptions, sc)
					}
				}
				var env []string
				for _, e := range o.Env {
					if len(e.Name) == 1 {
						env = append(env, e.Name)
					}
				}
				if want := []string{"A", "B", "C"}; name == "loaded" {
					want = []string{"B", "A", "C"} // the loaded order, as a Python dict keeps it
					if !reflect.DeepEqual(env, want) {
						t.Errorf("%v: environment %v, want %v", tc.userOptions, env, want)
					}
				} else if !reflect.DeepEqual(env, want) {
					t.Errorf("%v: environment %v, want %v", tc.userOptions, env, want)
				}
			}
			// The original is unchanged.
			if base.PodConnectIP != "{username}.us.example.org" || base.Pod.Image != "quay.io/jupyter/base-notebook:1" ||
				!reflect.DeepEqual(base.ExtraLabels, map[string]string{"team": "data", "tier": "free"}) {
				t.Errorf("the original changed: %s", configJSON(base))
			}
			gotBefore, err := before(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			gotBefore.UIDFunc, wantBefore.UIDFunc = nil, nil // DeepEqual never equates funcs
			if !reflect.DeepEqual(effective(gotBefore), effective(wantBefore)) {
				t.Errorf("the original resolves differently after Override:%s", configDiff(gotBefore, wantBefore))
			}
		})
	}
}

// An override that is not an option, or a value its option does not
// take, is an error naming the override and the key; a Go value that is
// not JSON too.
func TestOverrideRefusesBadValues(t *testing.T) {
	base := mustLoad(t, overrideYAML)
	for _, tc := range []struct {
		overrides map[string]any
		names     []string
		invalid   bool // a *ConfigError
	}{
		{map[string]any{"port": "eighty"}, []string{`override "port"`, "port"}, false},
		{map[string]any{"port": 70000}, []string{`override "port"`, "port"}, true},
		{map[string]any{"no_such_option": 1}, []string{`override "no_such_option"`}, true},
		{map[string]any{"mem_limit": "lots"}, []string{`override "mem_limit"`, "mem_limit"}, false},
		{map[string]any{"image": ""}, []string{`override "image"`, "image"}, true},
		{map[string]any{"kubernetes_cluster": "Bad_Name"}, []string{`override "kubernetes_cluster"`, "kubernetes_cluster[0]"}, true},
		{map[string]any{"pod_connect_ip": "{nope}.example.org"}, []string{`override "pod_connect_ip"`, "pod_connect_ip"}, true},
		{map[string]any{"extra_labels": map[string]any{"bad key!": "x"}}, []string{`override "extra_labels"`, "extra_labels"}, true},
		{map[string]any{"image": func() {}}, []string{`override "image"`, "not JSON"}, true},
	} {
		_, err := base.Override(tc.overrides)
		if err == nil {
			t.Errorf("%v: accepted", tc.overrides)
			continue
		}
		for _, want := range tc.names {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %v does not name %s", tc.overrides, err, want)
			}
		}
		if tc.invalid && !kubespawner.IsInvalidConfig(err) {
			t.Errorf("%v: %v is not a *ConfigError", tc.overrides, err)
		}
	}
	if base.Pod.Image != "quay.io/jupyter/base-notebook:1" || base.Port != 0 {
		t.Errorf("a refused override changed the original: %s", configJSON(base))
	}
}

// An empty override is the configuration as it was: Plan renders the
// same objects.
func TestOverrideNothing(t *testing.T) {
	base := mustLoad(t, overrideYAML)
	same, err := base.Override(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := naming.Server{Username: "ada"}
	want, err := Plan(t.Context(), srv, base, StartOptions{HubNamespace: "jhub"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Plan(t.Context(), srv, same, StartOptions{HubNamespace: "jhub"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Pod, want.Pod) || !reflect.DeepEqual(got.Env, want.Env) {
		t.Errorf("Override(nil) plans another pod:\n got %+v\nwant %+v", got.Pod, want.Pod)
	}
}
