package manifest

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestMountsJudgedOnTheBuiltPod: a mount must name a volume of the pod
// as built, after extra_container_config and extra_pod_config (which
// replace mounts or volumes whole): a volume only extra_pod_config
// provides is found, a mount only extra_container_config adds is
// checked, and the error names the option.
func TestMountsJudgedOnTheBuiltPod(t *testing.T) {
	base := func() *PodSpec {
		return &PodSpec{Name: "jupyter-alice", Image: "lab", Port: 8888}
	}
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	for _, c := range []struct {
		name    string
		spec    func() *PodSpec
		wantErr string
	}{
		{"volume from extra_pod_config", func() *PodSpec {
			s := base()
			s.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
			s.ExtraPodConfig = Overrides{{Key: "volumes", Value: raw([]any{map[string]any{"name": "data", "emptyDir": map[string]any{}}})}}
			return s
		}, ""},
		{"mounts replaced by extra_container_config", func() *PodSpec {
			s := base()
			s.VolumeMounts = []corev1.VolumeMount{{Name: "gone", MountPath: "/gone"}}
			s.ExtraContainerConfig = Overrides{{Key: "volumeMounts", Value: raw([]any{})}}
			return s
		}, ""},
		{"mount added by extra_container_config without a volume", func() *PodSpec {
			s := base()
			s.ExtraContainerConfig = Overrides{{Key: "volumeMounts", Value: raw([]any{map[string]any{"name": "nowhere", "mountPath": "/x"}})}}
			return s
		}, `volume_mounts[0].name: Not found: "nowhere"`},
		{"volumes removed by extra_pod_config", func() *PodSpec {
			s := base()
			s.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			s.VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home"}}
			s.ExtraPodConfig = Overrides{{Key: "volumes", Value: raw(nil)}}
			return s
		}, `volume_mounts[0].name: Not found: "home"`},
		{"extra container's mount", func() *PodSpec {
			s := base()
			s.ExtraContainers = []corev1.Container{{Name: "side", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/n"}}}}
			return s
		}, `extra_containers[0].volumeMounts[0].name: Not found: "nope"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Pod(c.spec())
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("Pod = %v, want a pod (KubeSpawner builds it)", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("Pod = %v, want an error with %q", err, c.wantErr)
			}
		})
	}
}
