package spawner

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// UserNamespacePolicyName and UserNamespaceQuotaName name the
// NetworkPolicy and ResourceQuota of a user namespace.
const (
	UserNamespacePolicyName = "singleuser"
	UserNamespaceQuotaName  = "singleuser"
)

// namespaceObjects renders the user namespace's NetworkPolicy and
// ResourceQuota (each nil when not configured). They carry spawnkit's
// managed-by label (and cluster's, when set) and the user's name (no
// server's: they are the user's), and select the servers by the
// component label.
func namespaceObjects(cfg *kubespawner.Config, server naming.Server, r *rendered, ns, cluster string) (*networkingv1.NetworkPolicy, *corev1.ResourceQuota, error) {
	labels := withManagedBy(map[string]string{naming.LabelComponent: "singleuser-namespace"}, cluster)
	ann := map[string]string{naming.AnnotationUsername: server.Username}
	var policy *networkingv1.NetworkPolicy
	if np := cfg.NetworkPolicy; np != nil && np.Enabled {
		hubNS := np.HubNamespace
		if hubNS == "" {
			hubNS = cfg.Namespace
		}
		rules := manifest.DefaultEgressAllowRules
		for k, v := range np.EgressAllowRules {
			switch k {
			case "cloud_metadata_server":
				rules.CloudMetadataServer = v
			case "dns_ports_cloud_metadata_server":
				rules.DNSPortsCloudMetadataServer = v
			case "dns_ports_kube_system_namespace":
				rules.DNSPortsKubeSystemNamespace = v
			case "dns_ports_private_ips":
				rules.DNSPortsPrivateIPs = v
			case "non_private_ips":
				rules.NonPrivateIPs = v
			case "private_ips":
				rules.PrivateIPs = v
			}
		}
		or := func(m map[string]string, component string) map[string]string {
			if len(m) > 0 {
				return m
			}
			return map[string]string{"app": "jupyterhub", naming.LabelComponent: component}
		}
		port := np.HubPort
		if port == 0 {
			port = 8081
		}
		var err error
		policy, err = manifest.NetworkPolicy(manifest.NetworkPolicySpec{
			Name:                 UserNamespacePolicyName,
			ServerLabels:         map[string]string{naming.LabelComponent: cfg.ComponentLabel},
			HubNamespace:         hubNS,
			HubLabels:            or(np.HubPodLabels, "hub"),
			ProxyLabels:          or(np.ProxyPodLabels, "proxy"),
			AutoHTTPSLabels:      or(np.AutoHTTPSPodLabels, "autohttps"),
			HubPort:              port,
			AllowedIngressPorts:  np.AllowedIngressPorts,
			InterNamespaceAccess: np.InterNamespaceAccessLabels == "accept",
			EgressAllowRules:     rules,
			CloudMetadataIP:      np.CloudMetadataIP,
			Ingress:              np.Ingress,
			Egress:               np.Egress,
			Labels:               labels,
			Annotations:          ann,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("spawner: network_policy: %w", err)
		}
		policy.Namespace = ns
	}
	var quota *corev1.ResourceQuota
	if len(r.quota) > 0 {
		hard := corev1.ResourceList{}
		for k, v := range r.quota {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, nil, fmt.Errorf("spawner: user_namespace_resource_quota: %s: %q is not a quantity: %w", k, v, err)
			}
			hard[corev1.ResourceName(k)] = q
		}
		var err error
		if quota, err = manifest.ResourceQuota(manifest.ResourceQuotaSpec{Name: UserNamespaceQuotaName, Hard: hard, Labels: labels, Annotations: ann}); err != nil {
			return nil, nil, fmt.Errorf("spawner: user_namespace_resource_quota: %w", err)
		}
		quota.Namespace = ns
	}
	return policy, quota, nil
}
