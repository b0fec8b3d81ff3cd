package spawner

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// caseInput is a config vector's input, for rules to inspect and mend.
type caseInput struct {
	config *ordered
	c      *configCase
}

// configRule is a deliberate difference from KubeSpawner, stated over the
// input (applies) so that any case of its kind is handled, and no other.
type configRule struct {
	name, reason string
	// applies selects the cases; nil means the rule is an output
	// normalization checked on every case (rewriteOutput reports whether
	// it changed anything).
	applies func(in *caseInput) bool
	// rewriteInput mends the input when spawnkit rejects it.
	rewriteInput func(t *testing.T, in *caseInput)
	// wantErr, when set, means spawnkit rejects the case's original input:
	// the error must name the option.
	wantErr func(in *caseInput, err error) bool
	// rewriteOutput turns KubeSpawner's objects into spawnkit's.
	rewriteOutput func(in *caseInput, got, want *wantObjects) bool
}

var kubespawnerRules = []configRule{
	{
		name:   "spawnkit-identity",
		reason: "spawnkit labels what it creates managed-by=spawnkit (orphan finds objects by it) and records its own state and version in its annotation, instead of KubeSpawner's managed-by=kubespawner and kubespawner-version",
		rewriteOutput: func(in *caseInput, got, want *wantObjects) bool {
			changed := false
			for _, m := range []*map[string]string{labelsOf(want, "pod"), labelsOf(want, "pvc"), labelsOf(want, "service"), labelsOf(want, "namespace")} {
				if m == nil {
					continue
				}
				if *m == nil {
					*m = map[string]string{}
				}
				(*m)[naming.LabelManagedBy] = naming.ManagedBySpawnkit
				changed = true
			}
			// The service selects the pod by its labels, spawnkit's
			// managed-by among them (also where common_labels leaves
			// KubeSpawner's out: the pod still carries spawnkit's).
			if want.Service != nil {
				if want.Service.Spec.Selector == nil {
					want.Service.Spec.Selector = map[string]string{}
				}
				want.Service.Spec.Selector[naming.LabelManagedBy] = naming.ManagedBySpawnkit
			}
			for _, side := range []*wantObjects{got, want} {
				for _, m := range []*map[string]string{annotationsOf(side, "pod"), annotationsOf(side, "pvc"), annotationsOf(side, "service")} {
					if m == nil {
						continue
					}
					delete(*m, "hub.jupyter.org/kubespawner-version")
					delete(*m, naming.AnnotationState)
					delete(*m, naming.AnnotationStartID)
				}
			}
			// spawnkit's user namespaces carry the raw owner names too.
			if a := annotationsOf(got, "namespace"); a != nil {
				if w := annotationsOf(want, "namespace"); w != nil {
					for _, k := range []string{naming.AnnotationUsername, naming.AnnotationServername} {
						if _, ok := (*w)[k]; !ok {
							delete(*a, k)
						}
					}
					if len(*a) == 0 && len(*w) == 0 {
						*a, *w = nil, nil
					}
				}
			}
			return changed
		},
	},
	{
		name:   "empty-storage-selector",
		reason: "a storage_selector that selects everything but is not literally {} ({matchLabels: {}}) reaches KubeSpawner's claim as a selector, and CSI provisioners refuse to provision any claim with a selector; spawnkit leaves it out, as KubeSpawner leaves out {}",
		rewriteOutput: func(in *caseInput, got, want *wantObjects) bool {
			if want.PVC == nil || want.PVC.Spec.Selector == nil {
				return false
			}
			if sel := want.PVC.Spec.Selector; len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
				want.PVC.Spec.Selector = nil
				return true
			}
			return false
		},
	},
	{
		name:   "empty-service-account",
		reason: "service_account: \"\" gives KubeSpawner's pod no serviceAccountName and no automountServiceAccountToken, so the namespace's default service account token is mounted into the user's pod; spawnkit treats \"\" as no service account and keeps the token out (automountServiceAccountToken: false), as KubeSpawner does for None",
		rewriteOutput: func(in *caseInput, got, want *wantObjects) bool {
			if want.Pod == nil || got.Pod == nil || want.Pod.Spec.ServiceAccountName != "" || want.Pod.Spec.AutomountServiceAccountToken != nil {
				return false
			}
			if a := got.Pod.Spec.AutomountServiceAccountToken; a == nil || *a {
				return false
			}
			want.Pod.Spec.AutomountServiceAccountToken = ptr.To(false)
			return true
		},
	},
	{
		name:    "image-never-pullable",
		reason:  "an image with whitespace or a control character inside it is accepted by the API server (which checks only its ends) but no registry can serve it, so the pod would wait in ErrImagePull until the start times out; spawnkit refuses it at load, naming image",
		applies: func(in *caseInput) bool { return len(apiRejects(in)) == 0 && unpullableImage(in) },
		wantErr: func(in *caseInput, err error) bool { return errorNamesAll(err, []string{"image"}) },
	},
	{
		name:   "secret-env",
		reason: "the hub's API token (secret_env, default JUPYTERHUB_API_TOKEN and JPY_API_TOKEN) goes into a Secret owned by the pod, which the pod's env references by secretKeyRef, so that nobody who can read pods reads the token; secret_env: [] gives KubeSpawner's plain values",
		rewriteOutput: func(in *caseInput, got, want *wantObjects) bool {
			if want.Pod == nil || len(want.Pod.Spec.Containers) == 0 {
				return false
			}
			names := kubespawner.DefaultSecretEnv
			if raw, ok := in.config.get("secret_env"); ok {
				_ = json.Unmarshal(raw, &names)
			}
			changed := false
			env := want.Pod.Spec.Containers[0].Env
			for i := range env {
				if env[i].ValueFrom == nil && env[i].Value != "" && slices.Contains(names, env[i].Name) {
					env[i].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: EnvSecretName(want.Pod.Name)}, Key: env[i].Name}}
					env[i].Value = ""
					changed = true
				}
			}
			return changed
		},
	},
	{
		name:   "owner-annotations",
		reason: "the raw user and server name annotations decide which server an object belongs to, so spawnkit never lets extra_annotations replace them",
		applies: func(in *caseInput) bool {
			for _, opt := range []string{"extra_annotations", "storage_extra_annotations"} {
				raw, _ := in.config.get(opt)
				var m map[string]any
				_ = json.Unmarshal(raw, &m)
				_, u := m[naming.AnnotationUsername]
				_, s := m[naming.AnnotationServername]
				if u || s {
					return true
				}
			}
			return false
		},
		rewriteOutput: func(in *caseInput, got, want *wantObjects) bool {
			for _, kind := range []string{"pod", "pvc", "service"} {
				if a := annotationsOf(want, kind); a != nil && *a != nil {
					(*a)[naming.AnnotationUsername] = in.c.User.Name
					if in.c.ServerName != "" {
						(*a)[naming.AnnotationServername] = in.c.ServerName
					}
				}
			}
			return true
		},
	},
	{
		name:    "unknown-option",
		reason:  "KubeSpawner only logs a warning for an option it does not know, and sets an unknown key of a profile's kubespawner_override as a plain attribute (a typo silently does nothing); spawnkit refuses either at load, naming the key",
		applies: func(in *caseInput) bool { return len(unknownOptions(in)) > 0 },
		// The decoder stops at the first unknown key.
		wantErr: func(in *caseInput, err error) bool { return errorNamesAny(err, unknownOptions(in)) },
	},
	{
		name:    "python-only-env-value",
		reason:  "an environment value that is a number or a boolean exists only in Python (the API server takes strings), so spawnkit rejects it naming the variable",
		applies: func(in *caseInput) bool { return len(pythonOnlyEnv(in)) > 0 },
		wantErr: func(in *caseInput, err error) bool {
			for _, k := range pythonOnlyEnv(in) {
				if !strings.Contains(err.Error(), k) {
					return false
				}
			}
			return true
		},
	},
	{
		name:    "api-rejects",
		reason:  "the API server rejects KubeSpawner's object (a name or label value that is not valid, a node selector value still holding a template, containerPort 0, a claim without a storage request), so spawnkit refuses the configuration up front with an error naming the option; TestKubeSpawnerObjectsAPIServer proves the rejection by a server-side dry run",
		applies: func(in *caseInput) bool { return len(apiRejects(in)) > 0 },
		// spawnkit stops at the first check that fails: the error must
		// name one of the options the API server would reject.
		wantErr: func(in *caseInput, err error) bool {
			keys := apiRejects(in)
			if podNameNotLabel(in) {
				keys = append(keys, "pod_name") // refused too (pod-name-dns-label), and checked first
			}
			return errorNamesAny(err, keys)
		},
	},
	{
		name:    "pod-name-dns-label",
		reason:  "a pod name that is not a DNS label (over 63 characters) is accepted by the API server only with a warning that the pod's hostname is cut, and cannot name the pod's service, so spawnkit refuses it naming pod_name; TestKubeSpawnerObjectsAPIServer proves the warning by a server-side dry run",
		applies: func(in *caseInput) bool { return len(apiRejects(in)) == 0 && podNameNotLabel(in) },
		wantErr: func(in *caseInput, err error) bool { return errorNamesAll(err, []string{"pod_name"}) },
	},
	{
		name:   "claim-never-exists",
		reason: "a pod volume naming a claim whose name the API server refuses for any claim (not a DNS-1123 subdomain) is accepted, but the pod stays Pending on \"persistentvolumeclaim not found\" until the start times out; spawnkit refuses it at plan naming the volume's claimName",
		applies: func(in *caseInput) bool {
			return len(apiRejects(in)) == 0 && !podNameNotLabel(in) && len(unusableClaims(in)) > 0
		},
		wantErr: func(in *caseInput, err error) bool {
			return errorNamesAll(err, append([]string{"claimName"}, unusableClaims(in)...))
		},
	},
	{
		name:   "unlisted-choice-validated",
		reason: "KubeSpawner checks an unlisted choice against validation_regex only when user options name a profile, so leaving `profile` out runs any value (any image) the regex was written to refuse; spawnkit always checks it and refuses the value naming the option",
		applies: func(in *caseInput) bool {
			return len(unvalidatedUnlisted(in)) > 0
		},
		wantErr: func(in *caseInput, err error) bool { return errorNamesAll(err, unvalidatedUnlisted(in)) },
	},
}

// errorNamesAny reports whether err mentions one of keys.
func errorNamesAny(err error, keys []string) bool {
	for _, k := range keys {
		if errorNamesAll(err, []string{k}) {
			return true
		}
	}
	return false
}

// errorNamesAll reports whether err mentions every one of keys.
func errorNamesAll(err error, keys []string) bool {
	for _, k := range keys {
		if !strings.Contains(err.Error(), k) && !strings.Contains(err.Error(), strings.ReplaceAll(k, "_", " ")) {
			return false
		}
	}
	return true
}

// expectedPod is KubeSpawner's pod of a case, nil for an error case.
func expectedPod(in *caseInput) *corev1.Pod {
	if in.c.Expected == nil || len(in.c.Expected.Pod) == 0 || string(in.c.Expected.Pod) == "null" {
		return nil
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(in.c.Expected.Pod, pod); err != nil {
		return nil
	}
	return pod
}

// apiRejects are the options behind what the API server's validation
// refuses in KubeSpawner's objects: the checks are the API server's own
// (apimachinery), so a case of another kind is not excused.
func apiRejects(in *caseInput) []string {
	// Label and annotation values that are not strings: the API server
	// cannot even decode such an object (and neither can this test).
	out := nonStringMeta(in)
	pod := expectedPod(in)
	if pod == nil {
		slices.Sort(out)
		return slices.Compact(out)
	}
	// An image with leading or trailing whitespace (ValidatePodSpec:
	// validateContainerCommon).
	for _, c := range pod.Spec.Containers {
		if c.Image != strings.TrimSpace(c.Image) {
			out = append(out, "image")
		}
	}
	// A negative resource quantity (ValidateResourceQuantityValue).
	for _, c := range pod.Spec.Containers {
		for _, rl := range []struct {
			list            corev1.ResourceList
			cpu, mem, extra string
		}{{c.Resources.Limits, "cpu_limit", "mem_limit", "extra_resource_limits"}, {c.Resources.Requests, "cpu_guarantee", "mem_guarantee", "extra_resource_guarantees"}} {
			for name, q := range rl.list {
				if q.Sign() >= 0 {
					continue
				}
				switch name {
				case corev1.ResourceCPU:
					out = append(out, rl.cpu, rl.extra)
				case corev1.ResourceMemory:
					out = append(out, rl.mem, rl.extra)
				default:
					out = append(out, rl.extra)
				}
			}
		}
	}
	if len(validation.IsDNS1123Subdomain(pod.Name)) > 0 {
		out = append(out, "pod_name")
	}
	// A request above its limit, also of an extra resource
	// (ValidateResourceRequirements).
	for _, c := range pod.Spec.Containers {
		for res, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[res]; ok && req.Cmp(lim) > 0 && res != corev1.ResourceCPU && res != corev1.ResourceMemory {
				out = append(out, "extra_resource_guarantees")
			}
		}
	}
	if len(metav1validation.ValidateLabels(pod.Spec.NodeSelector, field.NewPath("nodeSelector"))) > 0 {
		out = append(out, "node_selector")
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort < 1 || p.ContainerPort > 65535 {
				out = append(out, "port")
			}
		}
	}
	out = append(out, badLabelOptions(in, pod.Labels, "extra_labels")...)
	// A service account name that is not a DNS subdomain
	// (ValidatePodSpec: serviceAccountName).
	if sa := pod.Spec.ServiceAccountName; sa != "" && len(validation.IsDNS1123Subdomain(sa)) > 0 {
		out = append(out, "service_account")
	}
	// A request above its limit (ValidateResourceRequirements).
	for _, c := range pod.Spec.Containers {
		for res, opt := range map[corev1.ResourceName]string{corev1.ResourceCPU: "cpu_guarantee", corev1.ResourceMemory: "mem_guarantee"} {
			req, okr := c.Resources.Requests[res]
			lim, okl := c.Resources.Limits[res]
			if okr && okl && req.Cmp(lim) > 0 {
				out = append(out, opt)
			}
		}
	}
	if raw := in.c.Expected.PVC; len(raw) > 0 && string(raw) != "null" {
		pvc := &corev1.PersistentVolumeClaim{}
		if json.Unmarshal(raw, pvc) == nil {
			// The claim's name (ValidateObjectMeta: a DNS-1123 subdomain).
			if len(validation.IsDNS1123Subdomain(pvc.Name)) > 0 {
				out = append(out, "pvc_name")
			}
			// A claim without access modes
			// (ValidatePersistentVolumeClaimSpec).
			if len(pvc.Spec.AccessModes) == 0 {
				out = append(out, "storage_access_modes")
			}
			if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || q.Sign() <= 0 {
				// KubeSpawner sends `storage: null` without a capacity.
				out = append(out, "storage_capacity")
			}
			out = append(out, badLabelOptions(in, pvc.Labels, "storage_extra_labels")...)
			// A selector's label values (ValidateLabelSelector).
			if sel := pvc.Spec.Selector; sel != nil && len(metav1validation.ValidateLabels(sel.MatchLabels, field.NewPath("selector"))) > 0 {
				out = append(out, "storage_selector")
			}
		}
	}
	// The user namespace's labels and annotations (ValidateObjectMeta).
	if raw := in.c.Expected.NamespaceManifest; len(raw) > 0 && string(raw) != "null" {
		ns := &corev1.Namespace{}
		if json.Unmarshal(raw, ns) == nil {
			if len(metav1validation.ValidateLabels(ns.Labels, field.NewPath("labels"))) > 0 {
				out = append(out, "user_namespace_labels")
			}
			if len(apivalidation.ValidateAnnotations(ns.Annotations, field.NewPath("annotations"))) > 0 {
				out = append(out, "user_namespace_annotations")
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// badLabelOptions are the options that gave an object invalid labels:
// the label options of the config holding the bad key, else def.
func badLabelOptions(in *caseInput, labels map[string]string, def string) []string {
	var out []string
	for k, v := range labels {
		if len(metav1validation.ValidateLabels(map[string]string{k: v}, field.NewPath("labels"))) == 0 {
			continue
		}
		opt := def
		for _, o := range []string{def, "common_labels", "extra_labels"} {
			raw, _ := in.config.get(o)
			var m map[string]any
			if _, ok := m[k]; json.Unmarshal(raw, &m) == nil && ok {
				opt = o
				break
			}
		}
		out = append(out, opt)
	}
	return out
}

// nonStringMeta are the options behind label, annotation or node
// selector values of KubeSpawner's objects that are not strings.
func nonStringMeta(in *caseInput) []string {
	if in.c.Expected == nil {
		return nil
	}
	var out []string
	for _, o := range []struct {
		raw                json.RawMessage
		labels, annotation string
	}{
		{in.c.Expected.Pod, "extra_labels", "extra_annotations"},
		{in.c.Expected.PVC, "storage_extra_labels", "storage_extra_annotations"},
		{in.c.Expected.NamespaceManifest, "user_namespace_labels", "user_namespace_annotations"},
	} {
		var obj struct {
			Metadata struct {
				Labels      map[string]any `json:"labels"`
				Annotations map[string]any `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				NodeSelector map[string]any `json:"nodeSelector"`
			} `json:"spec"`
		}
		if len(o.raw) == 0 || json.Unmarshal(o.raw, &obj) != nil {
			continue
		}
		for _, m := range []struct {
			values map[string]any
			opt    string
		}{{obj.Metadata.Labels, o.labels}, {obj.Metadata.Annotations, o.annotation}, {obj.Spec.NodeSelector, "node_selector"}} {
			for k, v := range m.values {
				if _, ok := v.(string); !ok {
					out = append(out, optionHolding(in, k, m.opt))
				}
			}
		}
	}
	return out
}

// optionHolding is the label or annotation option of the config that
// holds key, else def.
func optionHolding(in *caseInput, key, def string) string {
	for _, o := range []string{def, "common_labels", "extra_labels", "extra_annotations"} {
		raw, _ := in.config.get(o)
		var m map[string]any
		if _, ok := m[key]; json.Unmarshal(raw, &m) == nil && ok {
			return o
		}
	}
	return def
}

// unpullableImage reports an image of KubeSpawner's pod with whitespace
// or a control character inside it.
func unpullableImage(in *caseInput) bool {
	pod := expectedPod(in)
	if pod == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if strings.IndexFunc(strings.TrimSpace(c.Image), func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return true
		}
	}
	return false
}

// unusableClaims are the claim names of KubeSpawner's pod volumes that no
// claim can have.
func unusableClaims(in *caseInput) []string {
	pod := expectedPod(in)
	if pod == nil {
		return nil
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil && len(validation.IsDNS1123Subdomain(c.ClaimName)) > 0 {
			out = append(out, c.ClaimName)
		}
	}
	return out
}

// podNameNotLabel reports a KubeSpawner pod name the API server accepts
// with a hostname warning.
func podNameNotLabel(in *caseInput) bool {
	pod := expectedPod(in)
	return pod != nil && len(validation.IsDNS1123Label(pod.Name)) > 0
}

// unvalidatedUnlisted are the options whose unlisted choice KubeSpawner
// took without its validation_regex check: the user options name no
// profile, and the value does not match.
func unvalidatedUnlisted(in *caseInput) []string {
	uo := in.c.UserOptions
	if p, _ := uo["profile"].(string); p != "" || in.c.Expected == nil {
		return nil
	}
	raw, _ := in.config.get("profile_list")
	var profiles []struct {
		Default        bool `json:"default"`
		ProfileOptions map[string]struct {
			UnlistedChoice struct {
				ValidationRegex string `json:"validation_regex"`
			} `json:"unlisted_choice"`
		} `json:"profile_options"`
	}
	if json.Unmarshal(raw, &profiles) != nil || len(profiles) == 0 {
		return nil
	}
	profile := profiles[0]
	for _, p := range profiles {
		if p.Default {
			profile = p
			break
		}
	}
	var out []string
	for name, opt := range profile.ProfileOptions {
		v, _ := uo[name+"--unlisted-choice"].(string)
		re := opt.UnlistedChoice.ValidationRegex
		if v == "" || re == "" {
			continue
		}
		if m, err := regexp.Compile(`^(?:` + re + `)`); err == nil && !m.MatchString(v) {
			out = append(out, name)
		}
	}
	return out
}

// unknownOptions are the keys, at the top level and in every override
// dictionary of the profile list (profiles, choices, unlisted choices),
// that kubespawner.Load does not know as options.
func unknownOptions(in *caseInput) []string {
	var out []string
	unknown := func(key string, value json.RawMessage) bool {
		one, _ := json.Marshal(map[string]json.RawMessage{key: value})
		// The decoder's own message for an option it does not know (not a
		// template's unknown {field}).
		_, err := kubespawner.Load(one)
		return err != nil && strings.Contains(err.Error(), `unknown option "`+key+`"`)
	}
	for _, e := range in.config.kvs {
		if unknown(e.Key, e.Value) {
			out = append(out, e.Key)
		}
	}
	raw, _ := in.config.get("profile_list")
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		var byKey map[string]json.RawMessage
		_ = json.Unmarshal(raw, &byKey)
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
			list = append(list, byKey[k])
		}
	}
	type override = map[string]json.RawMessage
	var overrides []override
	for _, p := range list {
		var profile struct {
			Override       override `json:"kubespawner_override"`
			ProfileOptions map[string]struct {
				Choices map[string]struct {
					Override override `json:"kubespawner_override"`
				} `json:"choices"`
				Unlisted struct {
					Override override `json:"kubespawner_override"`
				} `json:"unlisted_choice"`
			} `json:"profile_options"`
		}
		_ = json.Unmarshal(p, &profile)
		overrides = append(overrides, profile.Override)
		for _, o := range profile.ProfileOptions {
			for _, ch := range o.Choices {
				overrides = append(overrides, ch.Override)
			}
			overrides = append(overrides, o.Unlisted.Override)
		}
	}
	for _, o := range overrides {
		for k, v := range o {
			if unknown(k, v) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func pythonOnlyEnv(in *caseInput) []string {
	raw, ok := in.config.get("environment")
	if !ok {
		return nil
	}
	var out []string
	for _, e := range orderedMapNoT(raw) {
		switch strings.TrimSpace(string(e.Value))[0] {
		case '"', '{', '[', 'n':
		default:
			out = append(out, e.Key)
		}
	}
	return out
}

func orderedMapNoT(raw json.RawMessage) []kv {
	o := &ordered{}
	_ = json.Unmarshal(raw, o)
	return o.kvs
}

func labelsOf(s *wantObjects, kind string) *map[string]string {
	switch kind {
	case "pod":
		if s.Pod != nil {
			return &s.Pod.Labels
		}
	case "pvc":
		if s.PVC != nil {
			return &s.PVC.Labels
		}
	case "service":
		if s.Service != nil {
			return &s.Service.Labels
		}
	case "namespace":
		if s.Namespace != nil {
			return &s.Namespace.Labels
		}
	}
	return nil
}

func annotationsOf(s *wantObjects, kind string) *map[string]string {
	switch kind {
	case "pod":
		if s.Pod != nil {
			return &s.Pod.Annotations
		}
	case "pvc":
		if s.PVC != nil {
			return &s.PVC.Annotations
		}
	case "service":
		if s.Service != nil {
			return &s.Service.Annotations
		}
	case "namespace":
		if s.Namespace != nil {
			return &s.Namespace.Annotations
		}
	}
	return nil
}

var _ = slices.Contains[[]string]
