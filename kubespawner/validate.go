package kubespawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// ConfigError reports every invalid option of a configuration at once,
// each by its KubeSpawner key (field.Error.Field: "port",
// "extra_labels[app]", "mem_limit"). It is returned before any object
// exists.
type ConfigError struct {
	Errs field.ErrorList
}

func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "spawner: invalid configuration: " + strings.Join(msgs, "; ")
}

// Keys returns the keys of the invalid options, in the order found.
func (e *ConfigError) Keys() []string {
	keys := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		keys[i] = err.Field
	}
	return keys
}

// IsInvalidConfig reports whether err is or wraps a *ConfigError.
func IsInvalidConfig(err error) bool {
	var e *ConfigError
	return errors.As(err, &e)
}

// maxSeconds is the longest timeout a time.Duration can hold.
const maxSeconds = float64(math.MaxInt64) / 1e9

// checkSeconds checks a timeout: finite, within time.Duration, positive
// (or not negative when zero is allowed).
func checkSeconds(key string, v Seconds, allowZero bool) field.ErrorList {
	f := float64(v)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds:
		return field.ErrorList{field.Invalid(field.NewPath(key), f, "must be a finite number of seconds")}
	case f < 0 || f == 0 && !allowZero:
		want := "must be positive"
		if allowZero {
			want = "must not be negative"
		}
		return field.ErrorList{field.Invalid(field.NewPath(key), f, want)}
	}
	return nil
}

// checkName checks an optional object name with one of apimachinery's
// validators.
func checkName(key, name string, check func(string) []string) field.ErrorList {
	if name == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range check(name) {
		errs = append(errs, field.Invalid(field.NewPath(key), name, msg))
	}
	return errs
}

// checkImage checks what the API server checks of an image reference
// (ValidatePodSpec's validateContainerCommon: set, no surrounding
// whitespace) and that it holds no whitespace or control characters
// inside, which the API server accepts but no registry can serve (the
// config vectors' rule image-never-pullable).
func checkImage(image string) field.ErrorList {
	p := field.NewPath("image")
	if image == "" {
		return field.ErrorList{field.Required(p, "the notebook image")}
	}
	if strings.IndexFunc(image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return field.ErrorList{field.Invalid(p, image, "must not contain whitespace or control characters")}
	}
	return nil
}

// sampleFields are the template fields of a sample server, for checking
// templated labels and annotations before any real server exists: what a
// template adds for real servers is checked again when they start.
func sampleFields(c *Config) (naming.Fields, naming.Syntax, error) {
	syntax := naming.KubeSpawner
	if c.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	ns := c.Namespace
	if ns == "" {
		ns = "default"
	}
	f, err := naming.NewFields(naming.Server{Username: "user", Servername: "server", UserID: 1}, c.SlugScheme, ns)
	f.PodName, f.PVCName = "jupyter-user--server", "claim-user--server"
	return f, syntax, err
}

// renderSample renders a templated string map with sample fields; a bad
// template is an error on key.
func renderSample(key string, m map[string]string, f naming.Fields, syntax naming.Syntax) (map[string]string, field.ErrorList) {
	if len(m) == 0 {
		return m, nil
	}
	v, err := naming.ParseValue(m, syntax)
	if err == nil {
		var out any
		if out, err = v.Expand(f); err == nil {
			return out.(map[string]string), nil
		}
	}
	return nil, field.ErrorList{field.Invalid(field.NewPath(key), "", err.Error())}
}

// checkTemplates parses every option KubeSpawner expands (_expand_all)
// that is not a string map checked by renderSample, so a template error
// or an unknown {field} fails at load, naming the option, not at a
// start.
func checkTemplates(c *Config, syntax naming.Syntax) field.ErrorList {
	var errs field.ErrorList
	var selector any
	if c.StorageSelector != nil {
		selector = c.StorageSelector
	}
	for _, t := range []struct {
		key string
		v   any
	}{
		{"volumes", c.Pod.Volumes}, {"volume_mounts", c.Pod.VolumeMounts}, {"pod_connect_ip", c.PodConnectIP},
		{"init_containers", c.Pod.InitContainers}, {"extra_containers", c.Pod.ExtraContainers},
		{"extra_pod_config", c.Pod.ExtraPodConfig}, {"service_account", c.Pod.ServiceAccount},
		{"working_dir", c.Pod.WorkingDir}, {"storage_selector", selector},
	} {
		raw, err := json.Marshal(t.v)
		if err != nil {
			continue
		}
		var generic any
		if json.Unmarshal(raw, &generic) != nil {
			continue
		}
		if _, err := naming.ParseValue(generic, syntax); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(t.key), "", err.Error()))
		}
	}
	return errs
}

// validateOptions checks every option whose mistake would otherwise show
// only when a start talks to the API server, and returns all problems.
func (c *Config) validateOptions() field.ErrorList {
	var errs field.ErrorList
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("port"), c.Port, "must be a port number (1-65535)"))
	}
	errs = append(errs, checkImage(c.Pod.Image)...)
	errs = append(errs, checkSeconds("start_timeout", c.StartTimeout, false)...)
	errs = append(errs, checkSeconds("k8s_api_request_timeout", c.K8sAPIRequestTimeout, false)...)
	errs = append(errs, checkSeconds("k8s_api_request_retry_timeout", c.K8sAPIRequestRetryTimeout, false)...)
	errs = append(errs, checkSeconds("stop_timeout", c.StopTimeout, true)...)
	errs = append(errs, checkSeconds("pending_timeout", c.PendingTimeout, true)...)
	errs = append(errs, checkSeconds("creating_timeout", c.CreatingTimeout, true)...)
	for i, ns := range c.ProfileNamespaces {
		// Watched and trusted: an empty or invalid name would widen the
		// watch (all namespaces) or stall the informer's sync.
		key := fmt.Sprintf("ProfileNamespaces[%d]", i)
		if ns == "" {
			errs = append(errs, field.Required(field.NewPath(key), "a namespace name (empty would mean every namespace)"))
		}
		errs = append(errs, checkName(key, ns, validation.IsDNS1123Label)...)
	}
	if c.DeleteGracePeriod != nil {
		errs = append(errs, checkSeconds("delete_grace_period", *c.DeleteGracePeriod, true)...)
	}
	for _, t := range []struct {
		key string
		v   Seconds
	}{
		{"slow_spawn_message_after", c.SlowSpawnMessageAfter},
		{"slow_spawn_message_threshold", c.SlowSpawnMessageThreshold},
		{"slow_spawn_message_frequency", c.SlowSpawnMessageFrequency},
	} {
		if f := float64(t.v); math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds {
			errs = append(errs, field.Invalid(field.NewPath(t.key), f, "must be a finite number of seconds"))
		}
	}

	switch c.SlugScheme {
	case "", naming.SchemeSafe, naming.SchemeEscape:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("slug_scheme"), c.SlugScheme, []naming.Scheme{naming.SchemeSafe, naming.SchemeEscape}))
	}
	if nopts, err := c.NamingOptions(); err != nil {
		errs = append(errs, field.NotSupported(field.NewPath("template_syntax"), c.TemplateSyntax, []string{"kubespawner", "go"}))
	} else if _, err := naming.New(nopts); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("naming"), "", err.Error()))
	}
	// ValidateNamespaceName (a DNS-1123 label).
	errs = append(errs, checkName("namespace", c.Namespace, validation.IsDNS1123Label)...)
	errs = append(errs, c.KubernetesCluster.check()...)
	// The pod's labels (ValidateObjectMeta: ValidateLabels).
	for _, msg := range validation.IsValidLabelValue(c.ComponentLabel) {
		errs = append(errs, field.Invalid(field.NewPath("component_label"), c.ComponentLabel, msg))
	}
	errs = append(errs, metav1validation.ValidateLabels(c.CommonLabels, field.NewPath("common_labels"))...)
	if c.StoragePVCEnsure {
		// The claim's (ValidateObjectMeta), when a claim is made.
		errs = append(errs, metav1validation.ValidateLabels(literalValues(c.StorageExtraLabels), field.NewPath("storage_extra_labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.StorageExtraAnnotations), field.NewPath("storage_extra_annotations"))...)
	}

	// Templated values are checked rendered, by Plan (checkRendered):
	// here their keys, which are not templates, the values that are
	// literals, and the templates' syntax.
	if f, syntax, err := sampleFields(c); err == nil {
		_, lerrs := renderSample("extra_labels", c.ExtraLabels, f, syntax)
		errs = append(errs, lerrs...)
		errs = append(errs, metav1validation.ValidateLabels(literalValues(c.ExtraLabels), field.NewPath("extra_labels"))...)
		_, aerrs := renderSample("extra_annotations", c.ExtraAnnotations, f, syntax)
		errs = append(errs, aerrs...)
		errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.ExtraAnnotations), field.NewPath("extra_annotations"))...)
		_, nlerrs := renderSample("user_namespace_labels", c.UserNamespaceLabels, f, syntax)
		errs = append(errs, nlerrs...)
		_, naerrs := renderSample("user_namespace_annotations", c.UserNamespaceAnnotations, f, syntax)
		errs = append(errs, naerrs...)
		if c.EnableUserNamespaces {
			// The user namespace's (ValidateObjectMeta), when one is made.
			errs = append(errs, metav1validation.ValidateLabels(literalValues(c.UserNamespaceLabels), field.NewPath("user_namespace_labels"))...)
			errs = append(errs, apivalidation.ValidateAnnotations(literalValues(c.UserNamespaceAnnotations), field.NewPath("user_namespace_annotations"))...)
		}
		_, eerrs := renderSample("environment", c.Environment, f, syntax)
		errs = append(errs, eerrs...)
		for _, e := range c.EnvironmentEntries() {
			// The variable's name: a dict value's own name, else its key
			// (make_pod). The API server's check is ValidateEnv's
			// IsRelaxedEnvVarName (any printable ASCII but '='): the
			// only rule from Kubernetes 1.32 (RelaxedEnvironmentVariable
			// Validation, beta and on by default; GA in 1.34).
			name, p := e.Name, field.NewPath("environment").Key(e.Name)
			if m, ok := e.Value.(map[string]any); ok {
				if n, ok := m["name"].(string); ok && n != "" {
					name, p = n, p.Child("name")
				}
			}
			for _, msg := range validation.IsRelaxedEnvVarName(name) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
		}
		_, slerrs := renderSample("storage_extra_labels", c.StorageExtraLabels, f, syntax)
		errs = append(errs, slerrs...)
		_, saerrs := renderSample("storage_extra_annotations", c.StorageExtraAnnotations, f, syntax)
		errs = append(errs, saerrs...)
		errs = append(errs, checkTemplates(c, syntax)...)
	}

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
	for i, r := range c.FatalReasons {
		if r == "" {
			errs = append(errs, field.Required(field.NewPath("fatal_reasons").Index(i), "a container waiting reason"))
		}
	}
	for i, f := range c.AllowedDroppedFields {
		if f != "*" && !slices.ContainsFunc(droppedRoots, func(root string) bool { return DroppedAllowed(f, root) }) {
			errs = append(errs, field.Invalid(field.NewPath("allowed_dropped_fields").Index(i), f,
				`a path as a FieldsDroppedError names it, under spec, metadata.labels or metadata.annotations ("spec.hostUsers"), or "*"`))
		}
	}
	errs = append(errs, c.validateNamespaceObjects()...)
	errs = append(errs, c.validateRetired()...)
	for i := range c.EventMessageRules {
		r := c.EventMessageRules[i]
		path := field.NewPath("event_message_rules").Index(i)
		if r.Match != "" {
			if _, err := regexp.Compile(r.Match); err != nil {
				errs = append(errs, field.Invalid(path.Child("match"), r.Match, err.Error()))
				continue
			}
		}
		if r.Drop && r.Replace != "" {
			errs = append(errs, field.Invalid(path, r.Replace, "drop and replace exclude each other"))
		}
		if !r.Drop && r.Replace == "" {
			errs = append(errs, field.Required(path.Child("replace"), "a rule either drops the message or replaces it"))
		}
	}
	seen := map[string]bool{}
	for i, name := range c.SecretEnv {
		path := field.NewPath("secret_env").Index(i)
		// Each name is a key of the Secret: the API server's rule for
		// Secret keys (ValidateSecret: IsConfigMapKey).
		for _, msg := range validation.IsConfigMapKey(name) {
			errs = append(errs, field.Invalid(path, name, msg))
		}
		if seen[name] {
			errs = append(errs, field.Duplicate(path, name))
		}
		seen[name] = true
	}
	errs = append(errs, checkProfiles(c.ProfileList)...)
	if c.source == nil && (len(c.ProfileList) > 0 || c.ProfileListFunc != nil) {
		// A Go-built Config whose fields withDefaults could not make
		// the options profiles merge into: refuse it now, not at the
		// first start that resolves a profile.
		_, terrs := c.typedOptions()
		errs = append(errs, terrs...)
	}
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

// checkProfiles checks what of a profile list can be checked without user
// options: unique slugs, compilable validation_regex, overrides that are
// JSON (a list built in Go may hold any Go value). The overrides' values
// are checked when Resolve applies them.
func checkProfiles(profiles []Profile) field.ErrorList {
	var errs field.ErrorList
	slugs := map[string]bool{}
	checkOverrides := func(p *field.Path, overrides map[string]any) {
		// An unknown key in an override is set as a plain attribute by
		// KubeSpawner's setattr and silently does nothing; it is
		// refused here, at load, naming it, as an unknown top-level
		// option is (rule unknown-option), whether or not a start ever
		// chooses that profile.
		for _, k := range slices.Sorted(maps.Keys(overrides)) {
			if !isOptionKey(k) {
				errs = append(errs, field.Invalid(p.Child("kubespawner_override").Key(k), k,
					unknownOptionMsg(k)+"; KubeSpawner would set it as a plain attribute, which does nothing"))
			}
		}
		if isJSONShaped(overrides) {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(overrides)) {
			if _, err := json.Marshal(overrides[k]); err != nil {
				errs = append(errs, field.Invalid(p.Child("kubespawner_override").Key(k), fmt.Sprintf("%T", overrides[k]), "is not JSON: "+err.Error()))
			}
		}
	}
	for _, p := range initializeProfiles(profiles) {
		pp := field.NewPath("profile_list").Key(p.Slug)
		if p.Slug == "" {
			errs = append(errs, field.Required(pp.Child("slug"), "a slug or a display_name to make one from"))
		}
		if slugs[p.Slug] {
			errs = append(errs, field.Duplicate(pp.Child("slug"), p.Slug))
		}
		slugs[p.Slug] = true
		checkOverrides(pp, p.KubeSpawnerOverride)
		for _, o := range p.ProfileOptions {
			op := pp.Child("profile_options").Key(o.Name)
			for _, ch := range o.Choices {
				checkOverrides(op.Child("choices").Key(ch.Key), ch.KubeSpawnerOverride)
			}
			if u := o.UnlistedChoice; u != nil {
				checkOverrides(op.Child("unlisted_choice"), u.KubeSpawnerOverride)
			}
			if u := o.UnlistedChoice; u != nil && u.ValidationRegex != "" && u.re == nil {
				if _, err := compileMatch(u.ValidationRegex); err != nil {
					errs = append(errs, field.Invalid(op.Child("unlisted_choice", "validation_regex"), u.ValidationRegex, err.Error()))
				}
			}
			if len(o.Choices) == 0 && (o.UnlistedChoice == nil || !o.UnlistedChoice.Enabled) {
				errs = append(errs, field.Required(op.Child("choices"), "a choice or an enabled unlisted_choice"))
			}
		}
	}
	return errs
}

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

// optionKeys are the option names Load accepts: Config's own
// (its JSON names), the pod's, the hub's, environment, and the names
// kubespawnerCompat renames or ignores.
var optionKeys = func() map[string]bool {
	m := map[string]bool{"environment": true}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	for _, list := range [][]string{hubOptions, podOptionKeys, slices.Collect(maps.Keys(deprecatedOptions)), slices.Collect(maps.Keys(noopOptions))} {
		for _, k := range list {
			m[k] = true
		}
	}
	return m
}()

// isOptionKey reports whether k names an option Load accepts.
func isOptionKey(k string) bool { return optionKeys[k] }

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
