package spawner

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

func TestIDFuncs(t *testing.T) {
	cfg := baseConfig("default")
	cfg.UIDFunc = func(s naming.Server) *int64 { return ptr.To(int64(1000 + s.UserID)) }
	cfg.SupplementalGIDsFunc = func(naming.Server) []int64 { return []int64{7} }
	o, err := Plan(t.Context(), naming.Server{Username: "ida", UserID: 5}, cfg, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Pod
	if got := *pod.Spec.Containers[0].SecurityContext.RunAsUser; got != 1005 {
		t.Errorf("runAsUser = %d, want 1005 from UIDFunc", got)
	}
	if got := pod.Spec.SecurityContext.SupplementalGroups; !reflect.DeepEqual(got, []int64{7}) {
		t.Errorf("supplementalGroups = %v", got)
	}
}

func TestImagePullFailsOnTheSecondFailedPull(t *testing.T) {
	status := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: "notebook", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
	}
	p := newPullTracker(2)
	for i, tc := range []struct {
		reason string
		fatal  bool
	}{
		{"ContainerCreating", false}, {"ErrImagePull", false}, {"ImagePullBackOff", false},
		{"ImagePullBackOff", false}, {"ErrImagePull", true},
	} {
		pod := status(tc.reason)
		_, got := p.observe(reflector.NewPod(pod))
		if r, _ := fatalReason(reflector.NewPod(pod), kubespawner.DefaultFatalReasons, ""); r != "" {
			t.Errorf("step %d: %s is in DefaultFatalReasons; the pull rule should decide", i, r)
		}
		if got != tc.fatal {
			t.Errorf("step %d (%s): fatal = %v, want %v", i, tc.reason, got, tc.fatal)
		}
	}
	// Listed in fatal_reasons, the first occurrence is fatal.
	if r, _ := fatalReason(reflector.NewPod(status("ErrImagePull")), []string{"ErrImagePull"}, ""); r != "ErrImagePull" {
		t.Error("ErrImagePull listed in fatal_reasons is not fatal at once")
	}
}

func TestPlanRejectsBadTemplates(t *testing.T) {
	for key, mutate := range map[string]func(*kubespawner.Config){
		"volumes": func(c *kubespawner.Config) {
			c.Pod.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/data/{usrname}"}}}}
		},
		"volume_mounts": func(c *kubespawner.Config) {
			c.Pod.VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home/{"}}
		},
		"environment":       func(c *kubespawner.Config) { c.Environment = map[string]string{"X": "{nope}"} },
		"extra_labels":      func(c *kubespawner.Config) { c.ExtraLabels = map[string]string{"x": "}"} },
		"extra_annotations": func(c *kubespawner.Config) { c.ExtraAnnotations = map[string]string{"x": "{nope}"} },
		"pod_connect_ip":    func(c *kubespawner.Config) { c.PodConnectIP = "{nope}.svc" },
	} {
		cfg := baseConfig("default")
		mutate(&cfg)
		_, err := Plan(t.Context(), naming.Server{Username: "tina"}, cfg, StartOptions{})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: Plan = %v, want an error naming %s", key, err, key)
		}
	}
}
