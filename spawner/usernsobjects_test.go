package spawner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// userNSConfig is a configuration with user namespaces under a hub
// namespace of the test's own, the singleuser NetworkPolicy, a quota,
// and pods that ask for 1 CPU and 1Gi.
func userNSConfig(hubNS, memLimit string) kubespawner.Config {
	cfg := baseConfig(hubNS)
	cfg.EnableUserNamespaces = true
	cfg.NetworkPolicy = &kubespawner.NetworkPolicyConfig{Enabled: true}
	cfg.UserNamespaceResourceQuota = map[string]string{"limits.cpu": "2", "limits.memory": memLimit, "pods": "5"}
	cfg.Pod.CPULimit = resource.MustParse("1")
	cfg.Pod.MemLimit = resource.MustParse("1Gi")
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	return cfg
}

// TestUserNamespaceObjects: a start in a user namespace makes its
// NetworkPolicy and ResourceQuota before anything of the server; a
// second server that the quota has no room for is refused before its
// claim or pod exist, naming the quota and the amounts; a larger quota in
// the configuration is applied by the next start, which then succeeds.
func TestUserNamespaceObjects(t *testing.T) {
	hub := newNamespace(t)
	ctx := ctxTimeout(t, 90*time.Second)
	user := "quinn"
	first := newSpawner(t, naming.Server{Username: user, Servername: "one"}, userNSConfig(hub, "1536Mi"))
	ns := first.State().Namespace
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	if _, err := first.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	np, err := cluster.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, UserNamespacePolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if np.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit || np.Spec.PodSelector.MatchLabels[naming.LabelComponent] != "singleuser-server" ||
		np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != hub {
		t.Errorf("NetworkPolicy %+v: want spawnkit's, selecting the servers, open to the hub namespace %s", np, hub)
	}
	quotas := cluster.Client.CoreV1().ResourceQuotas(ns)
	q, err := quotas.Get(ctx, UserNamespaceQuotaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Spec.Hard[corev1.ResourceLimitsMemory]; got.String() != "1536Mi" {
		t.Errorf("quota limits.memory = %s", got.String())
	}
	// The quota controller counts the first server.
	waitUsed(t, ns, corev1.ResourceLimitsMemory, "1Gi")

	second := newSpawner(t, naming.Server{Username: user, Servername: "two"}, userNSConfig(hub, "1536Mi"))
	_, err = second.Start(ctx, hubStart())
	var se *StartError
	if !errors.As(err, &se) || se.Step != StepQuota || se.Reason != ReasonQuotaExceeded {
		t.Fatalf("a start over quota = %v, want a StartError at step quota, reason QuotaExceeded", err)
	}
	for _, want := range []string{ns + "/" + UserNamespaceQuotaName, "limits.memory: the server needs 1Gi, 1Gi of 1536Mi are in use (512Mi left)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, second.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused server's pod: %v, want none", err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, second.names.PVC, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused server's claim %s: %v, want none", second.names.PVC, err)
	}

	// A larger quota in the configuration: the next start updates it.
	third := newSpawner(t, naming.Server{Username: user, Servername: "two"}, userNSConfig(hub, "3Gi"))
	if _, err := third.Start(ctx, hubStart()); err != nil {
		t.Fatalf("with room in the updated quota: %v", err)
	}
	q2, err := quotas.Get(ctx, UserNamespaceQuotaName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := q2.Spec.Hard[corev1.ResourceLimitsMemory]; got.String() != "3Gi" || q2.UID != q.UID {
		t.Errorf("after the config change: limits.memory %s, uid %s (was %s); want 3Gi, the same quota updated", got.String(), q2.UID, q.UID)
	}
	for _, s := range []*Spawner{first, third} {
		if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitUsed waits until the quota controller has counted want of name in
// the user namespace's quota.
func waitUsed(t *testing.T, ns string, name corev1.ResourceName, want string) {
	t.Helper()
	testutil.EventuallyEvery(t, 100*time.Millisecond, 30*time.Second, fmt.Sprintf("the quota controller to count %s %s in %s", want, name, ns), func() error {
		q, err := cluster.Client.CoreV1().ResourceQuotas(ns).Get(t.Context(), UserNamespaceQuotaName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if used, ok := q.Status.Used[name]; !ok || used.Cmp(resource.MustParse(want)) != 0 {
			return fmt.Errorf("used %v", q.Status.Used)
		}
		return nil
	})
}

// TestQuotaRoomNamesEveryShortage is quotaRoom alone: every resource the
// pod lacks room for is named with its amounts; resources the quota does
// not limit, or the pod does not ask for, are not.
func TestQuotaRoomNamesEveryShortage(t *testing.T) {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub-ada", Name: "singleuser"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"limits.cpu": resource.MustParse("2"), "limits.memory": resource.MustParse("4Gi"), "pods": resource.MustParse("3"),
			"requests.nvidia.com/gpu": resource.MustParse("1")}},
		Status: corev1.ResourceQuotaStatus{Used: corev1.ResourceList{
			"limits.cpu": resource.MustParse("1500m"), "limits.memory": resource.MustParse("5Gi"), "pods": resource.MustParse("1")}},
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
	err := quotaRoom(q, pod)
	if err == nil {
		t.Fatal("no shortage found")
	}
	for _, want := range []string{
		"jhub-ada/singleuser",
		"limits.cpu: the server needs 1, 1500m of 2 are in use (500m left)",
		"limits.memory: the server needs 1Gi, 5Gi of 4Gi are in use (0 left)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pods") || strings.Contains(err.Error(), "gpu") {
		t.Errorf("%q names a resource with room, or one the pod does not ask for", err)
	}
	q.Spec.Hard["limits.memory"] = resource.MustParse("8Gi")
	q.Spec.Hard["limits.cpu"] = resource.MustParse("3")
	if err := quotaRoom(q, pod); err != nil {
		t.Errorf("with room: %v", err)
	}
}

// TestNamespaceObjectConfigIsChecked: the options act in user namespaces
// only, and their values are checked at load.
func TestNamespaceObjectConfigIsChecked(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"network_policy: {enabled: true}", "network_policy.enabled"},
		{"user_namespace_resource_quota: {limits.cpu: \"2\"}", "user_namespace_resource_quota"},
		{"enable_user_namespaces: true\nnetwork_policy: {enabled: true, inter_namespace_access_labels: maybe}", "inter_namespace_access_labels"},
		{"enable_user_namespaces: true\nnetwork_policy: {enabled: true, egress_allow_rules: {private_ip: true}}", "private_ip"},
		{"enable_user_namespaces: true\nnetwork_policy: {enabled: true, hub_nmespace: x}", "hub_nmespace"},
		{"enable_user_namespaces: true\nuser_namespace_resource_quota: {limits.memory: lots}", "limits.memory"},
		{"enable_user_namespaces: true\nuser_namespace_resource_quota: {limit.memory: 8Gi}", "limit.memory"},
	} {
		if _, err := kubespawner.Load([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kubespawner.Load(%q) = %v, want an error naming %s", c.yaml, err, c.want)
		}
	}
	cfg, err := kubespawner.Load([]byte("enable_user_namespaces: true\nnamespace: jhub\nnetwork_policy: {enabled: true, egress_allow_rules: {private_ips: true}}\nuser_namespace_resource_quota: {limits.memory: \"{username}Gi\"}"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(t.Context(), naming.Server{Username: "ada"}, cfg, StartOptions{})
	if err == nil || !strings.Contains(err.Error(), "user_namespace_resource_quota") {
		t.Errorf("a template expanding to no quantity: %v", err)
	}
	cfg.UserNamespaceResourceQuota = map[string]string{"limits.memory": "8Gi"}
	o, err := Plan(t.Context(), naming.Server{Username: "ada"}, cfg, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o.NetworkPolicy == nil || o.ResourceQuota == nil || o.NetworkPolicy.Namespace != o.State.Namespace || o.ResourceQuota.Namespace != o.State.Namespace {
		t.Fatalf("plan: policy %v, quota %v", o.NetworkPolicy, o.ResourceQuota)
	}
	// private_ips on, the rest z2jh's defaults: the internet stays open.
	cidrs := fmt.Sprint(o.NetworkPolicy.Spec.Egress)
	for _, want := range []string{"10.0.0.0/8", "0.0.0.0/0"} {
		if !strings.Contains(cidrs, want) {
			t.Errorf("egress %s lacks %s", cidrs, want)
		}
	}
}

// TestUserPodLabelsArePinned: the labels and port name z2jh's network
// policies and JupyterHub's Grafana dashboards select user pods by, with
// the extra label z2jh's values give every user pod
// (singleuser.extraLabels).
func TestUserPodLabelsArePinned(t *testing.T) {
	cfg := baseConfig("jhub")
	cfg.ExtraLabels = map[string]string{manifest.LabelNetworkAccessHub: "true"}
	o, err := Plan(t.Context(), naming.Server{Username: "ada", Servername: "gpu"}, cfg, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"app":                                "jupyterhub",
		"component":                          "singleuser-server",
		"hub.jupyter.org/network-access-hub": "true",
		"hub.jupyter.org/servername":         "gpu",
		"hub.jupyter.org/username":           "ada",
	} {
		if got := o.Pod.Labels[k]; got != want {
			t.Errorf("pod label %s = %q, want %q", k, got, want)
		}
	}
	var port *corev1.ContainerPort
	for i := range o.Pod.Spec.Containers[0].Ports {
		port = &o.Pod.Spec.Containers[0].Ports[i]
	}
	if port == nil || port.Name != "notebook-port" || port.ContainerPort != 8888 {
		t.Errorf("container port %+v, want notebook-port 8888", port)
	}
}

// TestQuotaRoomNamesAnUnsetLimit: a quota on limits.memory with a pod
// that sets no memory limit is refused up front, naming the option.
func TestQuotaRoomNamesAnUnsetLimit(t *testing.T) {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jhub-ada", Name: "singleuser"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"limits.memory": resource.MustParse("4Gi"), "requests.cpu": resource.MustParse("2")}},
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	err := quotaRoom(q, pod)
	if err == nil || !strings.Contains(err.Error(), "container notebook sets no memory limit (mem_limit)") {
		t.Errorf("quotaRoom = %v, want the unset memory limit named with mem_limit", err)
	}
	// The cpu limit defaults the cpu request: requests.cpu is satisfied.
	if err != nil && strings.Contains(err.Error(), "cpu") {
		t.Errorf("quotaRoom = %v: a cpu limit is also the request", err)
	}
}
