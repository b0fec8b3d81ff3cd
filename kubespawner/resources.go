package kubespawner

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/manifest"
)

// validateStorage checks the claim storage_pvc_ensure makes and where
// the internal-SSL secret is mounted.
func (c *Config) validateStorage() field.ErrorList {
	var errs field.ErrorList
	// Storage: the claim's spec, when storage_pvc_ensure makes one
	// (ValidatePersistentVolumeClaimSpec); without a claim these options
	// render nothing, as in KubeSpawner.
	if c.StoragePVCEnsure {
		errs = append(errs, c.checkClaim()...)
	}
	// Not an API server check: the API server accepts a relative
	// mountPath, but the container runtime refuses to start such a
	// container; KubeSpawner uses secret_mount_path with internal SSL only.
	if c.SecretMountPath != "" && !path.IsAbs(c.SecretMountPath) {
		errs = append(errs, field.Invalid(field.NewPath("secret_mount_path"), c.SecretMountPath, "must be an absolute path"))
	}
	return errs
}

// validatePod checks the pod options the manifest builder would reject
// only at start.
func (c *Config) validatePod() field.ErrorList {
	var errs field.ErrorList
	// Pod options the manifest builder would reject only at start.
	if !isTemplate(c.Pod.ServiceAccount) {
		// ValidatePodSpec: ValidateServiceAccountName (a DNS-1123
		// subdomain). A templated one is checked rendered, by Plan.
		errs = append(errs, checkName("service_account", c.Pod.ServiceAccount, validation.IsDNS1123Subdomain)...)
	}
	// ValidatePodSpec: ValidatePriorityClassName (a DNS-1123 subdomain);
	// the Priority admission plugin refuses it first (no such class).
	errs = append(errs, checkName("priority_class_name", c.Pod.PriorityClassName, validation.IsDNS1123Subdomain)...)
	// scheduler_name is not checked: the API server accepts any name
	// (a scheduler's name is whatever its configuration says).
	// image_pull_secrets are not checked: the API server does not
	// validate imagePullSecrets names (a secret that cannot exist is
	// skipped by the kubelet with an event).
	switch c.Pod.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("image_pull_policy"), c.Pod.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	errs = append(errs, metav1validation.ValidateLabels(c.Pod.NodeSelector, field.NewPath("node_selector"))...)
	errs = append(errs, checkResources(c)...)
	// uid, gid, fs_gid and supplemental_gids as the API server checks
	// them in the pod (manifest.ValidateIDs).
	errs = append(errs, manifest.ValidateIDs(&c.Pod)...)
	return errs
}

// maxQuantity bounds every quantity: the API server keeps quantities as
// int64 values, and apimachinery's Cmp and String take time that grows
// with the exponent, so "1e999999999" would hang a start.
const maxQuantity = float64(math.MaxInt64)

// checkQuantity reports a negative or oversize quantity; ok is false then,
// and the caller must not compare or print q (both can take minutes for
// a huge exponent).
func checkQuantity(p *field.Path, q resource.Quantity) (errs field.ErrorList, ok bool) {
	if f := q.AsApproximateFloat64(); math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) >= maxQuantity {
		return field.ErrorList{field.Invalid(p, fmt.Sprintf("%g", f), "is too large (at most 2^63-1)")}, false
	}
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, q.String(), "must not be negative")}, false
	}
	return nil, true
}

// checkResources checks the resource quantities: none negative or
// oversize (the API server's ValidateResourceQuantityValue; int64
// values), and resource names qualified (ValidateResourceName). The
// guarantee-above-limit check is on the container's final resources, as
// make_pod builds them (see requestsWithinLimits), and only once a
// profile has had its say.
func checkResources(c *Config) field.ErrorList {
	var errs field.ErrorList
	ok := true
	for _, q := range []struct {
		name string
		v    resource.Quantity
	}{{"cpu_limit", c.Pod.CPULimit}, {"cpu_guarantee", c.Pod.CPUGuarantee}, {"mem_limit", c.Pod.MemLimit}, {"mem_guarantee", c.Pod.MemGuarantee}} {
		qerrs, qok := checkQuantity(field.NewPath(q.name), q.v)
		errs, ok = append(errs, qerrs...), ok && qok
	}
	for _, rl := range []struct {
		key string
		v   corev1.ResourceList
	}{{"extra_resource_limits", c.Pod.ExtraResourceLimits}, {"extra_resource_guarantees", c.Pod.ExtraResourceGuarantees}} {
		for _, k := range slices.Sorted(maps.Keys(rl.v)) {
			p := field.NewPath(rl.key).Key(string(k))
			for _, msg := range validation.IsQualifiedName(string(k)) {
				errs = append(errs, field.Invalid(p, string(k), msg))
			}
			qerrs, qok := checkQuantity(p, rl.v[k])
			errs, ok = append(errs, qerrs...), ok && qok
		}
	}
	final := c.resolved || (len(c.ProfileList) == 0 && c.ProfileListFunc == nil)
	if ok && final {
		errs = append(errs, requestsWithinLimits(c)...)
	}
	return errs
}

// requestsWithinLimits mirrors the API server's ValidateResourceRequirements
// rule that a request may not exceed the limit of the same resource, on
// the container's resources as KubeSpawner's make_pod builds them: cpu
// and memory from the cpu_/mem_ options when not zero, then
// extra_resource_limits and extra_resource_guarantees over them (a
// "memory" there replaces mem_limit). The error names the option that
// set the request and the one that set the limit.
func requestsWithinLimits(c *Config) field.ErrorList {
	type entry struct {
		q      resource.Quantity
		option *field.Path
	}
	build := func(cpu, mem resource.Quantity, cpuKey, memKey, extraKey string, extra corev1.ResourceList) map[corev1.ResourceName]entry {
		out := map[corev1.ResourceName]entry{}
		if !cpu.IsZero() {
			out[corev1.ResourceCPU] = entry{cpu, field.NewPath(cpuKey)}
		}
		if !mem.IsZero() {
			out[corev1.ResourceMemory] = entry{mem, field.NewPath(memKey)}
		}
		for k, v := range extra {
			out[k] = entry{v, field.NewPath(extraKey).Key(string(k))}
		}
		return out
	}
	limits := build(c.Pod.CPULimit, c.Pod.MemLimit, "cpu_limit", "mem_limit", "extra_resource_limits", c.Pod.ExtraResourceLimits)
	requests := build(c.Pod.CPUGuarantee, c.Pod.MemGuarantee, "cpu_guarantee", "mem_guarantee", "extra_resource_guarantees", c.Pod.ExtraResourceGuarantees)
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		req := requests[name]
		limit, ok := limits[name]
		if ok && req.q.Cmp(limit.q) > 0 {
			errs = append(errs, field.Invalid(req.option, req.q.String(),
				fmt.Sprintf("the container's %s request must not exceed its limit %s (set by %s)", name, limit.q.String(), limit.option)))
		}
	}
	return errs
}

// checkClaim checks the claim storage_pvc_ensure makes as the API server
// does: a positive storage request (ValidatePersistentVolumeClaimSpec:
// ValidateResourceQuantityValue, and a request is required), a storage
// class name that is a DNS-1123 subdomain (ValidateClassName), access
// modes (at least one, each supported, ReadWriteOncePod alone) and the
// selector (ValidateLabelSelector).
func (c *Config) checkClaim() field.ErrorList {
	var errs field.ErrorList
	qerrs, _ := checkQuantity(field.NewPath("storage_capacity"), c.StorageCapacity)
	errs = append(errs, qerrs...)
	if c.StorageCapacity.IsZero() {
		errs = append(errs, field.Required(field.NewPath("storage_capacity"), "storage_pvc_ensure needs a capacity"))
	}
	if c.StorageClass != nil {
		errs = append(errs, checkName("storage_class", *c.StorageClass, validation.IsDNS1123Subdomain)...)
	}
	// The claim's access modes, as ValidatePersistentVolumeClaimSpec
	// checks them: at least one, each supported, ReadWriteOncePod alone.
	if c.StorageAccessModes != nil && len(c.StorageAccessModes) == 0 {
		errs = append(errs, field.Required(field.NewPath("storage_access_modes"),
			"storage_pvc_ensure makes a claim, and the API server refuses a claim without access modes (KubeSpawner sends [] as it is)"))
	}
	if slices.Contains(c.StorageAccessModes, corev1.ReadWriteOncePod) && len(c.StorageAccessModes) > 1 {
		errs = append(errs, field.Forbidden(field.NewPath("storage_access_modes"), "may not use ReadWriteOncePod with other access modes"))
	}
	for i, m := range c.StorageAccessModes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("storage_access_modes").Index(i), m,
				[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod}))
		}
	}
	if sel, _ := json.Marshal(c.StorageSelector); c.StorageSelector != nil && !isTemplate(string(sel)) {
		// A templated selector is checked rendered, by Plan.
		errs = append(errs, metav1validation.ValidateLabelSelector(c.StorageSelector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("storage_selector"))...)
	}
	return errs
}
