package kubespawner

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// egressRuleKeys are network_policy.egress_allow_rules' keys.
var egressRuleKeys = []string{"cloud_metadata_server", "dns_ports_cloud_metadata_server", "dns_ports_kube_system_namespace",
	"dns_ports_private_ips", "non_private_ips", "private_ips"}

// validateNamespaceObjects checks network_policy and
// user_namespace_resource_quota, which act only in user namespaces.
func (c *Config) validateNamespaceObjects() field.ErrorList {
	var errs field.ErrorList
	if np := c.NetworkPolicy; np != nil && np.Enabled {
		path := field.NewPath("network_policy")
		if !c.EnableUserNamespaces {
			errs = append(errs, field.Invalid(path.Child("enabled"), true,
				"acts in user namespaces only (enable_user_namespaces); in the hub's namespace apply deploy/networkpolicy.yaml or z2jh's singleuser.networkPolicy"))
		}
		switch np.InterNamespaceAccessLabels {
		case "", "ignore", "accept":
		default:
			errs = append(errs, field.NotSupported(path.Child("inter_namespace_access_labels"), np.InterNamespaceAccessLabels, []string{"ignore", "accept"}))
		}
		for k := range np.EgressAllowRules {
			if !slices.Contains(egressRuleKeys, k) {
				errs = append(errs, field.NotSupported(path.Child("egress_allow_rules").Key(k), k, egressRuleKeys))
			}
		}
	}
	if len(c.UserNamespaceResourceQuota) > 0 {
		path := field.NewPath("user_namespace_resource_quota")
		if !c.EnableUserNamespaces {
			errs = append(errs, field.Invalid(path, c.UserNamespaceResourceQuota, "acts in user namespaces only (enable_user_namespaces)"))
		}
		for k, v := range c.UserNamespaceResourceQuota {
			if !quotaResourceName(k) {
				errs = append(errs, field.NotSupported(path.Key(k), k, standardQuotaResources))
				continue
			}
			if strings.Contains(v, "{") {
				continue // a template: checked once expanded, at Plan
			}
			if _, err := resource.ParseQuantity(v); err != nil {
				errs = append(errs, field.Invalid(path.Key(k), v, "must be a quantity, e.g. 4, 500m, 8Gi"))
			}
		}
	}
	return errs
}

// standardQuotaResources are the names a ResourceQuota limits without a
// "/" (the API server's helper.IsStandardQuotaResourceName, used by
// ValidateResourceQuota): any other name without "/" is refused by it.
var standardQuotaResources = []string{
	"cpu", "memory", "ephemeral-storage", "storage",
	"requests.cpu", "requests.memory", "requests.ephemeral-storage", "requests.storage",
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
	"pods", "services", "services.nodeports", "services.loadbalancers", "replicationcontrollers",
	"resourcequotas", "secrets", "configmaps", "persistentvolumeclaims",
}

// quotaResourceName mirrors validateResourceQuotaResourceName: a name with
// a "/" (an extended resource, a storage class's, count/<resource>) is
// the API server's to check; one without must be standard, or huge pages.
func quotaResourceName(name string) bool {
	return strings.Contains(name, "/") || slices.Contains(standardQuotaResources, name) ||
		strings.HasPrefix(name, "hugepages-") || strings.HasPrefix(name, "requests.hugepages-") || strings.HasPrefix(name, "limits.hugepages-")
}
