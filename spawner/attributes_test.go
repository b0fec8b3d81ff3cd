package spawner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// TestHubAttributesReachTheContainer: the resource attributes a hub sets
// on its Spawner before a start (JupyterHub 5.3's apply_user_options, a
// pre_spawn_hook) become the notebook container's resources, over the
// configuration and under the chosen profile's overrides, as KubeSpawner
// reads them; unknown keys and values the option refuses are errors
// naming them.
func TestHubAttributesReachTheContainer(t *testing.T) {
	base := `namespace: jhub
mem_limit: 2G
cpu_limit: 1
`
	withProfiles := base + `profile_list:
- display_name: Small
  slug: small
  default: true
- display_name: Big
  slug: big
  kubespawner_override: {mem_limit: 16G}
`
	attrs := map[string]any{"mem_limit": "4G", "cpu_guarantee": 0.5}
	for _, c := range []struct {
		name, yaml string
		options    map[string]string
		memLimit   string
	}{
		{"no profiles", base, nil, "4Gi"}, // JupyterHub's G is 2^30
		{"default profile", withProfiles, nil, "4Gi"},
		{"a profile's override wins", withProfiles, map[string]string{"profile": "big"}, "16Gi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := kubespawner.Load([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			o, err := Plan(t.Context(), naming.Server{Username: "ada"}, cfg, StartOptions{UserOptions: c.options, Attributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			r := o.Pod.Spec.Containers[0].Resources
			if q := r.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse(c.memLimit)) != 0 {
				t.Errorf("memory limit %s, want %s", q.String(), c.memLimit)
			}
			if q := r.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("500m")) != 0 {
				t.Errorf("cpu request %s, want 500m", q.String())
			}
			if q := r.Limits[corev1.ResourceCPU]; q.Cmp(resource.MustParse("1")) != 0 {
				t.Errorf("cpu limit %s, want the configuration's 1", q.String())
			}
		})
	}
	cfg, err := kubespawner.Load([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		attrs map[string]any
		want  string
	}{
		{map[string]any{"image": "evil:latest"}, "attributes[image]"},
		{map[string]any{"mem_limit": "lots"}, "mem_limit"},
	} {
		if _, err := Plan(t.Context(), naming.Server{Username: "ada"}, cfg, StartOptions{Attributes: bad.attrs}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("attributes %v: %v, want an error naming %s", bad.attrs, err, bad.want)
		}
	}
}
