package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

func userPolicySpec() NetworkPolicySpec {
	return NetworkPolicySpec{
		Name:             "singleuser",
		ServerLabels:     map[string]string{"component": "singleuser-server"},
		HubNamespace:     "jhub",
		HubLabels:        map[string]string{"app": "jupyterhub", "component": "hub"},
		ProxyLabels:      map[string]string{"app": "jupyterhub", "component": "proxy"},
		AutoHTTPSLabels:  map[string]string{"app": "jupyterhub", "component": "autohttps"},
		HubPort:          8081,
		EgressAllowRules: DefaultEgressAllowRules,
	}
}

// egressCIDRs are the CIDRs an egress rule opens, each with its excepts.
func egressCIDRs(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range np.Spec.Egress {
		for _, to := range r.To {
			if to.IPBlock != nil {
				s := to.IPBlock.CIDR
				if len(r.Ports) > 0 {
					s += ":" + r.Ports[0].Port.String()
				}
				if len(to.IPBlock.Except) > 0 {
					s += " except " + strings.Join(to.IPBlock.Except, ",")
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// TestNetworkPolicyHasZ2JHSemantics pins the rules of z2jh's singleuser
// policy (templates/singleuser/netpol.yaml, _helpers-netpol.tpl) as they
// apply to servers whose hub runs in another namespace.
func TestNetworkPolicyHasZ2JHSemantics(t *testing.T) {
	np, err := NetworkPolicy(userPolicySpec())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy types %v: both directions must be closed by default", np.Spec.PolicyTypes)
	}
	if np.Spec.PodSelector.MatchLabels["component"] != "singleuser-server" {
		t.Errorf("selects %v, want the user servers", np.Spec.PodSelector)
	}
	// Ingress: the notebook port only, from labelled pods of the hub's
	// namespace only.
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("ingress rules %+v, want one", np.Spec.Ingress)
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || in.Ports[0].Port.String() != "notebook-port" || len(in.From) != 1 {
		t.Fatalf("ingress %+v, want notebook-port from one peer", in)
	}
	from := in.From[0]
	if from.PodSelector.MatchLabels[LabelNetworkAccessSingleuser] != "true" || from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "jhub" {
		t.Errorf("ingress from %+v, want labelled pods in namespace jhub", from)
	}
	// Egress to the hub, the proxy and autohttps, in the hub's namespace.
	for i, want := range []struct {
		component string
		ports     []string
	}{{"hub", []string{"8081"}}, {"proxy", []string{"8000"}}, {"autohttps", []string{"8080", "8443"}}} {
		r := np.Spec.Egress[i]
		var ports []string
		for _, p := range r.Ports {
			ports = append(ports, p.Port.String())
		}
		if r.To[0].PodSelector.MatchLabels["component"] != want.component || r.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "jhub" || !slices.Equal(ports, want.ports) {
			t.Errorf("egress rule %d = %+v, want %s on %v in jhub", i, r, want.component, want.ports)
		}
	}
	// DNS to the metadata server, kube-system and private ranges; the
	// internet but neither private ranges nor the metadata server.
	got := egressCIDRs(np)
	want := []string{"169.254.169.254/32:53", "10.0.0.0/8:53", "172.16.0.0/12:53", "192.168.0.0/16:53",
		"0.0.0.0/0 except 10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,169.254.169.254/32"}
	if !slices.Equal(got, want) {
		t.Errorf("egress CIDRs\n%q\nwant\n%q", got, want)
	}

	// Opening private ranges and the metadata server, and accepting
	// labels from other namespaces.
	spec := userPolicySpec()
	spec.EgressAllowRules = EgressAllowRules{PrivateIPs: true, CloudMetadataServer: true}
	spec.InterNamespaceAccess = true
	spec.AllowedIngressPorts = []intstr.IntOrString{intstr.FromInt32(9999)}
	np, err = NetworkPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	got = egressCIDRs(np)
	want = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.169.254/32"}
	if !slices.Equal(got, want) {
		t.Errorf("with private_ips and cloud_metadata_server: egress CIDRs %q, want %q", got, want)
	}
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 9999 || len(np.Spec.Ingress[0].From) != 0 {
		t.Errorf("allowed ingress port: %+v", np.Spec.Ingress)
	}
	if f := np.Spec.Ingress[1].From; len(f) != 2 || f[0].NamespaceSelector == nil || len(f[0].NamespaceSelector.MatchLabels) != 0 ||
		f[1].NamespaceSelector.MatchLabels[LabelNetworkAccessSingleuser] != "true" {
		t.Errorf("inter-namespace access: from %+v", f)
	}
}

func TestNamespaceObjectsRefuseBadInput(t *testing.T) {
	for name, spec := range map[string]NetworkPolicySpec{
		"no server labels": func() NetworkPolicySpec { s := userPolicySpec(); s.ServerLabels = nil; return s }(),
		"hubNamespace":     func() NetworkPolicySpec { s := userPolicySpec(); s.HubNamespace = "Not_A_Namespace"; return s }(),
		"hubPort":          func() NetworkPolicySpec { s := userPolicySpec(); s.HubPort = 0; return s }(),
		"cloudMetadataIP":  func() NetworkPolicySpec { s := userPolicySpec(); s.CloudMetadataIP = "metadata"; return s }(),
	} {
		if _, err := NetworkPolicy(spec); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ResourceQuota(ResourceQuotaSpec{Name: "q"}); err == nil || !strings.Contains(err.Error(), "hard") {
		t.Errorf("a quota without limits: %v", err)
	}
	if _, err := ResourceQuota(ResourceQuotaSpec{Name: "q", Hard: corev1.ResourceList{"limits.memory": resource.MustParse("-1")}}); err == nil {
		t.Error("a negative limit accepted")
	}
}

func TestPodUsageCountsAsTheQuotaEvaluator(t *testing.T) {
	res := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Resources: res("500m", "1Gi")}, {Resources: res("250m", "512Mi")}},
		InitContainers: []corev1.Container{{Resources: res("1", "256Mi")}},
		Overhead:       corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}
	u := PodUsage(pod)
	for name, want := range map[corev1.ResourceName]string{
		"limits.cpu": "1", "requests.cpu": "1", "cpu": "1", // the init container is larger
		"limits.memory": "1600Mi", "requests.memory": "1600Mi", "memory": "1600Mi", // the sum plus overhead
		"pods": "1",
	} {
		q := u[name]
		if q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %s, want %s", name, q.String(), want)
		}
	}
}

// TestAPIServerAcceptsNamespaceObjects: the NetworkPolicy (default and
// every rule on) and the ResourceQuota pass a real API server's
// validation (server-side dry run, strict fields).
func TestAPIServerAcceptsNamespaceObjects(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manifest-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}
	all := userPolicySpec()
	all.EgressAllowRules = EgressAllowRules{true, true, true, true, true, true}
	all.InterNamespaceAccess = true
	all.AllowedIngressPorts = []intstr.IntOrString{intstr.FromInt32(9999), intstr.FromString("http")}
	for name, spec := range map[string]NetworkPolicySpec{"default": userPolicySpec(), "every rule": all} {
		np, err := NetworkPolicy(spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.NetworkingV1().NetworkPolicies(ns.Name).Create(ctx, np, dry); err != nil {
			t.Errorf("%s policy refused: %v", name, err)
		}
	}
	q, err := ResourceQuota(ResourceQuotaSpec{Name: "singleuser", Hard: corev1.ResourceList{
		"limits.cpu": resource.MustParse("4"), "limits.memory": resource.MustParse("8Gi"), "requests.storage": resource.MustParse("20Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns.Name).Create(ctx, q, dry); err != nil {
		t.Errorf("quota refused: %v", err)
	}
	// What spawner's quotaResourceName refuses up front, the API server
	// refuses too: a name without "/" that is not a standard quota
	// resource (a misspelt limits.memory).
	bad := q.DeepCopy()
	bad.Spec.Hard = corev1.ResourceList{"limit.memory": resource.MustParse("8Gi")}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns.Name).Create(ctx, bad, dry); !apierrors.IsInvalid(err) {
		t.Errorf("a quota on limit.memory: %v, want Invalid from the API server", err)
	}
	for _, name := range []corev1.ResourceName{"requests.nvidia.com/gpu", "count/pods", "gold.storageclass.storage.k8s.io/requests.storage", "requests.hugepages-2Mi"} {
		ok := q.DeepCopy()
		ok.Spec.Hard = corev1.ResourceList{name: resource.MustParse("1")}
		if _, err := c.Client.CoreV1().ResourceQuotas(ns.Name).Create(ctx, ok, dry); err != nil {
			t.Errorf("a quota on %s, which spawner accepts: %v", name, err)
		}
	}
}
