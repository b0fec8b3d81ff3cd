package spawner

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
)

// vectorCase returns a case of the config vectors by name.
func vectorCase(t *testing.T, name string) configCase {
	t.Helper()
	data, err := os.ReadFile("testdata/config-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []configCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		if c.Name == name && c.Expected != nil {
			return c
		}
	}
	t.Fatalf("no config vector %q", name)
	return configCase{}
}

// TestPVCHandleLegacyNames: a claim KubeSpawner made under its pre-7
// (escape scheme) name is used instead of a new claim under today's
// name, and recorded in State.PVCName; with handle_legacy_names false a
// new claim is created.
func TestPVCHandleLegacyNames(t *testing.T) {
	c := vectorCase(t, "storage_full")
	srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
	for _, tc := range []struct {
		name   string
		handle *bool
		legacy bool
		// planned starts with the rendering done ahead, as
		// Manager.Spawn does: the old claim must be found all the same.
		planned bool
	}{
		{"default", nil, true, false},
		{"disabled", new(bool), false, false},
		{"rendered ahead by the Manager", nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			cfg := baseConfig(ns)
			cfg.StoragePVCEnsure = true
			cfg.StorageCapacity = resource.MustParse("1Gi")
			cfg.HandleLegacyNames = tc.handle
			s := newSpawner(t, srv, cfg)
			if s.names.LegacyPVC == s.names.PVC {
				t.Fatalf("legacy and current claim names are both %q", s.names.PVC)
			}
			var claim corev1.PersistentVolumeClaim
			if err := json.Unmarshal(c.Expected.PVC, &claim); err != nil {
				t.Fatal(err)
			}
			claim.Name, claim.Namespace = s.names.LegacyPVC, ns
			ctx := ctxTimeout(t, 60*time.Second)
			if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &claim, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			opts := hubStart()
			if tc.planned {
				objs, err := s.Plan(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				opts.Plan = objs
			}
			if _, err := s.Start(ctx, opts); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Stop(t.Context(), StopOptions{Now: true}) })
			want := s.names.PVC
			if tc.legacy {
				want = s.names.LegacyPVC
			}
			if got := s.State().PVCName; got != want {
				t.Errorf("State.PVCName = %q, want %q", got, want)
			}
			// {pvc_name} names the claim in use, for a Spawner that loads
			// the state (a hub restart) as for this one.
			withVolume := cfg
			withVolume.Pod.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "{pvc_name}"}}}}
			s2 := newSpawner(t, srv, withVolume)
			s2.LoadState(s.State())
			o, err := s2.Plan(ctx, hubStart())
			if err != nil {
				t.Fatal(err)
			}
			var mounted []string
			for _, v := range o.Pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					mounted = append(mounted, v.PersistentVolumeClaim.ClaimName)
				}
			}
			if len(mounted) != 1 || mounted[0] != want {
				t.Errorf("the pod mounts claims %q, want [%s]", mounted, want)
			}
			_, err = cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.names.PVC, metav1.GetOptions{})
			if created := err == nil; created == tc.legacy {
				t.Errorf("claim %s under today's name exists = %v (err %v), want %v", s.names.PVC, created, err, !tc.legacy)
			}
		})
	}
}

// TestLoadStateKubeSpawner: the state KubeSpawner 7 saves (get_state, as
// the config vectors record it, with kubespawner_version and pvc_name)
// decodes into State and LoadState keeps its names.
func TestLoadStateKubeSpawner(t *testing.T) {
	data, err := os.ReadFile("testdata/config-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name     string
			Expected *struct {
				State json.RawMessage `json:"state"`
			} `json:"expected"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var doc []byte
	for _, c := range file.Cases {
		if c.Name == "storage_full" {
			doc = c.Expected.State
		}
	}
	if !json.Valid(doc) {
		t.Fatalf("no KubeSpawner state in vector storage_full: %q", doc)
	}
	var st State
	if err := json.Unmarshal(doc, &st); err != nil {
		t.Fatal(err)
	}
	s := newSpawner(t, naming.Server{Username: "someone-else"}, baseConfig(newNamespace(t)))
	s.LoadState(st)
	got := s.State()
	if got.PodName != "jupyter-jill---c649a389--data" || got.Namespace != "default" ||
		got.DNSName != "jupyter-jill---c649a389--data.default.svc.cluster.local" || got.PVCName != "claim-jill---c649a389--data" {
		t.Errorf("LoadState(KubeSpawner state) = %+v; want its pod, namespace, DNS and claim names", got)
	}
}
