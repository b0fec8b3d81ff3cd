package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DecodePodSpec decodes KubeSpawner's make_pod keyword arguments, as a
// JSON object with KubeSpawner's names and value shapes, into a PodSpec:
// it is how KubeSpawner configuration reaches the builders. Dict-valued
// arguments (volumes, tolerations, lifecycle_hooks, ...) take camelCase or
// snake_case top-level keys, as KubeSpawner does; nested keys must be the
// API's camelCase names. Every problem is an error naming the argument and
// the value: a malformed quantity, an unknown key, a wrong type.
func DecodePodSpec(data []byte) (PodSpec, error) {
	pairs, err := orderedObject(data)
	if err != nil {
		return PodSpec{}, fmt.Errorf("manifest: make_pod arguments: %w", err)
	}
	var s PodSpec
	for _, p := range pairs {
		if err := decodePodArg(&s, p.key, p.value); err != nil {
			return PodSpec{}, fmt.Errorf("manifest: make_pod argument %s: %w", p.key, err)
		}
	}
	return s, nil
}

func decodePodArg(s *PodSpec, key string, raw json.RawMessage) error {
	null := isNull(raw)
	switch key {
	case "name":
		return decodeString(raw, &s.Name)
	case "image":
		return decodeString(raw, &s.Image)
	case "cmd":
		return decodeInto(raw, &s.Cmd)
	case "port":
		return decodeInto(raw, &s.Port)
	case "image_pull_policy":
		return decodeString(raw, (*string)(&s.ImagePullPolicy))
	case "image_pull_secrets":
		return decodeImagePullSecrets(raw, &s.ImagePullSecrets)
	case "node_selector":
		return decodeInto(raw, &s.NodeSelector)
	case "uid":
		return decodeID(raw, &s.UID)
	case "gid":
		return decodeID(raw, &s.GID)
	case "fs_gid":
		return decodeID(raw, &s.FSGID)
	case "supplemental_gids":
		return decodeSupplementalGIDs(raw, &s.SupplementalGIDs)
	case "privileged":
		return decodeInto(raw, &s.Privileged)
	case "allow_privilege_escalation":
		return decodeEscalation(raw, &s.AllowPrivilegeEscalation)
	case "container_security_context":
		if null {
			return nil
		}
		s.ContainerSecurityContext = new(corev1.SecurityContext)
		return decodeSecurityContext(raw, key, s.ContainerSecurityContext, &s.ContainerSecurityContextNull)
	case "pod_security_context":
		if null {
			return nil
		}
		s.PodSecurityContext = new(corev1.PodSecurityContext)
		return decodeSecurityContext(raw, key, s.PodSecurityContext, &s.PodSecurityContextNull)
	case "env":
		return decodeEnv(raw, &s.Env, &s.EnvKeys)
	case "working_dir":
		return decodeString(raw, &s.WorkingDir)
	case "volumes":
		return decodeModelOrNull(raw, &s.Volumes)
	case "volume_mounts":
		return decodeModelOrNull(raw, &s.VolumeMounts)
	case "labels":
		return decodeInto(raw, &s.Labels)
	case "annotations":
		return decodeInto(raw, &s.Annotations)
	case "cpu_limit":
		return decodeQuantity(raw, &s.CPULimit)
	case "cpu_guarantee":
		return decodeQuantity(raw, &s.CPUGuarantee)
	case "mem_limit":
		return decodeQuantity(raw, &s.MemLimit)
	case "mem_guarantee":
		return decodeQuantity(raw, &s.MemGuarantee)
	case "extra_resource_limits":
		return decodeResourceList(raw, &s.ExtraResourceLimits)
	case "extra_resource_guarantees":
		return decodeResourceList(raw, &s.ExtraResourceGuarantees)
	case "lifecycle_hooks":
		if null {
			return nil
		}
		s.LifecycleHooks = new(corev1.Lifecycle)
		return decodeModel(raw, s.LifecycleHooks, key)
	case "init_containers":
		return decodeModelOrNull(raw, &s.InitContainers)
	case "service_account":
		return decodeString(raw, &s.ServiceAccount)
	case "automount_service_account_token":
		return decodeInto(raw, &s.AutomountServiceAccountToken)
	case "extra_container_config":
		return decodeInto(raw, &s.ExtraContainerConfig)
	case "extra_pod_config":
		return decodeInto(raw, &s.ExtraPodConfig)
	case "extra_containers":
		return decodeModelOrNull(raw, &s.ExtraContainers)
	case "scheduler_name":
		return decodeString(raw, &s.SchedulerName)
	case "tolerations":
		return decodeModelOrNull(raw, &s.Tolerations)
	case "node_affinity_preferred":
		return decodeModelOrNull(raw, &s.NodeAffinityPreferred)
	case "node_affinity_required":
		return decodeModelOrNull(raw, &s.NodeAffinityRequired)
	case "pod_affinity_preferred":
		return decodeModelOrNull(raw, &s.PodAffinityPreferred)
	case "pod_affinity_required":
		return decodeModelOrNull(raw, &s.PodAffinityRequired)
	case "pod_anti_affinity_preferred":
		return decodeModelOrNull(raw, &s.PodAntiAffinityPreferred)
	case "pod_anti_affinity_required":
		return decodeModelOrNull(raw, &s.PodAntiAffinityRequired)
	case "priority_class_name":
		return decodeString(raw, &s.PriorityClassName)
	case "ssl_secret_name":
		return decodeString(raw, &s.SSLSecretName)
	case "ssl_secret_mount_path":
		return decodeString(raw, &s.SSLSecretMountPath)
	case "logger":
		return nil // KubeSpawner's logger argument carries no configuration
	}
	return fmt.Errorf("unknown argument")
}

// decodeImagePullSecrets appends image_pull_secrets to target: each item
// a secret name or a {name: ...} reference.
func decodeImagePullSecrets(raw json.RawMessage, target *[]string) error {
	var items []json.RawMessage
	if err := decodeInto(raw, &items); err != nil {
		return err
	}
	for i, item := range items {
		var name string
		if json.Unmarshal(item, &name) != nil {
			var ref corev1.LocalObjectReference
			if err := decodeModel(item, &ref, fmt.Sprintf("[%d]", i)); err != nil {
				return fmt.Errorf("want a secret name or {name: ...}: %w", err)
			}
			name = ref.Name
		}
		*target = append(*target, name)
	}
	return nil
}

// decodeSupplementalGIDs decodes supplemental_gids as make_pod does,
// [int(gid) for gid in supplemental_gids]: the trait is a List of
// anything, each item converted by pyInt.
func decodeSupplementalGIDs(raw json.RawMessage, target *[]int64) error {
	*target = nil
	if isNull(raw) {
		return nil
	}
	var items []json.RawMessage
	if err := decodeInto(raw, &items); err != nil {
		return err
	}
	for i, item := range items {
		n, err := pyInt(item)
		if err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
		*target = append(*target, n)
	}
	return nil
}

// decodeEscalation decodes allow_privilege_escalation: true, false, or
// null, KubeSpawner's None, which is EscalationUnset.
func decodeEscalation(raw json.RawMessage, target *PrivilegeEscalation) error {
	var b *bool
	if err := decodeInto(raw, &b); err != nil {
		return err
	}
	switch {
	case b == nil:
		*target = EscalationUnset
	case *b:
		*target = EscalationAllowed
	default:
		*target = EscalationDenied
	}
	return nil
}

// DecodePVCSpec decodes KubeSpawner's make_pvc keyword arguments.
func DecodePVCSpec(data []byte) (PVCSpec, error) {
	pairs, err := orderedObject(data)
	if err != nil {
		return PVCSpec{}, fmt.Errorf("manifest: make_pvc arguments: %w", err)
	}
	var s PVCSpec
	for _, p := range pairs {
		var err error
		switch p.key {
		case "name":
			err = decodeString(p.value, &s.Name)
		case "storage_class":
			err = decodeInto(p.value, &s.StorageClass)
		case "access_modes":
			err = decodeInto(p.value, &s.AccessModes)
		case "selector":
			// make_pvc sets the selector only `if selector:`, so an
			// empty dict is no selector (and one {} selector is enough to
			// make CSI provisioners refuse the claim).
			if kv, _ := orderedObject(p.value); !isNull(p.value) && (len(kv) > 0 || !bytes.HasPrefix(bytes.TrimSpace(p.value), []byte("{"))) {
				s.Selector = new(metav1.LabelSelector)
				err = decodeModel(p.value, s.Selector, p.key)
			}
		case "storage":
			err = decodeQuantity(p.value, &s.Storage)
		case "labels":
			err = decodeInto(p.value, &s.Labels)
		case "annotations":
			err = decodeInto(p.value, &s.Annotations)
		default:
			err = fmt.Errorf("unknown argument")
		}
		if err != nil {
			return PVCSpec{}, fmt.Errorf("manifest: make_pvc argument %s: %w", p.key, err)
		}
	}
	return s, nil
}

func decodeInto(raw json.RawMessage, target any) error {
	if err := strictDecode(raw, target); err != nil {
		return fmt.Errorf("%s: %w", abbreviate(raw), err)
	}
	return nil
}

func decodeString(raw json.RawMessage, target *string) error {
	if isNull(raw) {
		*target = ""
		return nil
	}
	return decodeInto(raw, target)
}

func decodeModelOrNull[T any](raw json.RawMessage, target *[]T) error {
	if isNull(raw) {
		*target = nil
		return nil
	}
	return decodeModel(raw, target, "")
}

// decodeSecurityContext rejects snake_case keys, as KubeSpawner does for
// pod_security_context and container_security_context (they are passed to
// the API verbatim there, so a snake_case key would be silently dropped).
// The keys set to null go to nulls.
func decodeSecurityContext(raw json.RawMessage, name string, target any, nulls *[]string) error {
	pairs, err := orderedObject(raw)
	if err != nil {
		return err
	}
	*nulls = nil
	for _, p := range pairs {
		if strings.Contains(p.key, "_") {
			return fmt.Errorf("%s's keys should have k8s camelCase names, got %q", name, p.key)
		}
		if isNull(p.value) {
			*nulls = append(*nulls, p.key)
		}
	}
	return decodeInto(raw, target)
}

// decodeEnv decodes KubeSpawner's env dict in order: a string value is
// {name: key, value: string}; a dict value is an EnvVar whose name
// defaults to the key.
func decodeEnv(raw json.RawMessage, target *[]corev1.EnvVar, keys *[]string) error {
	if isNull(raw) {
		*target, *keys = nil, nil
		return nil
	}
	pairs, err := orderedObject(raw)
	if err != nil {
		return err
	}
	for _, p := range pairs {
		*keys = append(*keys, p.key)
		var value string
		if json.Unmarshal(p.value, &value) == nil {
			*target = append(*target, corev1.EnvVar{Name: p.key, Value: value})
			continue
		}
		var v corev1.EnvVar
		if err := decodeModel(p.value, &v, p.key); err != nil {
			return err
		}
		if v.Name == "" {
			v.Name = p.key
		}
		*target = append(*target, v)
	}
	return nil
}

// decodeQuantity accepts a Kubernetes quantity as a string ("512Mi",
// "1.5", "500m") or a JSON number (2, 0.5, 2147483648); null is unset.
func decodeQuantity(raw json.RawMessage, target *resource.Quantity) error {
	if isNull(raw) {
		*target = resource.Quantity{}
		return nil
	}
	text := string(bytes.TrimSpace(raw))
	if strings.HasPrefix(text, `"`) {
		if err := json.Unmarshal(raw, &text); err != nil {
			return err
		}
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		return fmt.Errorf("%q is not a quantity (like 2, 0.5, 500m, 512Mi, 1.5Gi): %w", text, err)
	}
	*target = q
	return nil
}

func decodeResourceList(raw json.RawMessage, target *corev1.ResourceList) error {
	if isNull(raw) {
		*target = nil
		return nil
	}
	pairs, err := orderedObject(raw)
	if err != nil {
		return err
	}
	list := corev1.ResourceList{}
	for _, p := range pairs {
		var q resource.Quantity
		if err := decodeQuantity(p.value, &q); err != nil {
			return fmt.Errorf("%s: %w", p.key, err)
		}
		list[corev1.ResourceName(p.key)] = q
	}
	*target = list
	return nil
}

// decodeID decodes uid, gid or fs_gid: a traitlets Integer (a bool is an
// int in Python, so true is 1) or null.
func decodeID(raw json.RawMessage, target **int64) error {
	*target = nil
	if isNull(raw) {
		return nil
	}
	switch strings.TrimSpace(string(raw)) {
	case "true":
		*target = ptr.To[int64](1)
		return nil
	case "false":
		*target = ptr.To[int64](0)
		return nil
	}
	return decodeInto(raw, target)
}

// pyInt is Python's int() of a JSON value: a bool is 0 or 1, a number is
// truncated toward zero (7.9 is 7), a string is a base-10 integer with
// optional sign, surrounding whitespace and single underscores between
// digits ("100" is 100, "7.9" is an error).
func pyInt(raw json.RawMessage) (int64, error) {
	text := strings.TrimSpace(string(raw))
	switch {
	case text == "true":
		return 1, nil
	case text == "false":
		return 0, nil
	case strings.HasPrefix(text, `"`):
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		t := strings.TrimFunc(s, unicode.IsSpace)
		digits := strings.TrimLeft(t, "+-")
		if len(t)-len(digits) > 1 || digits == "" || digits[0] == '_' || digits[len(digits)-1] == '_' || strings.Contains(digits, "__") {
			return 0, fmt.Errorf("int(%q): invalid literal for int() with base 10", s)
		}
		n, err := strconv.ParseInt(t[:len(t)-len(digits)]+strings.ReplaceAll(digits, "_", ""), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("int(%q): invalid literal for int() with base 10", s)
		}
		return n, nil
	}
	var f json.Number
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("int() of %s: want a number or a string of digits", abbreviate(raw))
	}
	if n, err := f.Int64(); err == nil {
		return n, nil
	}
	v, err := f.Float64()
	if err != nil || math.IsNaN(v) || math.Abs(v) >= math.MaxInt64 {
		return 0, fmt.Errorf("int() of %s: out of range", f)
	}
	return int64(v), nil // truncates toward zero, as int() does
}
