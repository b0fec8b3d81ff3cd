package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// goBuiltYAML is a configuration that a hub may load, and goBuiltConfig
// the same configuration built in Go. The profiles exercise every merge
// rule: a mapping merging into a mapping option (environment with a
// null, node_selector, container_security_context, a hub option),
// mappings and scalars replacing, defaults that must not leak into a
// merge (common_labels, slow_spawn_message_after), unlisted choices with
// {value} in a plain and in a templated option.
const goBuiltYAML = `
namespace: jhub
image: base:1
cmd: [jupyterhub-singleuser]
cpu_limit: 1
uid: 1000
allow_privilege_escalation: null
node_selector: {disk: ssd}
container_security_context: {runAsNonRoot: true}
environment:
  DROP: soon
  KEEP: "yes"
extra_labels: {team: data}
volumes:
- name: home
  persistentVolumeClaim: {claimName: "claim-{username}"}
volume_mounts:
- name: home
  mountPath: /home/jovyan
storage_pvc_ensure: true
storage_capacity: 10Gi
slow_spawn_message_threshold: 10
default_url: /lab
profile_list:
- display_name: Small
  kubespawner_override:
    mem_limit: 1G
- display_name: Gold
  slug: gold
  kubespawner_override:
    slow_spawn_message_threshold: 60
    common_labels: {tier: gold}
    default_url: /tree
- display_name: "Data Science – GPU"
  default: true
  kubespawner_override:
    cpu_limit: 4
    node_selector: {gpu: "true"}
    environment:
      DROP: null
      GPU: "1"
  profile_options:
    image:
      display_name: Image
      choices:
        torch:
          display_name: PyTorch
          kubespawner_override:
            image: torch:2
        tf:
          display_name: TensorFlow
          kubespawner_override:
            image: tf:2
            container_security_context: {runAsGroup: 100}
      unlisted_choice:
        enabled: true
        display_name: Other image
        validation_regex: "quay.io/jupyter/.+:.+"
        validation_message: "Must be a quay.io/jupyter image with a tag"
        kubespawner_override:
          image: "{value}"
          extra_annotations: {image: "{value}"}
    mem:
      display_name: Memory
      choices:
        s:
          display_name: Small
          kubespawner_override:
            mem_limit: 2G
        l:
          display_name: Large
          default: true
          kubespawner_override:
            mem_limit: 8G
      unlisted_choice:
        enabled: true
        kubespawner_override:
          mem_limit: "{value}"
    gpus:
      display_name: GPUs
      choices:
        one:
          display_name: One
          kubespawner_override:
            extra_resource_limits: {nvidia.com/gpu: "1"}
        two:
          display_name: Two
          kubespawner_override:
            extra_resource_limits: {nvidia.com/gpu: "2"}
`

// goBuiltProfiles is goBuiltYAML's profile_list as a Go hub writes it:
// with Go's own map, slice and number types in the overrides.
func goBuiltProfiles() []kubespawner.Profile {
	return []kubespawner.Profile{
		{DisplayName: "Small", KubeSpawnerOverride: map[string]any{"mem_limit": "1G"}},
		{DisplayName: "Gold", Slug: "gold", KubeSpawnerOverride: map[string]any{
			"slow_spawn_message_threshold": 60,
			"common_labels":                map[string]string{"tier": "gold"},
			"default_url":                  "/tree",
		}},
		{DisplayName: "Data Science – GPU", Default: true,
			KubeSpawnerOverride: map[string]any{
				"cpu_limit":     4,
				"node_selector": map[string]string{"gpu": "true"},
				"environment":   map[string]any{"DROP": nil, "GPU": "1"},
			},
			ProfileOptions: kubespawner.OrderedOptions{
				{Name: "image", ProfileOption: kubespawner.ProfileOption{DisplayName: "Image",
					Choices: kubespawner.OrderedChoices{
						{Key: "torch", Choice: kubespawner.Choice{DisplayName: "PyTorch", KubeSpawnerOverride: map[string]any{"image": "torch:2"}}},
						{Key: "tf", Choice: kubespawner.Choice{DisplayName: "TensorFlow", KubeSpawnerOverride: map[string]any{
							"image": "tf:2", "container_security_context": map[string]int{"runAsGroup": 100}}}},
					},
					UnlistedChoice: &kubespawner.UnlistedChoice{Enabled: true, DisplayName: "Other image",
						ValidationRegex:     "quay.io/jupyter/.+:.+",
						ValidationMessage:   "Must be a quay.io/jupyter image with a tag",
						KubeSpawnerOverride: map[string]any{"image": "{value}", "extra_annotations": map[string]string{"image": "{value}"}}},
				}},
				{Name: "mem", ProfileOption: kubespawner.ProfileOption{DisplayName: "Memory",
					Choices: kubespawner.OrderedChoices{
						{Key: "s", Choice: kubespawner.Choice{DisplayName: "Small", KubeSpawnerOverride: map[string]any{"mem_limit": "2G"}}},
						{Key: "l", Choice: kubespawner.Choice{DisplayName: "Large", Default: true, KubeSpawnerOverride: map[string]any{"mem_limit": "8G"}}},
					},
					UnlistedChoice: &kubespawner.UnlistedChoice{Enabled: true, KubeSpawnerOverride: map[string]any{"mem_limit": "{value}"}},
				}},
				{Name: "gpus", ProfileOption: kubespawner.ProfileOption{DisplayName: "GPUs",
					Choices: kubespawner.OrderedChoices{
						{Key: "one", Choice: kubespawner.Choice{DisplayName: "One", KubeSpawnerOverride: map[string]any{
							"extra_resource_limits": map[string]string{"nvidia.com/gpu": "1"}}}},
						{Key: "two", Choice: kubespawner.Choice{DisplayName: "Two", KubeSpawnerOverride: map[string]any{
							"extra_resource_limits": map[string]string{"nvidia.com/gpu": "2"}}}},
					},
				}},
			}},
	}
}

// goBuiltConfig is goBuiltYAML built in Go, with profiles for its
// profile list (static or from ProfileListFunc).
func goBuiltConfig(ns string, profiles []kubespawner.Profile, dynamic bool) kubespawner.Config {
	c := kubespawner.Config{
		Namespace: ns,
		Pod: manifest.PodSpec{
			Image:                    "base:1",
			CPULimit:                 resource.MustParse("1"),
			UID:                      ptr.To[int64](1000),
			AllowPrivilegeEscalation: manifest.EscalationUnset,
			NodeSelector:             map[string]string{"disk": "ssd"},
			ContainerSecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
			Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-{username}"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}},
		},
		Cmd:                       []string{"jupyterhub-singleuser"},
		Environment:               map[string]string{"DROP": "soon", "KEEP": "yes"},
		ExtraLabels:               map[string]string{"team": "data"},
		StoragePVCEnsure:          true,
		StorageCapacity:           resource.MustParse("10Gi"),
		SlowSpawnMessageThreshold: 10,
		HubOptions:                map[string]json.RawMessage{"default_url": json.RawMessage(`"/lab"`)},
	}
	if dynamic {
		c.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) { return profiles, nil }
	} else {
		c.ProfileList = profiles
	}
	return c
}

// goBuiltWays are the ways a hub builds the same Config: the first, the
// loaded one, is what the others must equal.
func goBuiltWays(t *testing.T, ns string) []struct {
	name string
	cfg  kubespawner.Config
} {
	t.Helper()
	loaded, err := kubespawner.Load([]byte(strings.Replace(goBuiltYAML, "namespace: jhub", "namespace: "+ns, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name string
		cfg  kubespawner.Config
	}{
		{"kubespawner.Load", loaded},
		{"Go literal with ProfileList", goBuiltConfig(ns, goBuiltProfiles(), false)},
		{"Go literal with ProfileListFunc", goBuiltConfig(ns, goBuiltProfiles(), true)},
		{"Go literal with ProfileListFunc of the loaded profiles", goBuiltConfig(ns, loaded.ProfileList, true)},
	}
}

// goBuiltOptions are user options that resolve, and goBuiltBadOptions
// user options that do not.
var (
	goBuiltOptions = []map[string]string{
		nil,
		{"profile": "data-science-gpu", "image": "tf", "mem": "s", "gpus": "two"},
		{"image--unlisted-choice": "quay.io/jupyter/r-notebook:2024", "mem--unlisted-choice": "3G"},
		{"image--unlisted-choice": "quay.io/jupyter/{odd}:1"}, // escaped in extra_annotations
		{"profile": "small"},
		{"profile": "gold"},
	}
	goBuiltBadOptions = []map[string]string{
		{"profile": "huge"},
		{"image": "jax"},
		{"image--unlisted-choice": "docker.io/evil:latest"},
		{"gpus--unlisted-choice": "8"},
		{"mem--unlisted-choice": "lots"},
		{"mem--unlisted-choice": "-1G"},
	}
)

// effective is c without what two equal configurations may differ in:
// the hidden option values (compared through what they resolve to) and
// the funcs (reflect.DeepEqual never equates two non-nil funcs).
func effective(c kubespawner.Config) kubespawner.Config {
	hidden(&c, "source").SetZero()
	c.ProfileListFunc = nil
	return c
}

// configJSON shows c, for a failure message.
func configJSON(c kubespawner.Config) string {
	data, _ := json.Marshal(struct {
		kubespawner.Config
		Pod         manifest.PodSpec
		HubOptions  map[string]json.RawMessage
		Environment []kubespawner.EnvEntry
		Warnings    []string
	}{c, c.Pod, c.HubOptions, hidden(&c, "environment").Interface().([]kubespawner.EnvEntry), c.Warnings()})
	return string(data)
}

// configDiff shows got and want, for a failure message.
func configDiff(got, want kubespawner.Config) string {
	return "\n got: " + configJSON(got) + "\nwant: " + configJSON(want)
}

// TestResolveGoBuiltConfig: a Config built in Go, with ProfileList or
// ProfileListFunc, resolves every user option to the same effective
// Config as the loaded equivalent YAML, and refuses bad user options with
// the same error.
func TestResolveGoBuiltConfig(t *testing.T) {
	ways := goBuiltWays(t, "jhub")
	want := ways[0].cfg
	for _, way := range ways[1:] {
		t.Run(way.name, func(t *testing.T) {
			for _, opts := range goBuiltOptions {
				got, err := way.cfg.Resolve(t.Context(), opts)
				if err != nil {
					t.Fatalf("%v: %v", opts, err)
				}
				ref, err := want.Resolve(t.Context(), opts)
				if err != nil {
					t.Fatalf("%v: the loaded config: %v", opts, err)
				}
				if !reflect.DeepEqual(effective(got), effective(ref)) {
					t.Errorf("%v: the effective configs differ:%s", opts, configDiff(got, ref))
				}
				if (got.ProfileListFunc == nil) != (way.cfg.ProfileListFunc == nil) {
					t.Errorf("%v: ProfileListFunc kept: %v, want %v", opts, got.ProfileListFunc != nil, way.cfg.ProfileListFunc != nil)
				}
			}
			for _, opts := range goBuiltBadOptions {
				_, err := way.cfg.Resolve(t.Context(), opts)
				_, wantErr := want.Resolve(t.Context(), opts)
				if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
					t.Errorf("%v: err = %v\nwant the loaded config's %v", opts, err, wantErr)
					continue
				}
				var pe, wantPE *kubespawner.ProfileError
				if errors.As(err, &pe) != errors.As(wantErr, &wantPE) ||
					pe != nil && (pe.Profile != wantPE.Profile || pe.Option != wantPE.Option || pe.Choice != wantPE.Choice) {
					t.Errorf("%v: ProfileError %+v, want %+v", opts, pe, wantPE)
				}
				if kubespawner.IsInvalidConfig(err) != kubespawner.IsInvalidConfig(wantErr) {
					t.Errorf("%v: IsInvalidConfig = %v, want %v", opts, kubespawner.IsInvalidConfig(err), kubespawner.IsInvalidConfig(wantErr))
				}
			}
		})
	}
	// The merges worked from the Go values: a spot check of what the
	// loaded config gives, so equal results are not equally wrong.
	got, err := ways[1].cfg.Resolve(t.Context(), map[string]string{"image": "tf", "image--unlisted-choice": ""})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pod.NodeSelector["disk"] != "ssd" || got.Pod.NodeSelector["gpu"] != "true" ||
		got.Environment["KEEP"] != "yes" || got.Environment["GPU"] != "1" || got.Environment["DROP"] != "" ||
		got.Pod.ContainerSecurityContext == nil || got.Pod.ContainerSecurityContext.RunAsNonRoot == nil ||
		got.Pod.ContainerSecurityContext.RunAsGroup == nil || *got.Pod.ContainerSecurityContext.RunAsGroup != 100 ||
		got.Pod.Image != "tf:2" || got.Pod.CPULimit.String() != "4" || got.Pod.AllowPrivilegeEscalation != manifest.EscalationUnset ||
		string(got.HubOptions["default_url"]) != `"/lab"` {
		t.Errorf("the merge lost a base option or an override: %s", configJSON(got))
	}
	const image = "quay.io/jupyter/r-notebook:2024"
	if got, err = ways[1].cfg.Resolve(t.Context(), map[string]string{"image--unlisted-choice": image}); err != nil {
		t.Fatal(err)
	}
	if got.Pod.Image != image || got.ExtraAnnotations["image"] != image {
		t.Errorf("unlisted {value} in a Go map: image %q, extra_annotations %v; want %q in both", got.Pod.Image, got.ExtraAnnotations, image)
	}
}

// TestPlanGoBuiltConfig: spawner.Plan renders the same objects from a
// Config built in Go with profiles as from the loaded equivalent, with
// KubeSpawner's defaults applied after the merge: a profile's
// slow_spawn_message_threshold still sets the slow message's delay, and
// its common_labels replace the defaults, as they do for the loaded
// Config.
func TestPlanGoBuiltConfig(t *testing.T) {
	server := naming.Server{Username: "Alice@example.com", Servername: "lab"}
	ways := goBuiltWays(t, "jhub")
	plan := func(t *testing.T, cfg kubespawner.Config, opts map[string]string) *Objects {
		t.Helper()
		o, err := Plan(t.Context(), server, cfg, StartOptions{UserOptions: opts, HubNamespace: "hub"})
		if err != nil {
			t.Fatalf("%v: %v", opts, err)
		}
		return o
	}
	for _, way := range ways[1:] {
		t.Run(way.name, func(t *testing.T) {
			for _, opts := range goBuiltOptions {
				got, want := plan(t, way.cfg, opts), plan(t, ways[0].cfg, opts)
				if !reflect.DeepEqual(effective(got.Config()), effective(want.Config())) {
					t.Errorf("%v: the effective configs differ:%s", opts, configDiff(got.Config(), want.Config()))
				}
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(want)
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("%v: objects\n got %s\nwant %s", opts, gotJSON, wantJSON)
				}
			}
			for _, opts := range goBuiltBadOptions {
				_, err := Plan(t.Context(), server, way.cfg, StartOptions{UserOptions: opts, HubNamespace: "hub"})
				_, wantErr := Plan(t.Context(), server, ways[0].cfg, StartOptions{UserOptions: opts, HubNamespace: "hub"})
				if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
					t.Errorf("%v: err = %v\nwant the loaded config's %v", opts, err, wantErr)
				}
			}
		})
	}
	gold := plan(t, ways[1].cfg, map[string]string{"profile": "gold"})
	if c := gold.Config(); c.SlowSpawnMessageAfter != 60 || !reflect.DeepEqual(c.CommonLabels, map[string]string{"tier": "gold"}) {
		t.Errorf("gold profile: slow_spawn_message_after %v, common_labels %v; want 60 and the profile's only", c.SlowSpawnMessageAfter, c.CommonLabels)
	}
	if got := gold.Pod.Labels["tier"]; got != "gold" {
		t.Errorf("gold pod labels %v lack the profile's common label", gold.Pod.Labels)
	}
}

// TestGoBuiltConfigRefusedAtPlan: what cannot become the options a
// profile merges into is refused by Plan (and New, which validates the
// same way), naming the field, instead of failing the first start.
func TestGoBuiltConfigRefusedAtPlan(t *testing.T) {
	server := naming.Server{Username: "alice"}
	for _, tc := range []struct {
		name string
		edit func(c *kubespawner.Config)
		key  string
		// options choose the profile or choice edited, for Resolve.
		options map[string]string
	}{
		{"a hub option that is not JSON", func(c *kubespawner.Config) { c.HubOptions["default_url"] = json.RawMessage(`/lab`) }, "default_url", nil},
		{"a HubOptions entry that is no hub option", func(c *kubespawner.Config) { c.HubOptions["image"] = json.RawMessage(`"x:1"`) }, "image", nil},
		{"an extra_pod_config value that is not JSON", func(c *kubespawner.Config) {
			c.Pod.ExtraPodConfig = manifest.Overrides{{Key: "dnsPolicy", Value: json.RawMessage(`Default`)}}
		}, "extra_pod_config", nil},
		{"a profile override that is not JSON", func(c *kubespawner.Config) {
			c.ProfileList[0].KubeSpawnerOverride = map[string]any{"port": func() {}}
		}, "profile_list[small].kubespawner_override", map[string]string{"profile": "small"}},
		{"a choice's override that is not JSON", func(c *kubespawner.Config) {
			c.ProfileList[2].ProfileOptions[1].Choices[0].KubeSpawnerOverride = map[string]any{"mem_limit": make(chan int)}
		}, "profile_list[data-science-gpu].profile_options[mem].choices[s].kubespawner_override", map[string]string{"mem": "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goBuiltConfig("jhub", goBuiltProfiles(), false)
			tc.edit(&cfg)
			_, err := Plan(t.Context(), server, cfg, StartOptions{HubNamespace: "hub"})
			var ce *kubespawner.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(strings.Join(ce.Keys(), " "), tc.key) {
				t.Fatalf("err = %v, want a ConfigError naming %s", err, tc.key)
			}
			// A hub that resolves without New or Plan gets an error too
			// (a ProfileListFunc's list is known only then).
			if _, err := cfg.Resolve(t.Context(), tc.options); err == nil {
				t.Errorf("Resolve accepted it")
			}
		})
	}
}

// TestSpawnerGoBuiltConfig: New accepts a Config built in Go with
// profiles, Spawner.Plan renders what the loaded equivalent renders, and
// Start starts it, with the profile's options and the Go-only UIDFunc.
func TestSpawnerGoBuiltConfig(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ways := goBuiltWays(t, ns)
	server := naming.Server{Username: "gobuilt"}
	opts := map[string]string{"profile": "data-science-gpu", "image": "tf", "mem": "s", "gpus": "two"}
	ctx := ctxTimeout(t, 60*time.Second)
	want, err := newSpawner(t, server, ways[0].cfg).Plan(ctx, StartOptions{UserOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	for _, way := range ways[1:] {
		got, err := newSpawner(t, server, way.cfg).Plan(ctx, StartOptions{UserOptions: opts})
		if err != nil {
			t.Fatalf("%s: %v", way.name, err)
		}
		if !reflect.DeepEqual(effective(got.Config()), effective(want.Config())) {
			t.Errorf("%s: the effective configs differ:%s", way.name, configDiff(got.Config(), want.Config()))
		}
		gotSpec, _ := json.Marshal(got.Pod.Spec)
		wantSpec, _ := json.Marshal(want.Pod.Spec)
		if string(gotSpec) != string(wantSpec) {
			t.Errorf("%s: pod spec\n got %s\nwant %s", way.name, gotSpec, wantSpec)
		}
	}

	cfg := goBuiltConfig(ns, goBuiltProfiles(), true)
	cfg.Pod.Image = "quay.io/jupyter/base-notebook:2024-01-01"
	cfg.Pod.NodeSelector = nil // no node of the test cluster has disk=ssd
	cfg.UIDFunc = func(naming.Server) *int64 { return ptr.To[int64](4242) }
	s := newSpawner(t, naming.Server{Username: "gobuilt-start"}, cfg)
	start := hubStart()
	start.UserOptions = map[string]string{"profile": "small"}
	if _, err := s.Start(ctx, start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background(), StopOptions{Now: true}) })
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	keep := false
	for _, e := range c.Env {
		keep = keep || e.Name == "KEEP" && e.Value == "yes"
	}
	if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 4242 ||
		c.Resources.Limits.Memory().Value() != 1<<30 || !keep {
		t.Errorf("the pod lacks UIDFunc's uid, the small profile's memory (1G: 2^30 bytes) or the base environment: %+v", pod.Spec)
	}
}
