package manifest

import (
	"cmp"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// Names KubeSpawner gives the parts of a user server's pod.
const (
	ContainerName = "notebook"
	PortName      = "notebook-port"
	// SSLVolumeName is the volume holding the internal-SSL secret.
	SSLVolumeName = "jupyterhub-internal-certs"
)

// PrivilegeEscalation is the notebook container's allowPrivilegeEscalation.
type PrivilegeEscalation int

const (
	// EscalationDenied sets allowPrivilegeEscalation: false, KubeSpawner's
	// default.
	EscalationDenied PrivilegeEscalation = iota
	// EscalationAllowed sets allowPrivilegeEscalation: true.
	EscalationAllowed
	// EscalationUnset leaves the field out (KubeSpawner's None), so the
	// container runtime's default applies.
	EscalationUnset
)

// PodSpec describes a user server's pod. It has a field for every argument
// of KubeSpawner 7.1's make_pod; the field comments give the argument
// name. The zero value of every optional field means "not set".
type PodSpec struct {
	Name  string // name: the pod name
	Image string // image
	// Cmd (cmd) becomes the notebook container's args; nil keeps the
	// image's default command.
	Cmd  []string
	Port int32 // port: the notebook's container port, 1-65535

	ImagePullPolicy  corev1.PullPolicy // image_pull_policy
	ImagePullSecrets []string          // image_pull_secrets: secret names
	NodeSelector     map[string]string // node_selector

	UID              *int64  // uid: runAsUser of the container (0 is kept)
	GID              *int64  // gid: runAsGroup of the container
	FSGID            *int64  // fs_gid: fsGroup of the pod
	SupplementalGIDs []int64 // supplemental_gids; empty is omitted
	Privileged       bool    // privileged
	// AllowPrivilegeEscalation (allow_privilege_escalation) defaults to
	// false.
	AllowPrivilegeEscalation PrivilegeEscalation
	// ContainerSecurityContext (container_security_context) and
	// PodSecurityContext (pod_security_context) are applied over the
	// fields derived from UID, GID, FSGID, SupplementalGIDs, Privileged and
	// AllowPrivilegeEscalation: each field they set wins, the other
	// derived fields stay (Python's dict.update).
	ContainerSecurityContext *corev1.SecurityContext
	PodSecurityContext       *corev1.PodSecurityContext
	// ContainerSecurityContextNull and PodSecurityContextNull are the
	// keys those options set to null (DecodePodSpec fills them). Python's
	// dict.update puts None there, which the API server reads as unset,
	// so a null runAsUser removes what uid set; and the context is sent
	// (empty, not left out) even when nothing else remains.
	ContainerSecurityContextNull []string
	PodSecurityContextNull       []string

	// Env (env) is ordered: a later variable with the same name replaces
	// an earlier one. The pod gets them sorted so that $(VAR) references
	// resolve; see the package documentation.
	Env []corev1.EnvVar
	// EnvKeys are the keys of make_pod's env dict, one per Env entry: a
	// dict value may carry a name of its own, and KubeSpawner sorts each
	// round by the key, not by the name. A later entry of the same key
	// replaces an earlier one (a dict assignment). Missing keys (a
	// shorter or nil EnvKeys) are the entry's Name.
	EnvKeys      []string
	WorkingDir   string               // working_dir
	Volumes      []corev1.Volume      // volumes
	VolumeMounts []corev1.VolumeMount // volume_mounts
	Labels       map[string]string    // labels
	Annotations  map[string]string    // annotations

	// Resources; a zero quantity is left out, as KubeSpawner drops falsy
	// values.
	CPULimit                resource.Quantity   // cpu_limit
	CPUGuarantee            resource.Quantity   // cpu_guarantee
	MemLimit                resource.Quantity   // mem_limit
	MemGuarantee            resource.Quantity   // mem_guarantee
	ExtraResourceLimits     corev1.ResourceList // extra_resource_limits
	ExtraResourceGuarantees corev1.ResourceList // extra_resource_guarantees

	LifecycleHooks *corev1.Lifecycle  // lifecycle_hooks
	InitContainers []corev1.Container // init_containers

	ServiceAccount string // service_account: serviceAccountName
	// AutomountServiceAccountToken (automount_service_account_token): nil
	// means false unless ServiceAccount is set, so that a user's pod never
	// gets API credentials by accident.
	AutomountServiceAccountToken *bool

	// ExtraContainerConfig (extra_container_config) and ExtraPodConfig
	// (extra_pod_config) replace whole top-level fields of the notebook
	// container and the pod spec, after everything else.
	ExtraContainerConfig Overrides
	ExtraPodConfig       Overrides
	ExtraContainers      []corev1.Container // extra_containers

	SchedulerName     string              // scheduler_name
	Tolerations       []corev1.Toleration // tolerations
	PriorityClassName string              // priority_class_name

	NodeAffinityPreferred    []corev1.PreferredSchedulingTerm // node_affinity_preferred
	NodeAffinityRequired     []corev1.NodeSelectorTerm        // node_affinity_required
	PodAffinityPreferred     []corev1.WeightedPodAffinityTerm // pod_affinity_preferred
	PodAffinityRequired      []corev1.PodAffinityTerm         // pod_affinity_required
	PodAntiAffinityPreferred []corev1.WeightedPodAffinityTerm // pod_anti_affinity_preferred
	PodAntiAffinityRequired  []corev1.PodAffinityTerm         // pod_anti_affinity_required

	// SSLSecretName (ssl_secret_name) and SSLSecretMountPath
	// (ssl_secret_mount_path) mount the internal-SSL secret and point
	// JUPYTERHUB_SSL_KEYFILE, _CERTFILE and _CLIENT_CA at it. Both or
	// neither.
	SSLSecretName      string
	SSLSecretMountPath string

	// RestrictedSecurity opts in to the Pod Security "restricted" profile:
	// it fills runAsNonRoot, a RuntimeDefault seccomp profile, dropping
	// all capabilities and no privilege escalation wherever the spec left
	// them unset. It never overrides a value the spec sets, so a spec that
	// asks for root or privileges still gets them (and fails the profile).
	RestrictedSecurity bool
}

// Pod builds the pod of a user server. It is pure: it reads spec and
// never changes it, and the pod shares no memory with it. An invalid spec
// is a *ValidationError listing every problem, returned before anything
// reaches the API server.
//
// spec is a pointer because a PodSpec is large (about 900 bytes): passed
// by value it would sit twice in the caller's stack frame.
func Pod(spec *PodSpec) (*corev1.Pod, error) {
	// Validation and building are separate functions, so that neither's
	// stack frame sits under the other's calls: a start's goroutine
	// keeps the deepest stack its rendering needed.
	if errs := validatePod(spec); len(errs) > 0 {
		return nil, &ValidationError{Kind: "Pod", Name: spec.Name, Errs: errs}
	}
	pod, err := buildPod(spec)
	if err != nil {
		return nil, err
	}
	if errs := validateMounts(pod, len(spec.ExtraContainers)); len(errs) > 0 {
		return nil, &ValidationError{Kind: "Pod", Name: spec.Name, Errs: errs}
	}
	return pod, nil
}

// buildPod builds the pod of a valid spec.
func buildPod(spec *PodSpec) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.Name,
			Labels:      cloneMap(spec.Labels),
			Annotations: cloneMap(spec.Annotations),
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			NodeSelector:  cloneMap(spec.NodeSelector),
		},
	}
	for _, name := range spec.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}

	volumes, mounts, env, keys := storageAndEnv(spec)

	psc, csc, err := securityContexts(spec)
	if err != nil {
		return nil, err
	}
	if !isEmpty(psc) || len(spec.PodSecurityContextNull) > 0 {
		pod.Spec.SecurityContext = psc
	}

	// The server's container is built where it ends up, not copied
	// there: a Container is 400 bytes, and each copy would sit in this
	// frame, which every start's goroutine stack has to hold.
	pod.Spec.Containers = make([]corev1.Container, 1, 1+len(spec.ExtraContainers))
	container := &pod.Spec.Containers[0]
	container.Name = ContainerName
	container.Image = spec.Image
	container.Args = slices.Clone(spec.Cmd)
	container.WorkingDir = spec.WorkingDir
	container.Ports = []corev1.ContainerPort{{Name: PortName, ContainerPort: spec.Port}}
	container.Env = sortEnv(env, keys)
	container.ImagePullPolicy = spec.ImagePullPolicy
	container.Lifecycle = spec.LifecycleHooks.DeepCopy()
	container.VolumeMounts = mounts
	container.Resources.Requests = resourceList(spec.CPUGuarantee, spec.MemGuarantee, spec.ExtraResourceGuarantees)
	container.Resources.Limits = resourceList(spec.CPULimit, spec.MemLimit, spec.ExtraResourceLimits)
	if !isEmptySecurityContext(csc) || len(spec.ContainerSecurityContextNull) > 0 {
		container.SecurityContext = csc
	}

	if spec.ServiceAccount != "" {
		pod.Spec.ServiceAccountName = spec.ServiceAccount
	}
	switch {
	case spec.AutomountServiceAccountToken != nil:
		pod.Spec.AutomountServiceAccountToken = ptr.To(*spec.AutomountServiceAccountToken)
	case spec.ServiceAccount == "":
		pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	}

	if errs := applyOverrides(container, spec.ExtraContainerConfig, field.NewPath("extra_container_config")); len(errs) > 0 {
		return nil, &ValidationError{Kind: "Pod", Name: spec.Name, Errs: errs}
	}
	pod.Spec.Containers = append(pod.Spec.Containers, deepCopyAll(spec.ExtraContainers)...)
	pod.Spec.InitContainers = deepCopyAll(spec.InitContainers)
	for i := range spec.Tolerations {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, *spec.Tolerations[i].DeepCopy())
	}
	for i := range volumes {
		pod.Spec.Volumes = append(pod.Spec.Volumes, *volumes[i].DeepCopy())
	}
	if spec.RestrictedSecurity {
		for _, cs := range [][]corev1.Container{pod.Spec.Containers[1:], pod.Spec.InitContainers} {
			for i := range cs {
				_, cs[i].SecurityContext = restrict(nil, cs[i].SecurityContext)
			}
		}
	}
	pod.Spec.SchedulerName = spec.SchedulerName
	pod.Spec.Affinity = affinity(spec)
	pod.Spec.PriorityClassName = spec.PriorityClassName

	if errs := applyOverrides(&pod.Spec, spec.ExtraPodConfig, field.NewPath("extra_pod_config")); len(errs) > 0 {
		return nil, &ValidationError{Kind: "Pod", Name: spec.Name, Errs: errs}
	}
	return pod, nil
}

// storageAndEnv are copies of the spec's volumes, mounts and environment,
// with internal SSL's added.
func storageAndEnv(spec *PodSpec) ([]corev1.Volume, []corev1.VolumeMount, []corev1.EnvVar, []string) {
	volumes := slices.Clone(spec.Volumes)
	mounts := deepCopyAll(spec.VolumeMounts)
	env := slices.Clone(spec.Env)
	keys := make([]string, len(env))
	for i, e := range env {
		if i < len(spec.EnvKeys) && spec.EnvKeys[i] != "" {
			keys[i] = spec.EnvKeys[i]
		} else {
			keys[i] = e.Name
		}
	}
	if spec.SSLSecretName != "" {
		volumes = append(volumes, corev1.Volume{
			Name: SSLVolumeName,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: spec.SSLSecretName, DefaultMode: ptr.To[int32](0o777),
			}},
		})
		// KubeSpawner concatenates without a separator ("/certs" +
		// "ssl.key" = "/certsssl.key"); joining is what it means.
		env = append(env,
			corev1.EnvVar{Name: "JUPYTERHUB_SSL_KEYFILE", Value: path.Join(spec.SSLSecretMountPath, "ssl.key")},
			corev1.EnvVar{Name: "JUPYTERHUB_SSL_CERTFILE", Value: path.Join(spec.SSLSecretMountPath, "ssl.crt")},
			corev1.EnvVar{Name: "JUPYTERHUB_SSL_CLIENT_CA", Value: path.Join(spec.SSLSecretMountPath, "notebooks-ca_trust.crt")},
		)
		mounts = append(mounts, corev1.VolumeMount{Name: SSLVolumeName, MountPath: spec.SSLSecretMountPath})
		keys = append(keys, "JUPYTERHUB_SSL_KEYFILE", "JUPYTERHUB_SSL_CERTFILE", "JUPYTERHUB_SSL_CLIENT_CA")
	}
	return volumes, mounts, env, keys
}

// securityContexts are the pod's and the server container's security
// contexts: the spec's ids and flags, merged with pod_security_context and
// container_security_context, restricted when asked.
func securityContexts(spec *PodSpec) (*corev1.PodSecurityContext, *corev1.SecurityContext, error) {
	psc := &corev1.PodSecurityContext{FSGroup: cloneInt64(spec.FSGID)}
	if len(spec.SupplementalGIDs) > 0 {
		psc.SupplementalGroups = slices.Clone(spec.SupplementalGIDs)
	}
	psc, err := mergeJSON(psc, spec.PodSecurityContext.DeepCopy())
	if err == nil {
		psc, err = dropKeys(psc, spec.PodSecurityContextNull)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: pod %q: merging pod_security_context: %w", spec.Name, err)
	}
	csc := &corev1.SecurityContext{RunAsUser: cloneInt64(spec.UID), RunAsGroup: cloneInt64(spec.GID)}
	if spec.Privileged {
		csc.Privileged = ptr.To(true)
	}
	switch spec.AllowPrivilegeEscalation {
	case EscalationDenied:
		csc.AllowPrivilegeEscalation = ptr.To(false)
	case EscalationAllowed:
		csc.AllowPrivilegeEscalation = ptr.To(true)
	}
	csc, err = mergeJSON(csc, spec.ContainerSecurityContext.DeepCopy())
	if err == nil {
		csc, err = dropKeys(csc, spec.ContainerSecurityContextNull)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: pod %q: merging container_security_context: %w", spec.Name, err)
	}
	if spec.RestrictedSecurity {
		psc, csc = restrict(psc, csc)
	}
	return psc, csc, nil
}

func isEmptySecurityContext(c *corev1.SecurityContext) bool { return isEmpty(c) }

// isEmpty reports whether the security context *v is nil or semantically
// empty (an empty slice is as good as none). The zero value, the usual
// case, is recognised without the semantic comparison's reflection, and
// so is a set pointer or scalar field. The shortcut holds for these types
// only: a type with an equality of its own in apiequality.Semantic (a
// resource.Quantity) can have set fields and still equal its zero value.
func isEmpty[T corev1.PodSecurityContext | corev1.SecurityContext](v *T) bool {
	if v == nil {
		return true
	}
	e := reflect.ValueOf(v).Elem()
	if e.IsZero() {
		return true
	}
	if e.Kind() == reflect.Struct {
		// A set pointer, string, bool or number decides it at once,
		// without the semantic comparison's deep recursion (a set
		// runAsUser is the usual case).
		for i := range e.NumField() {
			switch f := e.Field(i); f.Kind() {
			case reflect.Pointer:
				if !f.IsNil() {
					return false
				}
			case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64:
				if !f.IsZero() {
					return false
				}
			}
		}
	}
	var zero T
	return apiequality.Semantic.DeepEqual(*v, zero)
}

// envRef matches a $(VAR) reference; $$(VAR) still contains one, as in
// KubeSpawner.
var envRef = regexp.MustCompile(`\$\(([^)]+)\)`)

// sortEnv orders variables so that references resolve, as make_pod
// does: entries are a dict by key (a later key replaces an earlier one),
// then stored by variable name (a later name replaces an earlier one and
// brings its key); in rounds, each round emits (sorted by key) every
// variable whose references are all emitted already; variables in a
// cycle or referring to unknown names come last, sorted by key.
// References to itself are ignored.
func sortEnv(env []corev1.EnvVar, keys []string) []corev1.EnvVar {
	type entry struct {
		key  string
		v    corev1.EnvVar
		deps []string
	}
	// The env dict: a key set again keeps its place, takes the new value.
	byKey := make([]*entry, 0, len(env))
	keyAt := make(map[string]int, len(env))
	for i, v := range env {
		e := &entry{key: keys[i], v: *v.DeepCopy()}
		if strings.Contains(v.Value, "$(") {
			// Most values hold no reference: the regexp would find none.
			for _, m := range envRef.FindAllStringSubmatch(v.Value, -1) {
				if m[1] != v.Name && !slices.Contains(e.deps, m[1]) {
					e.deps = append(e.deps, m[1])
				}
			}
		}
		if j, ok := keyAt[e.key]; ok {
			byKey[j] = e
			continue
		}
		keyAt[e.key] = len(byKey)
		byKey = append(byKey, e)
	}
	// Sized maps live on the heap, not in this frame (see Pod).
	byName := make(map[string]*entry, len(byKey))
	for _, e := range byKey {
		byName[e.v.Name] = e
	}
	pending := make([]*entry, 0, len(byName))
	for _, e := range byName {
		pending = append(pending, e)
	}
	slices.SortFunc(pending, func(a, b *entry) int { return cmp.Compare(a.key, b.key) })

	out := make([]corev1.EnvVar, 0, len(pending))
	emitted := make(map[string]bool, len(pending))
	for len(pending) > 0 {
		var next, rest []*entry
		for _, e := range pending {
			if allEmitted(e.deps, emitted) {
				next = append(next, e)
			} else {
				rest = append(rest, e)
			}
		}
		if len(next) == 0 {
			next, rest = rest, nil
		}
		for _, e := range next {
			out = append(out, e.v)
			emitted[e.v.Name] = true
		}
		pending = rest
	}
	return out
}

func allEmitted(deps []string, emitted map[string]bool) bool {
	for _, d := range deps {
		if !emitted[d] {
			return false
		}
	}
	return true
}

func resourceList(cpu, mem resource.Quantity, extra corev1.ResourceList) corev1.ResourceList {
	list := corev1.ResourceList{}
	if !cpu.IsZero() {
		list[corev1.ResourceCPU] = cpu.DeepCopy()
	}
	if !mem.IsZero() {
		list[corev1.ResourceMemory] = mem.DeepCopy()
	}
	for k, v := range extra {
		list[k] = v.DeepCopy()
	}
	if len(list) == 0 {
		return nil
	}
	return list
}

func affinity(spec *PodSpec) *corev1.Affinity {
	var a corev1.Affinity
	if len(spec.NodeAffinityPreferred) > 0 || len(spec.NodeAffinityRequired) > 0 {
		a.NodeAffinity = &corev1.NodeAffinity{}
		if len(spec.NodeAffinityRequired) > 0 {
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: deepCopyAll(spec.NodeAffinityRequired)}
		}
		a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = deepCopyAll(spec.NodeAffinityPreferred)
	}
	if len(spec.PodAffinityPreferred) > 0 || len(spec.PodAffinityRequired) > 0 {
		a.PodAffinity = &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: deepCopyAll(spec.PodAffinityPreferred),
			RequiredDuringSchedulingIgnoredDuringExecution:  deepCopyAll(spec.PodAffinityRequired),
		}
	}
	if len(spec.PodAntiAffinityPreferred) > 0 || len(spec.PodAntiAffinityRequired) > 0 {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: deepCopyAll(spec.PodAntiAffinityPreferred),
			RequiredDuringSchedulingIgnoredDuringExecution:  deepCopyAll(spec.PodAntiAffinityRequired),
		}
	}
	if a == (corev1.Affinity{}) {
		return nil
	}
	return &a
}

// deepCopier is any generated Kubernetes API type.
type deepCopier[T any] interface{ DeepCopy() *T }

func deepCopyAll[T any, P interface {
	*T
	deepCopier[T]
}](in []T) []T {
	if len(in) == 0 {
		return nil
	}
	out := make([]T, len(in))
	for i := range in {
		out[i] = *P(&in[i]).DeepCopy()
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneInt64(p *int64) *int64 {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}
