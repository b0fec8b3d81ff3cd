package spawner

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// rendered are a start's templated options, expanded for its server:
// exactly the options KubeSpawner 7.1 expands.
type rendered struct {
	extraLabels, extraAnnotations     map[string]string
	storageLabels, storageAnnotations map[string]string
	nsLabels, nsAnnotations           map[string]string
	quota                             map[string]string      // user_namespace_resource_quota
	environment                       []kubespawner.EnvEntry // expanded; non-string values as loaded
	storageSelector                   *metav1.LabelSelector
	volumes                           []corev1.Volume
	mounts                            []corev1.VolumeMount
	initContainers, extraContainers   []corev1.Container
	extraPodConfig                    manifest.Overrides
	serviceAccount                    string
	connectHost                       string // pod_connect_ip, when set
	secretName                        string // the internal-SSL secret
	// secretNameErr is why the API server would refuse secretName as a
	// secret's name; it matters with internal SSL only.
	secretNameErr error
}

func render(cfg *kubespawner.Config, fields naming.Fields, syntax naming.Syntax) (*rendered, error) {
	r := &rendered{}
	var err error
	for _, m := range []struct {
		key    string
		in     map[string]string
		target *map[string]string
	}{
		{"extra_labels", cfg.ExtraLabels, &r.extraLabels},
		{"extra_annotations", cfg.ExtraAnnotations, &r.extraAnnotations},
		{"storage_extra_labels", cfg.StorageExtraLabels, &r.storageLabels},
		{"storage_extra_annotations", cfg.StorageExtraAnnotations, &r.storageAnnotations},
		{"user_namespace_labels", cfg.UserNamespaceLabels, &r.nsLabels},
		{"user_namespace_annotations", cfg.UserNamespaceAnnotations, &r.nsAnnotations},
		{"user_namespace_resource_quota", cfg.UserNamespaceResourceQuota, &r.quota},
	} {
		if *m.target, err = expandMap(m.in, fields, syntax); err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
	}
	for _, e := range cfg.EnvironmentEntries() {
		v := e.Value
		switch v.(type) {
		case string, []any, map[string]any:
			pv, err := naming.ParseValue(v, syntax)
			if err != nil {
				return nil, fmt.Errorf("environment: %s: %w", e.Name, err)
			}
			if v, err = pv.Expand(fields); err != nil {
				return nil, fmt.Errorf("environment: %s: %w", e.Name, err)
			}
		}
		r.environment = append(r.environment, kubespawner.EnvEntry{Name: e.Name, Value: v})
	}
	if cfg.StorageSelector != nil {
		r.storageSelector = cfg.StorageSelector.DeepCopy()
		if err := expandTyped(r.storageSelector, fields, syntax); err != nil {
			return nil, fmt.Errorf("storage_selector: %w", err)
		}
		if len(r.storageSelector.MatchLabels) == 0 && len(r.storageSelector.MatchExpressions) == 0 {
			// A selector that selects everything is left out: KubeSpawner
			// leaves out `{}` (make_pvc's `if selector:`), and spawnkit
			// also `{matchLabels: {}}`, which KubeSpawner sends (rule
			// empty-storage-selector): any selector stops dynamic
			// provisioning (CSI provisioners refuse the claim).
			r.storageSelector = nil
		}
	}
	r.volumes, r.mounts = cfg.Pod.Volumes, cfg.Pod.VolumeMounts
	r.initContainers, r.extraContainers = cfg.Pod.InitContainers, cfg.Pod.ExtraContainers
	for _, t := range []struct {
		key    string
		n      int
		target any
	}{
		{"volumes", len(r.volumes), &r.volumes}, {"volume_mounts", len(r.mounts), &r.mounts},
		{"init_containers", len(r.initContainers), &r.initContainers}, {"extra_containers", len(r.extraContainers), &r.extraContainers},
	} {
		if t.n == 0 {
			// Nothing to expand: the round trip through JSON (four
			// reflective encodings a list) would return no elements.
			continue
		}
		if err := expandTyped(t.target, fields, syntax); err != nil {
			return nil, fmt.Errorf("%s: %w", t.key, err)
		}
	}
	if len(cfg.Pod.ExtraPodConfig) > 0 {
		r.extraPodConfig = cfg.Pod.ExtraPodConfig
		if err := expandTyped(&r.extraPodConfig, fields, syntax); err != nil {
			return nil, fmt.Errorf("extra_pod_config: %w", err)
		}
	}
	if cfg.Pod.ServiceAccount != "" {
		if r.serviceAccount, err = cfg.Expand(cfg.Pod.ServiceAccount, fields); err != nil {
			return nil, fmt.Errorf("service_account: %w", err)
		}
	}
	if errs := checkRendered(cfg, r); len(errs) > 0 {
		return nil, &kubespawner.ConfigError{Errs: errs}
	}
	if cfg.PodConnectIP != "" {
		// KubeSpawner expands each '.'-separated part holding a '{' on
		// its own.
		parts := strings.Split(cfg.PodConnectIP, ".")
		for i, p := range parts {
			if syntax == naming.KubeSpawner && !strings.Contains(p, "{") {
				continue
			}
			if syntax != naming.KubeSpawner {
				break
			}
			if parts[i], err = cfg.Expand(p, fields); err != nil {
				return nil, fmt.Errorf("pod_connect_ip: %w", err)
			}
		}
		r.connectHost = strings.Join(parts, ".")
		if syntax != naming.KubeSpawner {
			if r.connectHost, err = cfg.Expand(cfg.PodConnectIP, fields); err != nil {
				return nil, fmt.Errorf("pod_connect_ip: %w", err)
			}
		}
	}
	return r, nil
}

// checkRendered checks the rendered labels, annotations and service
// account the way the API server will, by option: a template is only
// known to be valid once it is rendered for a server.
func checkRendered(cfg *kubespawner.Config, r *rendered) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabels(r.extraLabels, field.NewPath("extra_labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(r.extraAnnotations, field.NewPath("extra_annotations"))...)
	if cfg.StoragePVCEnsure {
		errs = append(errs, metav1validation.ValidateLabels(r.storageLabels, field.NewPath("storage_extra_labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(r.storageAnnotations, field.NewPath("storage_extra_annotations"))...)
	}
	if cfg.EnableUserNamespaces {
		errs = append(errs, metav1validation.ValidateLabels(r.nsLabels, field.NewPath("user_namespace_labels"))...)
		errs = append(errs, apivalidation.ValidateAnnotations(r.nsAnnotations, field.NewPath("user_namespace_annotations"))...)
	}
	if cfg.StoragePVCEnsure && r.storageSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(r.storageSelector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("storage_selector"))...)
	}
	if r.serviceAccount != "" {
		for _, msg := range validation.IsDNS1123Subdomain(r.serviceAccount) {
			errs = append(errs, field.Invalid(field.NewPath("service_account"), r.serviceAccount, msg))
		}
	}
	return errs
}

func buildPod(cfg *kubespawner.Config, server naming.Server, r *rendered, st *State, opts *StartOptions) (*corev1.Pod, []kubespawner.EnvEntry, map[string]string, error) {
	// On the heap: a PodSpec on the stack would deepen every start's
	// goroutine stack by a kilobyte.
	spec := new(manifest.PodSpec)
	*spec = cfg.Pod
	spec.Name = st.PodName
	for _, f := range []struct {
		fn     func(naming.Server) *int64
		target **int64
	}{{cfg.UIDFunc, &spec.UID}, {cfg.GIDFunc, &spec.GID}, {cfg.FSGIDFunc, &spec.FSGID}} {
		if f.fn != nil {
			*f.target = f.fn(server)
		}
	}
	if cfg.SupplementalGIDsFunc != nil {
		spec.SupplementalGIDs = cfg.SupplementalGIDsFunc(server)
	}
	spec.Port = cfg.Port
	cmd, args := cfg.Cmd, cfg.Args
	if opts.Cmd != nil {
		cmd = opts.Cmd
	}
	if opts.Args != nil {
		args = opts.Args
	}
	if len(cmd) > 0 {
		// JupyterHub's cmd + get_args(); without a cmd the image's
		// command runs and the args are dropped, as in KubeSpawner.
		spec.Cmd = append(slices.Clone(cmd), args...)
	} else {
		spec.Cmd = nil
	}
	spec.Labels = addManagedBy(naming.PodLabels(server, cfg.ComponentLabel, r.extraLabels, cfg.CommonLabels), st.Cluster)
	ann := addOwner(server, commonAnnotations(opts, r.extraAnnotations))
	if st.StartID != "" {
		ann[naming.AnnotationStartID] = st.StartID
	}
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return nil, nil, nil, err
	}
	ann[naming.AnnotationState] = string(stateJSON)
	spec.Annotations = ann
	d := cfg.Env(opts.Env, r.environment)
	if spec.Env, spec.EnvKeys, err = kubespawner.EnvVars(d); err != nil {
		return nil, nil, nil, err
	}
	secretEnv := moveToSecret(spec.Env, cfg.SecretEnv, EnvSecretName(st.PodName))
	if opts.SSL != nil {
		spec.SSLSecretName, spec.SSLSecretMountPath = r.secretName, cfg.SecretMountPath
	}
	// manifest.Pod copies what it is given, so the rendered values are
	// never changed by a build.
	spec.Volumes, spec.VolumeMounts = r.volumes, r.mounts
	spec.InitContainers, spec.ExtraContainers = r.initContainers, r.extraContainers
	if r.extraPodConfig != nil {
		spec.ExtraPodConfig = r.extraPodConfig
	}
	spec.ServiceAccount = r.serviceAccount
	pod, err := manifest.Pod(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	pod.Namespace = st.Namespace
	return pod, d, secretEnv, nil
}

func expandMap(m map[string]string, fields naming.Fields, syntax naming.Syntax) (map[string]string, error) {
	if len(m) == 0 {
		return m, nil
	}
	v, err := naming.ParseValue(m, syntax)
	if err != nil {
		return nil, err
	}
	out, err := v.Expand(fields)
	if err != nil {
		return nil, err
	}
	return out.(map[string]string), nil
}

// expandTyped renders the templates in the strings of a typed value
// (volumes, mounts) through its JSON form, as KubeSpawner's _expand_all.
func expandTyped(target any, fields naming.Fields, syntax naming.Syntax) error {
	raw, err := json.Marshal(target)
	if err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return err
	}
	v, err := naming.ParseValue(generic, syntax)
	if err != nil {
		return err
	}
	out, err := v.Expand(fields)
	if err != nil {
		return err
	}
	if raw, err = json.Marshal(out); err != nil {
		return err
	}
	// Into a zeroed target: json.Unmarshal fills an existing slice's
	// array and an existing map in place, and the target starts out
	// sharing them with the configuration, which every start of every
	// user renders from. Without this, the first user's expanded values
	// replaced the templates for everyone after.
	reflect.ValueOf(target).Elem().SetZero()
	return json.Unmarshal(raw, target)
}

// claimsCanExist refuses a pod volume whose claimName no claim can have.
// The API server accepts such a pod (ValidatePersistentClaimVolumeSource
// wants only a non-empty name), but it refuses a claim of that name
// (ValidateObjectMeta: a DNS-1123 subdomain), so the pod would stay
// Pending on "persistentvolumeclaim not found" until the start times out.
// A deliberate difference from KubeSpawner: the rule claim-never-exists
// of the config vectors.
func claimsCanExist(pod *corev1.Pod) error {
	var errs field.ErrorList
	for i, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(field.NewPath("volumes").Index(i).Child("persistentVolumeClaim", "claimName"), name,
				fmt.Sprintf("volume %q names a claim that cannot exist (the API server refuses such a claim name: %s), so the pod could never start", v.Name, msg)))
		}
	}
	if len(errs) > 0 {
		return &kubespawner.ConfigError{Errs: errs}
	}
	return nil
}
