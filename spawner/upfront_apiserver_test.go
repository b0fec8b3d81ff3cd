package spawner

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// upfrontBase is a configuration every case below starts from: it plans a
// pod and a claim the API server accepts.
const upfrontBase = "storage_pvc_ensure: true\nstorage_capacity: 1Gi\nimage: quay.io/jupyter/base-notebook:2024-01-01\n"

// TestUpFrontChecksMirrorTheAPIServer proves, check by check, that what
// spawnkit refuses before any API call the API server refuses too: for
// each, the configuration with the bad value is refused naming its
// option, and a valid planned object given the same value is refused by
// a server-side dry run (422 Invalid). The second half proves the other
// direction for the values spawnkit lets through since issue 28 (the
// relaxed environment names, image pull secret names), and that the
// deliberate refusals (rules claim-never-exists, image-never-pullable)
// are of objects the API server accepts.
func TestUpFrontChecksMirrorTheAPIServer(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	warn := &warnings{}
	rc := rest.CopyConfig(c.Config)
	rc.WarningHandler = warn
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	planIn := func(t *testing.T, yaml string) (*Objects, error) {
		t.Helper()
		return planYAML(t, "namespace: "+ns+"\n"+yaml, StartOptions{HubNamespace: ns})
	}
	valid, err := planIn(t, upfrontBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{valid.Pod, valid.PVC} {
		if err := dryRun(ctx, client, ns, o); err != nil {
			t.Fatalf("the base objects: %v", err)
		}
	}
	type objects struct {
		pod *corev1.Pod
		pvc *corev1.PersistentVolumeClaim
		ns  *corev1.Namespace
	}
	container := func(o objects) *corev1.Container { return &o.pod.Spec.Containers[0] }
	for _, c := range []struct {
		name, yaml, option string
		// mutate gives a valid object the refused value; the returned
		// object is dry-run.
		mutate func(o objects) any
	}{
		// KubeSpawner turns a configured port 0 into 8888 at init; a
		// profile's 0 reaches the pod.
		{"a profile's port 0", "profile_list: [{display_name: p, kubespawner_override: {port: 0}}]\n", "port", func(o objects) any { container(o).Ports[0].ContainerPort = 0; return o.pod }},
		{"port 70000", "port: 70000\n", "port", func(o objects) any { container(o).Ports[0].ContainerPort = 70000; return o.pod }},
		{"empty image", "image: \"\"\n", "image", func(o objects) any { container(o).Image = ""; return o.pod }},
		{"image with a leading space", "image: \" img\"\n", "image", func(o objects) any { container(o).Image = " img"; return o.pod }},
		{"namespace not a label", "enable_user_namespaces: true\nuser_namespace_template: \"Bad_{username}\"\n", "namespace", func(o objects) any {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "Bad_ada"}}
		}},
		{"component_label", "component_label: \"a b\"\n", "component_label", func(o objects) any { o.pod.Labels["component"] = "a b"; return o.pod }},
		{"common_labels key", "common_labels: {\"bad key\": v}\n", "common_labels", func(o objects) any { o.pod.Labels["bad key"] = "v"; return o.pod }},
		{"extra_labels value", "extra_labels: {k: \"-bad-\"}\n", "extra_labels", func(o objects) any { o.pod.Labels["k"] = "-bad-"; return o.pod }},
		{"extra_annotations key", "extra_annotations: {\"bad key\": v}\n", "extra_annotations", func(o objects) any { o.pod.Annotations["bad key"] = "v"; return o.pod }},
		{"storage_extra_labels value", "storage_extra_labels: {k: \"-bad-\"}\n", "storage_extra_labels", func(o objects) any { o.pvc.Labels["k"] = "-bad-"; return o.pvc }},
		{"storage_extra_annotations key", "storage_extra_annotations: {\"bad key\": v}\n", "storage_extra_annotations", func(o objects) any { o.pvc.Annotations["bad key"] = "v"; return o.pvc }},
		{"storage_class", "storage_class: Bad_Class\n", "storage_class", func(o objects) any { o.pvc.Spec.StorageClassName = ptr.To("Bad_Class"); return o.pvc }},
		{"storage_access_modes unknown", "storage_access_modes: [Sometimes]\n", "storage_access_modes", func(o objects) any {
			o.pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"Sometimes"}
			return o.pvc
		}},
		{"storage_access_modes []", "storage_access_modes: []\n", "storage_access_modes", func(o objects) any { o.pvc.Spec.AccessModes = nil; return o.pvc }},
		{"ReadWriteOncePod with another", "storage_access_modes: [ReadWriteOncePod, ReadWriteOnce]\n", "storage_access_modes", func(o objects) any {
			o.pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadWriteOnce}
			return o.pvc
		}},
		{"storage_selector value", "storage_selector: {matchLabels: {k: \"-bad-\"}}\n", "storage_selector", func(o objects) any {
			o.pvc.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k": "-bad-"}}
			return o.pvc
		}},
		{"storage_capacity missing", "storage_capacity: null\n", "storage_capacity", func(o objects) any { o.pvc.Spec.Resources.Requests = nil; return o.pvc }},
		{"storage_capacity negative", "storage_capacity: -1Gi\n", "storage_capacity", func(o objects) any {
			o.pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("-1Gi")
			return o.pvc
		}},
		{"pvc_name", "pvc_name_template: \"-{username}\"\n", "pvc_name", func(o objects) any { o.pvc.Name = "-ada"; return o.pvc }},
		{"pod_name", "pod_name_template: \"Bad_{username}\"\n", "pod_name", func(o objects) any { o.pod.Name = "Bad_ada"; return o.pod }},
		{"service_account", "service_account: Bad_SA\n", "service_account", func(o objects) any { o.pod.Spec.ServiceAccountName = "Bad_SA"; return o.pod }},
		{"priority_class_name", "priority_class_name: Bad_PC\n", "priority_class_name", func(o objects) any { o.pod.Spec.PriorityClassName = "Bad_PC"; return o.pod }},
		{"image_pull_policy", "image_pull_policy: Sometimes\n", "image_pull_policy", func(o objects) any { container(o).ImagePullPolicy = "Sometimes"; return o.pod }},
		{"node_selector value", "node_selector: {k: \"-bad-\"}\n", "node_selector", func(o objects) any { o.pod.Spec.NodeSelector = map[string]string{"k": "-bad-"}; return o.pod }},
		{"cpu_limit negative", "cpu_limit: -1\n", "cpu_limit", func(o objects) any {
			container(o).Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
			return o.pod
		}},
		{"mem_guarantee above mem_limit", "mem_limit: 1G\nmem_guarantee: 2G\n", "mem_guarantee", func(o objects) any {
			container(o).Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}, Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
			return o.pod
		}},
		{"extra guarantee above its limit", "extra_resource_limits: {nvidia.com/gpu: 1}\nextra_resource_guarantees: {nvidia.com/gpu: 2}\n", "extra_resource_guarantees", func(o objects) any {
			container(o).Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}, Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}
			return o.pod
		}},
		{"extra resource name", "extra_resource_limits: {\"bad name!\": 1}\n", "extra_resource_limits", func(o objects) any {
			container(o).Resources.Limits = corev1.ResourceList{"bad name!": resource.MustParse("1")}
			return o.pod
		}},
		{"uid negative", "uid: -1\n", "uid", func(o objects) any {
			container(o).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](-1)}
			return o.pod
		}},
		{"gid above 2^31-1", "gid: 2147483648\n", "gid", func(o objects) any {
			container(o).SecurityContext = &corev1.SecurityContext{RunAsGroup: ptr.To[int64](2147483648)}
			return o.pod
		}},
		{"fs_gid negative", "fs_gid: -1\n", "fs_gid", func(o objects) any {
			o.pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](-1)}
			return o.pod
		}},
		{"supplemental_gids negative", "supplemental_gids: [-1]\n", "supplemental_gids", func(o objects) any {
			o.pod.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{-1}}
			return o.pod
		}},
		{"env name with =", "environment: {\"A=B\": x}\n", "environment", func(o objects) any {
			container(o).Env = append(container(o).Env, corev1.EnvVar{Name: "A=B", Value: "x"})
			return o.pod
		}},
		{"mount of no volume", "volume_mounts: [{name: nope, mountPath: /x}]\n", "volume_mounts", func(o objects) any {
			container(o).VolumeMounts = append(container(o).VolumeMounts, corev1.VolumeMount{Name: "nope", MountPath: "/x"})
			return o.pod
		}},
		{"toleration operator", "tolerations: [{key: k, operator: Sometimes}]\n", "tolerations", func(o objects) any {
			o.pod.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Sometimes"}}
			return o.pod
		}},
		{"user_namespace_labels value", "enable_user_namespaces: true\nuser_namespace_labels: {k: \"-bad-\"}\n", "user_namespace_labels", func(o objects) any {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spawn-", Labels: map[string]string{"k": "-bad-"}}}
		}},
		{"user_namespace_annotations key", "enable_user_namespaces: true\nuser_namespace_annotations: {\"bad key\": v}\n", "user_namespace_annotations", func(o objects) any {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spawn-", Annotations: map[string]string{"bad key": "v"}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := planIn(t, upfrontBase+c.yaml)
			if err == nil {
				t.Fatalf("spawnkit accepted %q", c.yaml)
			}
			if !strings.Contains(err.Error(), c.option) {
				t.Errorf("spawnkit's error does not name %s: %v", c.option, err)
			}
			o := objects{pod: valid.Pod.DeepCopy(), pvc: valid.PVC.DeepCopy()}
			err = dryRun(ctx, client, ns, c.mutate(o))
			// The Priority admission plugin looks the class up before
			// validation: no class of an invalid name can exist.
			forbiddenClass := apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name")
			if !apierrors.IsInvalid(err) && !forbiddenClass {
				t.Errorf("the API server did not refuse the value as invalid: %v", err)
			}
		})
	}

	// What spawnkit lets through, the API server accepts; the rules'
	// refusals are of objects it accepts (they could never run).
	for _, c := range []struct {
		name, yaml string
		refused    bool // by a deviation rule
		mutate     func(o objects) any
	}{
		{"relaxed env names", "environment: {my.var-1: a, \"with space\": b, 1LEADING: c}\n", false, nil},
		{"image pull secret names", "image_pull_secrets: [Not_A_DNS_Name]\n", false, nil},
		{"claim name unused", "pvc_name_template: \"-{username}\"\n", false, nil},
		{"scheduler name any string", "scheduler_name: \"Bad Sched\"\n", false, nil},
		{"rule claim-never-exists", "volumes: [{name: home, persistentVolumeClaim: {claimName: \"-nope\"}}]\nvolume_mounts: [{name: home, mountPath: /home/jovyan}]\n", true, func(o objects) any {
			o.pod.Spec.Volumes = append(o.pod.Spec.Volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "-nope"}}})
			return o.pod
		}},
		{"rule image-never-pullable", "image: \"repo/img name:1\"\n", true, func(o objects) any { container(o).Image = "repo/img name:1"; return o.pod }},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := upfrontBase + c.yaml
			if strings.Contains(c.yaml, "pvc_name_template") {
				yaml = "image: quay.io/jupyter/base-notebook:2024-01-01\n" + c.yaml // no claim
			}
			objs, err := planIn(t, yaml)
			if c.refused {
				if err == nil {
					t.Fatalf("spawnkit accepted %q, which its rule refuses", c.yaml)
				}
				if err := dryRun(ctx, client, ns, c.mutate(objects{pod: valid.Pod.DeepCopy(), pvc: valid.PVC.DeepCopy()})); err != nil {
					t.Errorf("the API server refuses what the rule refuses (make it an api-rejects clause): %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("spawnkit refused %q: %v", c.yaml, err)
			}
			for _, o := range []any{objs.Pod, objs.PVC} {
				if o == nil || o == (*corev1.PersistentVolumeClaim)(nil) {
					continue
				}
				if err := dryRun(ctx, client, ns, o); err != nil {
					t.Errorf("the API server refused what spawnkit planned: %v", err)
				}
			}
		})
	}
}

// dryRun creates obj in ns (a namespace object cluster-wide) with a
// server-side dry run and strict field validation.
func dryRun(ctx context.Context, client kubernetes.Interface, ns string, obj any) error {
	opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	var err error
	switch o := obj.(type) {
	case *corev1.Pod:
		o = o.DeepCopy()
		o.Namespace, o.ResourceVersion = ns, ""
		_, err = client.CoreV1().Pods(ns).Create(ctx, o, opts)
	case *corev1.PersistentVolumeClaim:
		o = o.DeepCopy()
		o.Namespace, o.ResourceVersion = ns, ""
		_, err = client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, o, opts)
	case *corev1.Namespace:
		_, err = client.CoreV1().Namespaces().Create(ctx, o, opts)
	}
	return err
}
