package manifest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// ValidationError reports a spec that would give an object the API server
// rejects (or one that cannot be what was meant), with every problem found.
type ValidationError struct {
	Kind string // "Pod", "PersistentVolumeClaim", ...
	Name string
	Errs field.ErrorList
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("manifest: invalid %s %q: %v", e.Kind, e.Name, e.Errs.ToAggregate())
}

// IsInvalid reports whether err is or wraps a *ValidationError.
func IsInvalid(err error) bool {
	var v *ValidationError
	return errors.As(err, &v)
}

func validatePod(s *PodSpec) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(s.Name, validation.IsDNS1123Subdomain)...)
	if s.Image == "" {
		errs = append(errs, field.Required(field.NewPath("image"), "the notebook image"))
	}
	errs = append(errs, validatePort(s.Port)...)
	switch s.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("image_pull_policy"), s.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	for i, name := range s.ImagePullSecrets {
		if name == "" {
			errs = append(errs, field.Required(field.NewPath("image_pull_secrets").Index(i), "a secret name"))
		}
	}
	errs = append(errs, ValidateIDs(s)...)
	if s.AllowPrivilegeEscalation < EscalationDenied || s.AllowPrivilegeEscalation > EscalationUnset {
		errs = append(errs, field.Invalid(field.NewPath("allow_privilege_escalation"), int(s.AllowPrivilegeEscalation), "unknown setting"))
	}
	errs = append(errs, validateMeta(s.Labels, s.Annotations)...)
	for _, q := range []struct {
		name string
		v    resource.Quantity
	}{{"cpu_limit", s.CPULimit}, {"cpu_guarantee", s.CPUGuarantee}, {"mem_limit", s.MemLimit}, {"mem_guarantee", s.MemGuarantee}} {
		if q.v.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath(q.name), q.v.String(), "must not be negative"))
		}
	}
	for _, rl := range []struct {
		name string
		v    corev1.ResourceList
	}{{"extra_resource_limits", s.ExtraResourceLimits}, {"extra_resource_guarantees", s.ExtraResourceGuarantees}} {
		for k, v := range rl.v {
			if v.Sign() < 0 {
				errs = append(errs, field.Invalid(field.NewPath(rl.name).Key(string(k)), v.String(), "must not be negative"))
			}
		}
	}
	for i, t := range s.Tolerations {
		errs = append(errs, validateToleration(field.NewPath("tolerations").Index(i), t)...)
	}
	if (s.SSLSecretName == "") != (s.SSLSecretMountPath == "") {
		errs = append(errs, field.Invalid(field.NewPath("ssl_secret_mount_path"), s.SSLSecretMountPath,
			"ssl_secret_name and ssl_secret_mount_path go together: set both or neither"))
	}
	for i, e := range s.Env {
		if e.Name == "" {
			errs = append(errs, field.Required(field.NewPath("env").Index(i).Child("name"), ""))
		}
	}
	return errs
}

// validateMounts checks that every volume mount of every container of
// the built pod names a volume of the pod, which the API server would
// otherwise reject. It judges the pod as built, after
// extra_container_config and extra_pod_config, which may replace the
// mounts or the volumes (KubeSpawner builds such a pod as it is). The
// paths name the options: the notebook container's mounts are
// volume_mounts, the other containers' extra_containers (or, when
// extra_pod_config replaced the containers, containers).
func validateMounts(pod *corev1.Pod, extra int) field.ErrorList {
	volumes := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = true
	}
	var errs field.ErrorList
	check := func(p *field.Path, mounts []corev1.VolumeMount) {
		for i, m := range mounts {
			if !volumes[m.Name] {
				errs = append(errs, field.NotFound(p.Index(i).Child("name"), m.Name))
			}
		}
	}
	for i, c := range pod.Spec.InitContainers {
		check(field.NewPath("init_containers").Index(i).Child("volumeMounts"), c.VolumeMounts)
	}
	for i, c := range pod.Spec.Containers {
		switch {
		case i == 0:
			check(field.NewPath("volume_mounts"), c.VolumeMounts)
		case len(pod.Spec.Containers) == extra+1:
			check(field.NewPath("extra_containers").Index(i-1).Child("volumeMounts"), c.VolumeMounts)
		default:
			check(field.NewPath("containers").Index(i).Child("volumeMounts"), c.VolumeMounts)
		}
	}
	return errs
}

// validateName checks an object name with one of apimachinery's
// validators (which one depends on the kind).
func validateName(name string, check func(string) []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range check(name) {
		errs = append(errs, field.Invalid(field.NewPath("name"), name, msg))
	}
	return errs
}

func validatePort(port int32) field.ErrorList {
	if port < 1 || port > 65535 {
		return field.ErrorList{field.Invalid(field.NewPath("port"), port, "must be between 1 and 65535")}
	}
	return nil
}

func validateLabels(p *field.Path, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	for k, v := range labels {
		for _, msg := range isQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range isValidLabelValue(v) {
			errs = append(errs, field.Invalid(p.Key(k), v, msg))
		}
	}
	return errs
}

func validateAnnotations(p *field.Path, annotations map[string]string) field.ErrorList {
	var errs field.ErrorList
	for k := range annotations {
		for _, msg := range isQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
	}
	return errs
}

func validateToleration(p *field.Path, t corev1.Toleration) field.ErrorList {
	var errs field.ErrorList
	switch t.Operator {
	case "", corev1.TolerationOpEqual:
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty when operator is Exists"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator,
			[]corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect,
			[]corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
	}
	if t.Key != "" {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(p.Child("tolerationSeconds"), *t.TolerationSeconds, "needs effect NoExecute"))
	}
	return errs
}

// restrict fills what the Pod Security "restricted" profile needs wherever
// the spec left it unset.
func restrict(psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if psc.RunAsNonRoot == nil && csc.RunAsNonRoot == nil {
		psc.RunAsNonRoot = ptr.To(true)
	}
	if psc.SeccompProfile == nil && csc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if csc.AllowPrivilegeEscalation == nil {
		csc.AllowPrivilegeEscalation = ptr.To(false)
	}
	if csc.Capabilities == nil {
		csc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	} else if len(csc.Capabilities.Drop) == 0 {
		csc.Capabilities.Drop = []corev1.Capability{"ALL"}
	}
	return psc, csc
}

// validKeys holds label and annotation keys found valid. The keys of a
// hub's objects are a few, the same on every start, while checking one
// runs regular expressions: each is checked once per process. Invalid ones are
// not kept (their errors are built each time), and each set stops growing
// at maxValid entries, so that names made from user input (a user's
// label value) cannot grow it without bound.
var validKeys validSet

const maxValid = 4096

type validSet struct {
	m sync.Map // string → struct{}
	n atomic.Int64
}

// check returns the errors of s by validate, remembering s when it is
// valid.
func (v *validSet) check(s string, validate func(string) []string) []string {
	if _, ok := v.m.Load(s); ok {
		return nil
	}
	errs := validate(s)
	if len(errs) == 0 && v.n.Load() < maxValid {
		if _, loaded := v.m.LoadOrStore(s, struct{}{}); !loaded {
			v.n.Add(1)
		}
	}
	return errs
}

// isQualifiedName is validation.IsQualifiedName, remembering valid keys.
func isQualifiedName(k string) []string { return validKeys.check(k, validation.IsQualifiedName) }

// isValidLabelValue is validation.IsValidLabelValue. A valid value is
// recognised by labelValueOK, without the regular expression (each user's
// own label value is new, so a cache would not help); only an invalid one
// is handed to apimachinery, for its verdict and messages.
func isValidLabelValue(v string) []string {
	if labelValueOK(v) {
		return nil
	}
	return validation.IsValidLabelValue(v)
}

// labelValueOK reports whether v is a valid label value: at most 63
// characters, empty or alphanumeric at both ends, with '-', '_' and '.'
// allowed between (apimachinery's LabelValueMaxLength and
// labelValueFmt). TestLabelValueOKMatchesApimachinery holds it to
// validation.IsValidLabelValue.
func labelValueOK(v string) bool {
	if len(v) > validation.LabelValueMaxLength {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum {
			continue
		}
		if i == 0 || i == len(v)-1 || (c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

// ValidateIDs mirrors the API server's ValidatePodSecurityContext and
// ValidateSecurityContext on the ids make_pod puts there: runAsUser by
// IsValidUserID, runAsGroup, fsGroup and supplementalGroups by
// IsValidGroupID (0 to 2^31-1). An id the security context options
// replace (or null out) never reaches the pod, and is not checked.
func ValidateIDs(s *PodSpec) field.ErrorList {
	csc, psc := s.ContainerSecurityContext, s.PodSecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	cnull, pnull := s.ContainerSecurityContextNull, s.PodSecurityContextNull
	var errs field.ErrorList
	for _, id := range []struct {
		key      string
		v        *int64
		replaced bool
		check    func(int64) []string
	}{
		{"uid", s.UID, csc.RunAsUser != nil || slices.Contains(cnull, "runAsUser"), validation.IsValidUserID},
		{"gid", s.GID, csc.RunAsGroup != nil || slices.Contains(cnull, "runAsGroup"), validation.IsValidGroupID},
		{"fs_gid", s.FSGID, psc.FSGroup != nil || slices.Contains(pnull, "fsGroup"), validation.IsValidGroupID},
	} {
		if id.v != nil && !id.replaced {
			for _, msg := range id.check(*id.v) {
				errs = append(errs, field.Invalid(field.NewPath(id.key), *id.v, msg))
			}
		}
	}
	if psc.SupplementalGroups == nil && !slices.Contains(pnull, "supplementalGroups") {
		for i, g := range s.SupplementalGIDs {
			for _, msg := range validation.IsValidGroupID(g) {
				errs = append(errs, field.Invalid(field.NewPath("supplemental_gids").Index(i), g, msg))
			}
		}
	}
	return errs
}
