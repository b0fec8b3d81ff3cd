package manifest

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LabelNetworkAccessSingleuser is the label z2jh gives the pods (hub,
// proxy) that may reach user servers; LabelNetworkAccessHub the label of
// the pods that may reach the hub.
const (
	LabelNetworkAccessSingleuser = "hub.jupyter.org/network-access-singleuser"
	LabelNetworkAccessHub        = "hub.jupyter.org/network-access-hub"
)

// DefaultCloudMetadataIP is the cloud metadata server's address, which
// z2jh's singleuser policy closes by default.
const DefaultCloudMetadataIP = "169.254.169.254"

// privateRanges are the RFC 1918 ranges z2jh's egress rules name.
var privateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}

// EgressAllowRules are z2jh's singleuser.networkPolicy.egressAllowRules:
// which destinations user servers may reach beyond the hub and the proxy.
// DefaultEgressAllowRules are z2jh's defaults.
type EgressAllowRules struct {
	CloudMetadataServer         bool `json:"cloud_metadata_server"`
	DNSPortsCloudMetadataServer bool `json:"dns_ports_cloud_metadata_server"`
	DNSPortsKubeSystemNamespace bool `json:"dns_ports_kube_system_namespace"`
	DNSPortsPrivateIPs          bool `json:"dns_ports_private_ips"`
	NonPrivateIPs               bool `json:"non_private_ips"`
	PrivateIPs                  bool `json:"private_ips"`
}

// DefaultEgressAllowRules are z2jh 4.x's defaults: DNS, and the internet
// but no private range and not the cloud metadata server.
var DefaultEgressAllowRules = EgressAllowRules{
	DNSPortsCloudMetadataServer: true, DNSPortsKubeSystemNamespace: true, DNSPortsPrivateIPs: true, NonPrivateIPs: true,
}

// NetworkPolicySpec describes the NetworkPolicy of the user servers in one
// namespace, with the semantics of z2jh's singleuser policy
// (templates/singleuser/netpol.yaml) for servers whose hub and proxy run
// in another namespace (HubNamespace): ingress only to the notebook port
// from pods labelled LabelNetworkAccessSingleuser in the hub's namespace
// (or, with InterNamespaceAccess, from such pods anywhere and from
// namespaces so labelled); egress to the hub's port, the proxy's and
// autohttps' ports, and what EgressAllowRules opens.
type NetworkPolicySpec struct {
	Name string
	// ServerLabels select the user servers (component=singleuser-server).
	ServerLabels map[string]string
	// HubNamespace is where the hub, proxy and autohttps pods run;
	// "" means the policy's own namespace.
	HubNamespace string
	// HubLabels, ProxyLabels and AutoHTTPSLabels select those pods
	// (z2jh's: app=jupyterhub and component hub, proxy, autohttps).
	HubLabels, ProxyLabels, AutoHTTPSLabels map[string]string
	// HubPort is the hub's API port (8081).
	HubPort int32
	// AllowedIngressPorts are open to any source (z2jh's
	// allowedIngressPorts).
	AllowedIngressPorts []intstr.IntOrString
	// InterNamespaceAccess is z2jh's interNamespaceAccessLabels: accept.
	InterNamespaceAccess bool
	EgressAllowRules     EgressAllowRules
	// CloudMetadataIP is the metadata server's address
	// (DefaultCloudMetadataIP).
	CloudMetadataIP string
	// Ingress and Egress are added as they are (z2jh's ingress, egress).
	Ingress     []networkingv1.NetworkPolicyIngressRule
	Egress      []networkingv1.NetworkPolicyEgressRule
	Labels      map[string]string
	Annotations map[string]string
}

// NetworkPolicy builds the user servers' NetworkPolicy.
func NetworkPolicy(spec NetworkPolicySpec) (*networkingv1.NetworkPolicy, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Subdomain)...)
	if len(spec.ServerLabels) == 0 {
		errs = append(errs, field.Required(field.NewPath("serverLabels"), "the policy would select every pod of the namespace"))
	}
	if spec.HubNamespace != "" {
		for _, msg := range validation.IsDNS1123Label(spec.HubNamespace) {
			errs = append(errs, field.Invalid(field.NewPath("hubNamespace"), spec.HubNamespace, msg))
		}
	}
	for _, msg := range validation.IsValidPortNum(int(spec.HubPort)) {
		errs = append(errs, field.Invalid(field.NewPath("hubPort"), spec.HubPort, msg))
	}
	metadataIP := spec.CloudMetadataIP
	if metadataIP == "" {
		metadataIP = DefaultCloudMetadataIP
	}
	if a, err := netip.ParseAddr(metadataIP); err != nil || !a.Is4() {
		errs = append(errs, field.Invalid(field.NewPath("cloudMetadataIP"), metadataIP, "must be an IPv4 address"))
	}
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "NetworkPolicy", Name: spec.Name, Errs: errs}
	}
	metadata := metadataIP + "/32"

	// peer selects pods by labels in the hub's namespace.
	peer := func(labels map[string]string) networkingv1.NetworkPolicyPeer {
		p := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: cloneMap(labels)}}
		if spec.HubNamespace != "" {
			p.NamespaceSelector = namespaceNamed(spec.HubNamespace)
		}
		return p
	}
	port := func(p intstr.IntOrString, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
		pp := networkingv1.NetworkPolicyPort{Port: &p}
		if proto != "" {
			pp.Protocol = &proto
		}
		return pp
	}
	ipBlock := func(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}

	var ingress []networkingv1.NetworkPolicyIngressRule
	if len(spec.AllowedIngressPorts) > 0 {
		r := networkingv1.NetworkPolicyIngressRule{}
		for _, p := range spec.AllowedIngressPorts {
			r.Ports = append(r.Ports, port(p, ""))
		}
		ingress = append(ingress, r)
	}
	access := map[string]string{LabelNetworkAccessSingleuser: "true"}
	from := []networkingv1.NetworkPolicyPeer{peer(access)}
	if spec.InterNamespaceAccess {
		from = []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: cloneMap(access)}, NamespaceSelector: &metav1.LabelSelector{}},
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: cloneMap(access)}},
		}
	}
	ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromString("notebook-port"), "")},
		From:  from,
	})
	ingress = append(ingress, spec.Ingress...)

	egress := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{peer(spec.HubLabels)}, Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(spec.HubPort), "")}},
		{To: []networkingv1.NetworkPolicyPeer{peer(spec.ProxyLabels)}, Ports: []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(8000), "")}},
		{To: []networkingv1.NetworkPolicyPeer{peer(spec.AutoHTTPSLabels)}, Ports: []networkingv1.NetworkPolicyPort{
			port(intstr.FromInt32(8080), ""), port(intstr.FromInt32(8443), "")}},
	}
	rules := spec.EgressAllowRules
	if rules.DNSPortsCloudMetadataServer || rules.DNSPortsKubeSystemNamespace || rules.DNSPortsPrivateIPs {
		dns := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{
			port(intstr.FromInt32(53), corev1.ProtocolUDP), port(intstr.FromInt32(53), corev1.ProtocolTCP)}}
		if rules.DNSPortsCloudMetadataServer {
			dns.To = append(dns.To, ipBlock(metadata))
		}
		if rules.DNSPortsKubeSystemNamespace {
			dns.To = append(dns.To, networkingv1.NetworkPolicyPeer{NamespaceSelector: namespaceNamed(metav1.NamespaceSystem)})
		}
		if rules.DNSPortsPrivateIPs {
			for _, r := range privateRanges {
				dns.To = append(dns.To, ipBlock(r))
			}
		}
		egress = append(egress, dns)
	}
	if rules.NonPrivateIPs {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
			ipBlock("0.0.0.0/0", append(append([]string{}, privateRanges...), metadata)...)}})
	}
	if rules.PrivateIPs {
		r := networkingv1.NetworkPolicyEgressRule{}
		for _, c := range privateRanges {
			r.To = append(r.To, ipBlock(c))
		}
		egress = append(egress, r)
	}
	if rules.CloudMetadataServer {
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipBlock(metadata)}})
	}
	egress = append(egress, spec.Egress...)

	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, nil),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: cloneMap(spec.ServerLabels)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     ingress,
			Egress:      egress,
		},
	}, nil
}

// namespaceNamed selects the namespace name by the label every namespace
// carries (kubernetes.io/metadata.name, set by the API server since 1.21).
func namespaceNamed(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
}

// ResourceQuotaSpec describes the ResourceQuota of a user namespace
// (Nublado's per-user quota): hard limits such as limits.cpu,
// limits.memory and requests.storage.
type ResourceQuotaSpec struct {
	Name        string
	Hard        corev1.ResourceList
	Labels      map[string]string
	Annotations map[string]string
}

// ResourceQuota builds a user namespace's ResourceQuota.
func ResourceQuota(spec ResourceQuotaSpec) (*corev1.ResourceQuota, error) {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.Name, validation.IsDNS1123Subdomain)...)
	if len(spec.Hard) == 0 {
		errs = append(errs, field.Required(field.NewPath("hard"), "at least one resource"))
	}
	for name, q := range spec.Hard {
		// As the API server's ValidateResourceQuota: a qualified resource
		// name and a quantity that is not negative.
		for _, msg := range validation.IsQualifiedName(string(name)) {
			errs = append(errs, field.Invalid(field.NewPath("hard").Key(string(name)), name, msg))
		}
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath("hard").Key(string(name)), q.String(), "must not be negative"))
		}
	}
	errs = append(errs, validateMeta(spec.Labels, spec.Annotations)...)
	if len(errs) > 0 {
		return nil, &ValidationError{Kind: "ResourceQuota", Name: spec.Name, Errs: errs}
	}
	hard := make(corev1.ResourceList, len(spec.Hard))
	for k, v := range spec.Hard {
		hard[k] = v.DeepCopy()
	}
	return &corev1.ResourceQuota{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"},
		ObjectMeta: objectMeta(spec.Name, spec.Labels, spec.Annotations, nil),
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}, nil
}

// ContainerRequests are a container's requests after the API server's
// defaulting: a resource with a limit and no request requests its limit.
func ContainerRequests(r corev1.ResourceRequirements) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range r.Limits {
		out[k] = v
	}
	for k, v := range r.Requests {
		out[k] = v
	}
	return out
}

// PodUsage is what a pod counts against a ResourceQuota, as the API
// server's quota evaluator counts it: for cpu and memory, the larger of
// the sum over containers and the largest init container (plus the pod's
// overhead), as requests.* (cpu and memory alone mean requests) and
// limits.*; and one pod.
func PodUsage(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	for _, kind := range []struct {
		list func(corev1.ResourceRequirements) corev1.ResourceList
		cpu  corev1.ResourceName
		mem  corev1.ResourceName
	}{
		{ContainerRequests, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory},
		{func(r corev1.ResourceRequirements) corev1.ResourceList { return r.Limits }, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory},
	} {
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			var sum, maxInit resource.Quantity
			for _, c := range pod.Spec.Containers {
				if q, ok := kind.list(c.Resources)[res]; ok {
					sum.Add(q)
				}
			}
			for _, c := range pod.Spec.InitContainers {
				if q, ok := kind.list(c.Resources)[res]; ok && q.Cmp(maxInit) > 0 {
					maxInit = q.DeepCopy()
				}
			}
			if maxInit.Cmp(sum) > 0 {
				sum = maxInit
			}
			if q, ok := pod.Spec.Overhead[res]; ok {
				sum.Add(q)
			}
			name := kind.cpu
			if res == corev1.ResourceMemory {
				name = kind.mem
			}
			out[name] = sum
			if name == corev1.ResourceRequestsCPU {
				out[corev1.ResourceCPU] = sum.DeepCopy()
			}
			if name == corev1.ResourceRequestsMemory {
				out[corev1.ResourceMemory] = sum.DeepCopy()
			}
		}
	}
	return out
}
