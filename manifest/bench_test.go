package manifest

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// fullSpec is a realistic user pod: resources, env with references,
// storage, tolerations, affinity, security contexts and overrides.
func fullSpec() PodSpec {
	return PodSpec{
		Name: "jupyter-alice--gpu", Image: "quay.io/jupyter/scipy-notebook:2024-01-01", Port: 8888,
		Cmd:             []string{"jupyterhub-singleuser"},
		ImagePullPolicy: corev1.PullIfNotPresent, ImagePullSecrets: []string{"regcred"},
		NodeSelector: map[string]string{"hub.jupyter.org/node-purpose": "user"},
		UID:          ptr.To[int64](1000), GID: ptr.To[int64](100), FSGID: ptr.To[int64](100),
		Env: []corev1.EnvVar{
			{Name: "JUPYTERHUB_API_TOKEN", Value: "token"}, {Name: "JUPYTERHUB_USER", Value: "alice"},
			{Name: "JUPYTERHUB_SERVICE_PREFIX", Value: "/user/alice/gpu/"}, {Name: "HOME", Value: "/home/jovyan"},
			{Name: "DATA", Value: "$(HOME)/data"}, {Name: "MEM_LIMIT", ValueFrom: &corev1.EnvVarSource{
				ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
		},
		Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-alice--gpu"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}},
		Labels:       map[string]string{"component": "singleuser-server", "hub.jupyter.org/username": "alice"},
		Annotations:  map[string]string{"hub.jupyter.org/username": "alice"},
		CPULimit:     resource.MustParse("4"), CPUGuarantee: resource.MustParse("500m"),
		MemLimit: resource.MustParse("8Gi"), MemGuarantee: resource.MustParse("2Gi"),
		ExtraResourceLimits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		Tolerations: []corev1.Toleration{{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual,
			Value: "user", Effect: corev1.TaintEffectNoSchedule}},
		NodeAffinityPreferred: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100"}}}}}},
		ExtraContainerConfig: Overrides{{Key: "stdin", Value: json.RawMessage("true")}},
		SSLSecretName:        "jupyter-alice--gpu", SSLSecretMountPath: "/etc/jupyterhub/ssl/",
	}
}

func BenchmarkPod(b *testing.B) {
	spec := fullSpec()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Pod(&spec); err != nil {
			b.Fatal(err)
		}
	}
}
