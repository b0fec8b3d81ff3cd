package jupyterhub_test

import (
	"os"
	"testing"

	"github.com/spawnkit/spawnkit/kubespawner"
)

// TestServiceConfigs loads the example and the test's service
// configuration as the spawner-service does: KubeSpawner's option names,
// no unknown keys.
func TestServiceConfigs(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		profiles   int
	}{
		{"example", "spawner-service.yaml", 2},
		{"test", "testdata/spawner-service.yaml", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := kubespawner.Load(data)
			if err != nil {
				t.Fatalf("%s: %v", tc.file, err)
			}
			if len(cfg.ProfileList) != tc.profiles {
				t.Errorf("%s has %d profiles, want %d", tc.file, len(cfg.ProfileList), tc.profiles)
			}
		})
	}
}
