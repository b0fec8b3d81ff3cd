package dropped

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestDroppedFields(t *testing.T) {
	sent := func() *corev1.PodSpec {
		return &corev1.PodSpec{
			HostUsers:       ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{},
			Containers: []corev1.Container{{
				Name: "notebook", Image: "lab",
				Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")}},
				ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired}},
				Env:          []corev1.EnvVar{{Name: "A", Value: ""}, {Name: "B", Value: "b"}},
				// One volume mounted twice: names are not unique.
				VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}, {Name: "home", MountPath: "/shared", SubPath: "shared"}},
			}},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}, {Key: "spot", Operator: corev1.TolerationOpExists}},
		}
	}
	cases := []struct {
		name string
		edit func(got *corev1.PodSpec)
		want []string
	}{
		{"identical", func(*corev1.PodSpec) {}, nil},
		{"additions and normalised values are no loss", func(got *corev1.PodSpec) {
			got.SecurityContext = nil // {} sent: nothing to lose
			got.RestartPolicy = corev1.RestartPolicyAlways
			got.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
			got.Containers[0].TerminationMessagePath = "/dev/termination-log"
			// A webhook puts a container and a toleration first.
			got.Containers = append([]corev1.Container{{Name: "proxy", Image: "envoy"}}, got.Containers...)
			got.Tolerations = append([]corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}, got.Tolerations...)
		}, nil},
		{"a gated field cleared", func(got *corev1.PodSpec) { got.HostUsers = nil }, []string{"spec.hostUsers"}},
		{"a field of a named entry", func(got *corev1.PodSpec) { got.Containers[0].ResizePolicy = nil },
			[]string{"spec.containers[notebook].resizePolicy"}},
		{"a named entry", func(got *corev1.PodSpec) { got.Containers[0].Env = got.Containers[0].Env[1:] },
			[]string{"spec.containers[notebook].env[A]"}},
		{"entries of one name, in another order", func(got *corev1.PodSpec) {
			m := got.Containers[0].VolumeMounts
			m[0], m[1] = m[1], m[0]
		}, nil},
		{"a field of one of two entries of a name", func(got *corev1.PodSpec) { got.Containers[0].VolumeMounts[1].SubPath = "" },
			[]string{"spec.containers[notebook].volumeMounts[home].subPath"}},
		{"one of two entries of a name", func(got *corev1.PodSpec) {
			got.Containers[0].VolumeMounts = got.Containers[0].VolumeMounts[1:]
		}, []string{"spec.containers[notebook].volumeMounts[home]"}},
		{"a whole list", func(got *corev1.PodSpec) { got.Tolerations = nil }, []string{"spec.tolerations"}},
		{"an unnamed entry", func(got *corev1.PodSpec) {
			// The one left is spot's, not a stand-in for gpu's.
			got.Tolerations = got.Tolerations[1:]
		}, []string{"spec.tolerations[0]"}},
		{"an unnamed entry is known by its content", func(got *corev1.PodSpec) {
			got.Tolerations[1].Key = "preemptible"
		}, []string{"spec.tolerations[1]"}},
		{"an unnamed entry has no stand-in", func(got *corev1.PodSpec) {
			// DefaultTolerationSeconds's additions hold none of the sent ones.
			got.Tolerations = []corev1.Toleration{notReady, unreachable}
		}, []string{"spec.tolerations[0]", "spec.tolerations[1]"}},
		{"a field of an unnamed entry", func(got *corev1.PodSpec) { got.Tolerations[0].Operator = "" },
			[]string{"spec.tolerations[0]"}},
		{"several, sorted", func(got *corev1.PodSpec) { got.Tolerations, got.HostUsers = nil, nil },
			[]string{"spec.hostUsers", "spec.tolerations"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sent()
			tc.edit(got)
			dropped, err := Fields(sent(), got, "spec")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(dropped, tc.want) {
				t.Errorf("dropped = %q, want %q", dropped, tc.want)
			}
		})
	}
}

// The tolerations DefaultTolerationSeconds adds to every pod.
var (
	notReady    = corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	unreachable = corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
)

// TestDroppedTolerationsMerged: the RuntimeClass admission plugin merges
// a RuntimeClass's tolerations into the pod's, keeping one of duplicates
// and only a toleration that tolerates another's taints too; nothing the
// pod tolerates is lost, so nothing is reported. A toleration no
// returned one covers is.
func TestDroppedTolerationsMerged(t *testing.T) {
	ded := corev1.Toleration{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule}
	gpuEqual := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "present", Effect: corev1.TaintEffectNoSchedule}
	gpuExists := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}
	short := corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}
	long := corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](3000)}
	sent := &corev1.PodSpec{RuntimeClassName: ptr.To("gvisor"), Tolerations: []corev1.Toleration{ded, ded, gpuEqual, gpuExists, short}}
	got := &corev1.PodSpec{RuntimeClassName: ptr.To("gvisor"), Tolerations: []corev1.Toleration{ded, gpuExists, notReady, unreachable}}
	if d, err := Fields(sent, got, "spec"); err != nil || d != nil {
		t.Errorf("merged tolerations: dropped = %q, %v; want none", d, err)
	}
	// 300 s does not cover 3000 s: that one is lost.
	sent.Tolerations = append(sent.Tolerations, long)
	if d, _ := Fields(sent, got, "spec"); !slices.Equal(d, []string{"spec.tolerations[5]"}) {
		t.Errorf("dropped = %q, want the 3000 s toleration", d)
	}
}

func TestCoversQuantitiesByValue(t *testing.T) {
	a := reflect.ValueOf(resource.MustParse("0.5"))
	b := reflect.ValueOf(resource.MustParse("500m"))
	if !covers(a, b) {
		t.Error(`"0.5" does not cover "500m"`)
	}
	if covers(a, reflect.ValueOf(resource.MustParse("1"))) {
		t.Error(`"0.5" covers "1"`)
	}
}

// BenchmarkDroppedFields is the check's cost per start on a pod as
// spawnkit renders it with KubeSpawner's defaults (compare a start's
// client CPU in the README's performance table, about 2 ms).
func BenchmarkDroppedFields(b *testing.B) {
	sent := &corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "notebook", Image: "quay.io/jupyter/base-notebook:2024-01-01", Args: []string{"jupyterhub-singleuser"},
			Env:          []corev1.EnvVar{{Name: "JUPYTERHUB_API_TOKEN", Value: "t"}, {Name: "JUPYTERHUB_USER", Value: "alice"}, {Name: "MEM_GUARANTEE", Value: "1G"}},
			Ports:        []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}},
			Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1G")}},
			VolumeMounts: []corev1.VolumeMount{{Name: "volume-alice", MountPath: "/home/jovyan"}},
		}},
		Volumes:         []corev1.Volume{{Name: "volume-alice", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-alice"}}}},
		SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](100)},
		Tolerations:     []corev1.Toleration{{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual, Value: "user", Effect: corev1.TaintEffectNoSchedule}},
	}
	got := sent.DeepCopy()
	got.RestartPolicy, got.DNSPolicy = corev1.RestartPolicyOnFailure, corev1.DNSClusterFirst
	b.ReportAllocs()
	for b.Loop() {
		if d, err := Fields(sent, got, "spec"); err != nil || d != nil {
			b.Fatal(d, err)
		}
	}
}
