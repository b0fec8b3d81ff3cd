package manifest

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

func basicSpec() PodSpec {
	return PodSpec{Name: "jupyter-alice", Image: "quay.io/jupyter/base-notebook:2024-01-01", Port: 8888, Cmd: []string{"jupyterhub-singleuser"}}
}

func TestPodRejectsInvalidSpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*PodSpec)
		want   []string // substrings of the error: the field and the value
	}{
		{"bad name", func(s *PodSpec) { s.Name = "Jupyter_Alice" }, []string{"name", "Jupyter_Alice"}},
		{"no image", func(s *PodSpec) { s.Image = "" }, []string{"image", "Required"}},
		{"negative port", func(s *PodSpec) { s.Port = -1 }, []string{"port", "-1"}},
		{"port too big", func(s *PodSpec) { s.Port = 70000 }, []string{"port", "70000"}},
		{"pull policy", func(s *PodSpec) { s.ImagePullPolicy = "Sometimes" }, []string{"image_pull_policy", "Sometimes"}},
		{"toleration operator", func(s *PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Maybe"}}
		}, []string{"tolerations[0].operator", "Maybe"}},
		{"toleration effect", func(s *PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Exists", Effect: "Sometimes"}}
		}, []string{"tolerations[0].effect", "Sometimes"}},
		{"exists with value", func(s *PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Exists", Value: "v"}}
		}, []string{"tolerations[0].value"}},
		{"negative quantity", func(s *PodSpec) { s.MemLimit = resource.MustParse("-1Gi") }, []string{"mem_limit", "-1Gi"}},
		{"negative uid", func(s *PodSpec) { s.UID = ptr.To[int64](-5) }, []string{"uid", "-5"}},
		{"bad label value", func(s *PodSpec) { s.Labels = map[string]string{"a": "not valid!"} }, []string{"labels[a]", "not valid!"}},
		{"bad label key", func(s *PodSpec) { s.Labels = map[string]string{"bad key": "v"} }, []string{"labels", "bad key"}},
		{"ssl half set", func(s *PodSpec) { s.SSLSecretName = "s" }, []string{"ssl_secret_mount_path"}},
		{"unknown extra pod key", func(s *PodSpec) {
			s.ExtraPodConfig = Overrides{{Key: "notAField", Value: json.RawMessage("true")}}
		}, []string{"extra_pod_config", "notAField"}},
		{"extra container wrong type", func(s *PodSpec) {
			s.ExtraContainerConfig = Overrides{{Key: "stdin", Value: json.RawMessage(`"yes"`)}}
		}, []string{"extra_container_config.stdin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := basicSpec()
			tc.mutate(&spec)
			pod, err := Pod(&spec)
			if err == nil {
				t.Fatalf("built %s, want an error", pod.Name)
			}
			if !IsInvalid(err) {
				t.Errorf("error %v is not a *ValidationError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name, kwargs string
		want         []string
	}{
		{"malformed quantity", `{"mem_limit": "2 gigs"}`, []string{"mem_limit", "2 gigs"}},
		{"quantity wrong type", `{"cpu_limit": [1]}`, []string{"cpu_limit"}},
		{"unknown argument", `{"cpu_limits": 1}`, []string{"cpu_limits", "unknown argument"}},
		{"port not a number", `{"port": "http"}`, []string{"port", "http"}},
		{"unknown volume key", `{"volumes": [{"name": "v", "hostPth": {}}]}`, []string{"volumes", "hostPth"}},
		{"nested snake key", `{"volumes": [{"name": "v", "configMap": {"default_mode": 1}}]}`, []string{"volumes", "default_mode"}},
		{"snake security context", `{"container_security_context": {"run_as_user": 1}}`, []string{"container_security_context", "run_as_user"}},
		{"bad toleration list", `{"tolerations": {"key": "a"}}`, []string{"tolerations", "want a list"}},
		{"extra resource", `{"extra_resource_limits": {"nvidia.com/gpu": "one"}}`, []string{"extra_resource_limits", "nvidia.com/gpu", "one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePodSpec([]byte(tc.kwargs))
			if err == nil {
				t.Fatal("decoded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := DecodePVCSpec([]byte(`{"name": "c", "storage": "lots"}`)); err == nil || !strings.Contains(err.Error(), "storage") {
		t.Errorf("PVC with a malformed size: err = %v", err)
	}
}

func TestOtherBuildersReject(t *testing.T) {
	for name, err := range map[string]error{
		"pvc no size":       second(PVC(PVCSpec{Name: "claim-a", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}})),
		"pvc bad mode":      second(PVC(PVCSpec{Name: "claim-a", Storage: resource.MustParse("1Gi"), AccessModes: []corev1.PersistentVolumeAccessMode{"ReadSometimes"}})),
		"secret no key":     second(Secret(SecretSpec{Name: "s", Cert: []byte("c")})),
		"service bad name":  second(Service(ServiceSpec{Name: "1-svc", Port: 80, Selector: map[string]string{"a": "b"}})),
		"service no select": second(Service(ServiceSpec{Name: "svc", Port: 80})),
		"namespace dots":    second(Namespace(NamespaceSpec{Name: "user.alice"})),
	} {
		if err == nil || !IsInvalid(err) {
			t.Errorf("%s: err = %v, want a *ValidationError", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestPodDoesNotAliasSpec(t *testing.T) {
	spec := basicSpec()
	spec.Labels = map[string]string{"a": "b"}
	spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
	spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod, err := Pod(&spec)
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["a"] = "changed"
	pod.Spec.Containers[0].Env[0].Value = "changed"
	pod.Spec.Volumes[0].EmptyDir.Medium = "Memory"
	if spec.Labels["a"] != "b" || spec.Env[0].Value != "1" || spec.Volumes[0].EmptyDir.Medium != "" {
		t.Error("changing the built pod changed the spec")
	}
}

func TestRestrictedProfilePassesPodSecurity(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	check := func(spec PodSpec) []string {
		pod, err := Pod(&spec)
		if err != nil {
			t.Fatal(err)
		}
		var failed []string
		for _, r := range evaluator.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec) {
			if !r.Allowed {
				failed = append(failed, r.ForbiddenReason+": "+r.ForbiddenDetail)
			}
		}
		return failed
	}

	spec := basicSpec()
	spec.UID = ptr.To[int64](1000)
	spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	spec.ExtraContainers = []corev1.Container{{Name: "sidecar", Image: "busybox"}}
	if failed := check(spec); len(failed) == 0 {
		t.Fatal("a default pod passes the restricted profile; the test would prove nothing")
	}
	spec.RestrictedSecurity = true
	if failed := check(spec); len(failed) > 0 {
		t.Errorf("restricted pod fails Pod Security restricted: %v", failed)
	}

	// The profile fills only what is unset: an explicit choice stays, even
	// one the profile forbids.
	spec.ContainerSecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
	spec.AllowPrivilegeEscalation = EscalationAllowed
	pod, err := Pod(&spec)
	if err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if !*sc.AllowPrivilegeEscalation || sc.Capabilities.Add[0] != "NET_ADMIN" || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("restricted profile overrode an explicit setting: %+v", sc)
	}
	if failed := check(spec); len(failed) == 0 {
		t.Error("a pod that asks for privilege escalation passed the restricted profile")
	}
}

// TestSecretTrustBundle: make_secret reads the files in text mode
// (universal newlines) and strips the CA bundle of newlines at both ends
// before the hub's CA.
func TestSecretTrustBundle(t *testing.T) {
	s, err := Secret(SecretSpec{Name: "jupyter-a", Key: []byte("K\r\n"), Cert: []byte("C\r"), CA: []byte("\n\r\nCA\n\n"), HubCA: []byte("HUB\n"),
		OwnerReferences: []metav1.OwnerReference{OwnerReference("jupyter-a", "uid-1")}})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{SSLKeyKey: "K\n", SSLCertKey: "C\n", SSLCAKey: "CA\nHUB\n"} {
		if got := string(s.Data[key]); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if ref := s.OwnerReferences[0]; ref.Kind != "Pod" || !*ref.BlockOwnerDeletion || *ref.Controller {
		t.Errorf("owner reference = %+v", ref)
	}
}

// TestPodLeavesSpecUnchanged builds every make_pod vector (the whole range
// of KubeSpawner's options, SSL, overrides and restricted security
// included) and checks that Pod, which takes the spec by pointer, changed
// nothing in it.
func TestPodLeavesSpecUnchanged(t *testing.T) {
	data, err := os.ReadFile("testdata/manifest-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []vectorCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	built := 0
	for _, c := range file.Cases {
		if c.Function != "make_pod" {
			continue
		}
		spec, err := DecodePodSpec(c.Kwargs)
		if err != nil {
			continue
		}
		want, err := DecodePodSpec(c.Kwargs)
		if err != nil {
			t.Fatal(err)
		}
		// Appending to a slice with spare capacity would change what a
		// later append sees without changing spec's own elements: give
		// every slice some.
		spec.Env = slices.Grow(spec.Env, 4)
		spec.Volumes = slices.Grow(spec.Volumes, 4)
		spec.VolumeMounts = slices.Grow(spec.VolumeMounts, 4)
		spec.SupplementalGIDs = slices.Grow(spec.SupplementalGIDs, 4)
		// The same for want, whose slices are then non-nil too: the
		// comparison below tells nil from empty.
		want.Env = slices.Grow(want.Env, 4)
		want.Volumes = slices.Grow(want.Volumes, 4)
		want.VolumeMounts = slices.Grow(want.VolumeMounts, 4)
		want.SupplementalGIDs = slices.Grow(want.SupplementalGIDs, 4)
		for _, ssl := range []bool{false, true} {
			if ssl {
				spec.SSLSecretName, spec.SSLSecretMountPath = "certs", "/etc/certs"
				want.SSLSecretName, want.SSLSecretMountPath = "certs", "/etc/certs"
			}
			if _, err := Pod(&spec); err != nil {
				continue
			}
			built++
			if !reflect.DeepEqual(spec, want) {
				t.Errorf("%s (ssl %v): Pod changed its spec", c.Name, ssl)
			}
			if !spareIsZero(spec.Env) || !spareIsZero(spec.Volumes) || !spareIsZero(spec.VolumeMounts) || !spareIsZero(spec.SupplementalGIDs) {
				t.Errorf("%s (ssl %v): Pod appended to one of the spec's slices in place", c.Name, ssl)
			}
		}
	}
	if built < 20 {
		t.Fatalf("only %d pods built from the vectors", built)
	}
}

// spareIsZero reports whether s's capacity beyond its length is untouched.
func spareIsZero[T any](s []T) bool {
	for _, v := range s[len(s):cap(s)] {
		if !reflect.ValueOf(&v).Elem().IsZero() {
			return false
		}
	}
	return true
}

// TestIsEmptyMatchesSemanticEquality checks isEmpty's shortcuts against
// the plain definition (semantically equal to the zero value) on security
// contexts: unset, empty slices, pointers to zero values, set fields.
func TestIsEmptyMatchesSemanticEquality(t *testing.T) {
	plain := func(v any, zero any) bool {
		return reflect.ValueOf(v).IsNil() || apiequality.Semantic.DeepEqual(reflect.ValueOf(v).Elem().Interface(), zero)
	}
	pscs := []*corev1.PodSecurityContext{nil, {}, {SupplementalGroups: []int64{}}, {FSGroup: ptr.To[int64](0)},
		{FSGroup: ptr.To[int64](100)}, {SupplementalGroups: []int64{5}}, {Sysctls: []corev1.Sysctl{}},
		{SELinuxOptions: &corev1.SELinuxOptions{}}, {SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyMerge)}}
	for i, c := range pscs {
		if got, want := isEmpty(c), plain(c, corev1.PodSecurityContext{}); got != want {
			t.Errorf("pod security context %d: isEmpty %v, semantic %v", i, got, want)
		}
	}
	cscs := []*corev1.SecurityContext{nil, {}, {RunAsUser: ptr.To[int64](1000)}, {Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{}}},
		{Privileged: ptr.To(false)}, {ProcMount: ptr.To(corev1.DefaultProcMount)}}
	for i, c := range cscs {
		if got, want := isEmpty(c), plain(c, corev1.SecurityContext{}); got != want {
			t.Errorf("container security context %d: isEmpty %v, semantic %v", i, got, want)
		}
	}
}
