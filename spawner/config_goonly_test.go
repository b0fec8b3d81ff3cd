package spawner

import (
	"reflect"
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// TestPlanKeepsIDFuncsWithProfiles: a start that applies a profile keeps
// the Config's UIDFunc, GIDFunc, FSGIDFunc and SupplementalGIDsFunc
// (Resolve keeps them; plan does not restore them by hand), for a
// Config built in Go and for a loaded one.
func TestPlanKeepsIDFuncsWithProfiles(t *testing.T) {
	loaded, err := kubespawner.Load([]byte(goOnlyYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  kubespawner.Config
	}{
		{"built in Go", kubespawner.Config{Namespace: "jhub", ProfileList: goOnlyProfiles()}},
		{"loaded", loaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			id := func(n int64) func(naming.Server) *int64 { return func(naming.Server) *int64 { return ptr.To(n) } }
			cfg.UIDFunc, cfg.GIDFunc, cfg.FSGIDFunc = id(1001), id(1002), id(1003)
			cfg.SupplementalGIDsFunc = func(naming.Server) []int64 { return []int64{1004} }
			o, err := Plan(t.Context(), naming.Server{Username: "alice"}, cfg, StartOptions{HubNamespace: "hub"})
			if err != nil {
				t.Fatal(err)
			}
			if o.Pod.Labels["profile"] != "only" {
				t.Fatalf("the profile was not applied: labels %v", o.Pod.Labels)
			}
			csc, psc := o.Pod.Spec.Containers[0].SecurityContext, o.Pod.Spec.SecurityContext
			if csc == nil || psc == nil || !reflect.DeepEqual(csc.RunAsUser, ptr.To[int64](1001)) || !reflect.DeepEqual(csc.RunAsGroup, ptr.To[int64](1002)) ||
				!reflect.DeepEqual(psc.FSGroup, ptr.To[int64](1003)) || !slices.Equal(psc.SupplementalGroups, []int64{1004}) {
				t.Errorf("the pod lacks the ids of the funcs: container %+v, pod %+v", csc, psc)
			}
		})
	}
}

// goOnlyProfiles is the profile list the fields under test are resolved
// with. Its override touches none of them, and shows that Resolve
// rebuilt the Config.
func goOnlyProfiles() []kubespawner.Profile {
	return []kubespawner.Profile{{DisplayName: "Only", KubeSpawnerOverride: map[string]any{"extra_labels": map[string]any{"profile": "only"}}}}
}

const goOnlyYAML = `
namespace: jhub
profile_list:
- display_name: Only
  kubespawner_override:
    extra_labels: {profile: only}
`
