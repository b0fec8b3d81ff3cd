package kubespawner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// Config holds a spawner's configuration, with KubeSpawner's option names
// as JSON and YAML keys. The pod options (image, resources, volumes,
// security, scheduling, ...) are KubeSpawner's make_pod arguments and live
// in Pod; the rest are the spawner's own. Load one with Load, or
// build one in Go: a profile list works the same on both (see Resolve).
type Config struct {
	// ProfileList is KubeSpawner's profile_list; Resolve applies it.
	ProfileList []Profile `json:"profile_list"`
	// ProfileListFunc, when set, builds the profile list per start (a
	// dynamic profile_list); it wins over ProfileList.
	ProfileListFunc func(ctx context.Context) ([]Profile, error) `json:"-"`
	// ProfileNamespaces, with ProfileListFunc, are the namespaces its
	// profiles may put a server in besides Namespace (a namespace
	// override): a Go-built list is known only per start, so it declares
	// them here, and a start whose profile names another namespace is
	// refused. Servers are trusted only in these namespaces (see
	// Factory.CheckPlacement), and the Manager watches them.
	ProfileNamespaces []string `json:"-"`
	// source holds the option values Resolve merges profile overrides
	// into: as loaded, or, for a Config built in Go with a profile list,
	// as its fields held them before withDefaults filled the defaults
	// (typedOptions). nil for a Go-built Config never defaulted.
	source map[string]any

	// HubOptions are the options that act in the hub, not on the
	// server's objects (JupyterHub Spawner traits such as default_url,
	// env_keep, ip, debug; KubeSpawner's API client options): loaded and
	// kept so a KubeSpawner configuration loads unchanged; the hub puts
	// their effect into StartOptions.Env.
	HubOptions map[string]json.RawMessage `json:"-"`
	// warnings are what Load would have KubeSpawner log
	// (deprecated names, ignored options).
	warnings []string
	// environment is `environment` as loaded, in order and with its raw
	// values (strings, valueFrom dicts, ...); nil for a Go-built Config.
	environment []EnvEntry
	// resolved is set on what Resolve returns: a profile (if any) has
	// been applied, so the checks that only the final values decide
	// (a guarantee above its limit) apply. A loaded Config with a
	// profile list is never used as it is: a profile always applies.
	resolved bool

	// Pod is the pod template: every make_pod option of KubeSpawner,
	// decoded by manifest.DecodePodSpec. Its Name, Labels, Annotations,
	// Env and Cmd are filled per server by Start.
	Pod manifest.PodSpec `json:"-"`

	// Naming (KubeSpawner's slug_scheme, *_name_template, namespace,
	// enable_user_namespaces).
	SlugScheme            naming.Scheme `json:"slug_scheme"`
	TemplateSyntax        string        `json:"template_syntax"` // "kubespawner" (default) or "go": spawnkit's own
	PodNameTemplate       string        `json:"pod_name_template"`
	PVCNameTemplate       string        `json:"pvc_name_template"`
	SecretNameTemplate    string        `json:"secret_name_template"`
	UserNamespaceTemplate string        `json:"user_namespace_template"`
	DNSNameTemplate       string        `json:"dns_name_template"`
	Namespace             string        `json:"namespace"`
	EnableUserNamespaces  bool          `json:"enable_user_namespaces"`
	// UserNamespaceLabels and UserNamespaceAnnotations are templates for
	// the user namespace's labels and annotations.
	UserNamespaceLabels      map[string]string `json:"user_namespace_labels"`
	UserNamespaceAnnotations map[string]string `json:"user_namespace_annotations"`
	// NetworkPolicy, with enable_user_namespaces, gives every user
	// namespace a NetworkPolicy with the semantics of z2jh's singleuser
	// policy (spawnkit's own; off by default).
	NetworkPolicy *NetworkPolicyConfig `json:"network_policy"`
	// UserNamespaceResourceQuota, with enable_user_namespaces, gives
	// every user namespace a ResourceQuota with these hard limits
	// (resource name to quantity, e.g. limits.memory: 8Gi; values are
	// templates), and refuses a start that the quota has no room for
	// before anything of the server is created (spawnkit's own).
	UserNamespaceResourceQuota map[string]string `json:"user_namespace_resource_quota"`
	// HandleLegacyNames (default true) makes a start find and keep a
	// claim made under KubeSpawner's pre-7 (escape scheme) name.
	HandleLegacyNames *bool `json:"handle_legacy_names"`
	// KubernetesCluster are the clusters a server is placed in, in
	// order of preference, for a hub that runs servers in several
	// (spawnkit's own; one name or a list): typically set by a
	// profile's or a choice's kubespawner_override. The Manager tries
	// them in order and takes the first healthy; a Factory with a
	// cluster (Options.Cluster) refuses a start whose configuration
	// names others only (ErrOtherCluster). Empty: any cluster.
	KubernetesCluster ClusterNames `json:"kubernetes_cluster"`

	// Labels and annotations.
	ComponentLabel   string            `json:"component_label"`
	CommonLabels     map[string]string `json:"common_labels"`
	ExtraLabels      map[string]string `json:"extra_labels"`
	ExtraAnnotations map[string]string `json:"extra_annotations"`

	// The single-user server.
	Cmd []string `json:"cmd"`
	// Args are appended to Cmd (JupyterHub's args); without a Cmd they
	// are ignored, with a warning, as the image's command is used.
	Args        []string          `json:"args"`
	Port        int32             `json:"port"` // default 8888
	Environment map[string]string `json:"environment"`

	// Storage.
	StoragePVCEnsure        bool                                `json:"storage_pvc_ensure"`
	StorageCapacity         resource.Quantity                   `json:"storage_capacity"`
	StorageClass            *string                             `json:"storage_class"`
	StorageAccessModes      []corev1.PersistentVolumeAccessMode `json:"storage_access_modes"` // default ReadWriteOnce
	StorageExtraLabels      map[string]string                   `json:"storage_extra_labels"`
	StorageExtraAnnotations map[string]string                   `json:"storage_extra_annotations"`
	DeletePVC               *bool                               `json:"delete_pvc"` // default true
	StorageSelector         *metav1.LabelSelector               `json:"storage_selector"`
	// RememberPVCName keeps using the claim name saved in State after a
	// template change (default true).
	RememberPVCName *bool `json:"remember_pvc_name"`

	// UIDFunc, GIDFunc, FSGIDFunc and SupplementalGIDsFunc compute the
	// ids per server (KubeSpawner's callable uid, gid, fs_gid and
	// supplemental_gids); they win over the values in Pod.
	UIDFunc              func(naming.Server) *int64  `json:"-"`
	GIDFunc              func(naming.Server) *int64  `json:"-"`
	FSGIDFunc            func(naming.Server) *int64  `json:"-"`
	SupplementalGIDsFunc func(naming.Server) []int64 `json:"-"`

	// Networking and internal SSL.
	ServicesEnabled bool   `json:"services_enabled"`
	PodConnectIP    string `json:"pod_connect_ip"`    // a template; the URL's host when set
	SecretMountPath string `json:"secret_mount_path"` // internal SSL; default /etc/jupyterhub/ssl/

	// Lifecycle.
	StartTimeout Seconds `json:"start_timeout"` // default 300
	// StopTimeout bounds Stop's wait for the deleted pod to be gone (a
	// finalizer nobody removes, a node that does not answer): spawnkit's
	// own; 0 means start_timeout, which is what KubeSpawner waits.
	StopTimeout Seconds `json:"stop_timeout"`
	// PendingTimeout and CreatingTimeout bound a start's phases, as
	// Gitpod's workspace manager does: a pod not scheduled this long
	// after its start (no node fits: pending), and a scheduled pod whose
	// containers are not running this long after it was scheduled (image
	// pulls, volume mounts: creating), end the start with reason
	// PendingTimeout or CreatingTimeout. spawnkit's own; 0, the default,
	// leaves only start_timeout, as KubeSpawner does.
	PendingTimeout            Seconds  `json:"pending_timeout"`
	CreatingTimeout           Seconds  `json:"creating_timeout"`
	K8sAPIRequestTimeout      Seconds  `json:"k8s_api_request_timeout"`       // default 3
	K8sAPIRequestRetryTimeout Seconds  `json:"k8s_api_request_retry_timeout"` // default 30
	DeleteGracePeriod         *Seconds `json:"delete_grace_period"`           // default 1; 0 means 0
	DeleteStoppedPods         *bool    `json:"delete_stopped_pods"`           // default true
	EventsEnabled             *bool    `json:"events_enabled"`                // default true
	FatalReasons              []string `json:"fatal_reasons"`                 // spawnkit's own; default DefaultFatalReasons
	// AllowedDroppedFields are pod fields the API server may make the
	// pod without and the start still go on (spawnkit's own; by default
	// a dropped field fails the start with a *FieldsDroppedError): a path
	// as that error names it ("spec.hostUsers",
	// "spec.containers[notebook].resources.limits.cpu") allows itself
	// and everything beneath it, "*" allows any. A field allowed and
	// dropped is reported in the start's progress.
	AllowedDroppedFields []string `json:"allowed_dropped_fields"`
	// RetiredNamespaces are namespaces that held servers under an
	// earlier configuration (spawnkit's own): a namespace the operator
	// moved away from, or the user namespaces of an earlier
	// user_namespace_template. Servers running there are still found,
	// reported, polled, watched and stoppable; no start goes there. An
	// entry is a namespace's name, or a template rendered per server
	// like user_namespace_template ("{hubnamespace}-{username}"), which
	// makes the Manager watch every namespace. A retired namespace that
	// is some user's own namespace today (user_namespace_template) is
	// trusted for that user only. Remove an entry once no server runs
	// there (the Manager's List names each server's namespace).
	RetiredNamespaces []string `json:"retired_namespaces"`
	// EventMessageRules rewrite or drop the messages of the pod's
	// Kubernetes events before they reach the hub's progress (spawnkit's
	// own; KubeSpawner shows every event as it is, #910, #916): the
	// first rule that matches an event decides.
	EventMessageRules []EventMessageRule `json:"event_message_rules"`
	// SecretEnv names the environment variables whose values go into
	// the server's environment Secret (EnvSecretName), which the pod's
	// env references by secretKeyRef, instead of into the pod spec
	// (spawnkit's own; nil means DefaultSecretEnv; an empty list puts
	// every value in the pod spec, as KubeSpawner does).
	SecretEnv []string `json:"secret_env"`
	// SlowSpawnMessageAfter adds a progress message when a start takes
	// longer (spawnkit's own; default 30; negative turns it off).
	SlowSpawnMessageAfter Seconds `json:"slow_spawn_message_after"`
	// KubeSpawner's slow_spawn_message_threshold (the default of
	// SlowSpawnMessageAfter), slow_spawn_message_frequency and
	// slow_spawn_message (with {seconds}).
	SlowSpawnMessageThreshold Seconds `json:"slow_spawn_message_threshold"`
	SlowSpawnMessageFrequency Seconds `json:"slow_spawn_message_frequency"`
	SlowSpawnMessage          string  `json:"slow_spawn_message"`
}

// Seconds is a duration written as a number of seconds, as KubeSpawner's
// timeouts are.
type Seconds float64

// Duration converts s.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// DefaultFatalReasons are container waiting reasons that end a Start at
// once instead of waiting for the start timeout. Image pulls have their
// own rule: a container whose pull fails a second time (ErrImagePull,
// back-off, ErrImagePull again) ends the start; listing ErrImagePull or
// ImagePullBackOff here makes the first occurrence fatal.
var DefaultFatalReasons = []string{"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CrashLoopBackOff"}

// EventMessageRule is one of event_message_rules: an event matches when
// its reason is Reason (any reason when "") and its message matches the
// regular expression Match (any message when ""); then Drop hides it, or
// Replace is shown instead of the whole message, with $0 (Match's match),
// $1 and ${name} (its groups) expanded as regexp.Expand does.
type EventMessageRule struct {
	Reason  string `json:"reason"`
	Match   string `json:"match"`
	Replace string `json:"replace"`
	Drop    bool   `json:"drop"`
}

// NetworkPolicyConfig is network_policy: z2jh's
// singleuser.networkPolicy, for user namespaces, whose hub and proxy run
// in the hub's namespace. Every field but enabled has z2jh's default.
type NetworkPolicyConfig struct {
	Enabled bool `json:"enabled"`
	// HubNamespace is where the hub, proxy and autohttps pods run;
	// default: namespace.
	HubNamespace string `json:"hub_namespace"`
	// HubPodLabels, ProxyPodLabels and AutoHTTPSPodLabels select them
	// there; default app=jupyterhub and component hub, proxy, autohttps
	// (z2jh's labels).
	HubPodLabels       map[string]string `json:"hub_pod_labels"`
	ProxyPodLabels     map[string]string `json:"proxy_pod_labels"`
	AutoHTTPSPodLabels map[string]string `json:"autohttps_pod_labels"`
	// HubPort is the hub's API port; default 8081.
	HubPort int32 `json:"hub_port"`
	// AllowedIngressPorts are open to every source.
	AllowedIngressPorts []intstr.IntOrString `json:"allowed_ingress_ports"`
	// InterNamespaceAccessLabels is "ignore" (default) or "accept": with
	// accept, pods labelled hub.jupyter.org/network-access-singleuser in
	// any namespace, and namespaces so labelled, reach the servers.
	InterNamespaceAccessLabels string `json:"inter_namespace_access_labels"`
	// EgressAllowRules override z2jh's defaults
	// (manifest.DefaultEgressAllowRules) rule by rule: keys
	// cloud_metadata_server, dns_ports_cloud_metadata_server,
	// dns_ports_kube_system_namespace, dns_ports_private_ips,
	// non_private_ips, private_ips.
	EgressAllowRules map[string]bool `json:"egress_allow_rules"`
	// CloudMetadataIP default 169.254.169.254.
	CloudMetadataIP string `json:"cloud_metadata_ip"`
	// Ingress and Egress rules are added as they are.
	Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress"`
	Egress  []networkingv1.NetworkPolicyEgressRule  `json:"egress"`
}

// DefaultSecretEnv are the variables kept out of the pod spec by default:
// the server's JupyterHub API token under both of the names JupyterHub
// gives it. Anyone who can read pods (kubectl get pod -o yaml, a
// monitoring agent, an error that prints the pod) would otherwise read
// the token, and with it act as the user.
var DefaultSecretEnv = []string{"JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"}

// podOptionKeys are the KubeSpawner options that are make_pod arguments.
var podOptionKeys = []string{
	"image", "image_pull_policy", "image_pull_secrets", "node_selector", "uid", "gid", "fs_gid",
	"supplemental_gids", "privileged", "allow_privilege_escalation", "container_security_context",
	"pod_security_context", "working_dir", "volumes", "volume_mounts", "cpu_limit", "cpu_guarantee",
	"mem_limit", "mem_guarantee", "extra_resource_limits", "extra_resource_guarantees", "lifecycle_hooks",
	"init_containers", "service_account", "automount_service_account_token", "extra_container_config",
	"extra_pod_config", "extra_containers", "scheduler_name", "tolerations", "node_affinity_preferred",
	"node_affinity_required", "pod_affinity_preferred", "pod_affinity_required", "pod_anti_affinity_preferred",
	"pod_anti_affinity_required", "priority_class_name",
}

// Load reads a configuration in YAML or JSON with KubeSpawner's
// option names. An unknown key, a value of the wrong type or a malformed
// quantity is an error naming the key.
func Load(data []byte) (Config, error) { return loadConfig(data, nil) }

// loadConfig is Load; adjust, when set, changes the decoded Config
// before it is checked (Override gives it the profile list and Go-only
// fields of the Config it overrides).
func loadConfig(data []byte, adjust func(*Config)) (Config, error) {
	jsonData, err := yamlToJSON(data)
	if err != nil {
		return Config{}, fmt.Errorf("spawner: config is neither YAML nor JSON: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(jsonData, &all); err != nil {
		return Config{}, fmt.Errorf("spawner: config must be a mapping of option names: %w", err)
	}
	// Unknown keys first, each with its line and the name probably meant:
	// the decoder below would name only the first, with neither.
	if err := checkKeys(data, adjust == nil); err != nil {
		return Config{}, fmt.Errorf("spawner: config: %w", err)
	}
	warnings, err := kubespawnerCompat(all)
	if err != nil {
		return Config{}, fmt.Errorf("spawner: config: %w", err)
	}
	pod := map[string]json.RawMessage{}
	own := map[string]json.RawMessage{}
	hub := map[string]json.RawMessage{}
	var envRaw json.RawMessage
	for k, v := range all {
		switch {
		case k == "environment":
			envRaw = v
		case slices.Contains(hubOptions, k):
			hub[k] = v
		case slices.Contains(podOptionKeys, k):
			pod[k] = v
		default:
			own[k] = v
		}
	}
	var c Config
	if len(hub) > 0 {
		c.HubOptions = hub
	}
	if envRaw != nil {
		if c.environment, c.Environment, err = decodeEnvironment(envRaw); err != nil {
			return Config{}, fmt.Errorf("spawner: config: environment: %w", err)
		}
	}
	ownJSON, _ := json.Marshal(own)
	dec := json.NewDecoder(bytes.NewReader(ownJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("spawner: config: %w", err)
	}
	podJSON, _ := json.Marshal(pod)
	if c.Pod, err = manifest.DecodePodSpec(podJSON); err != nil {
		return Config{}, fmt.Errorf("spawner: config: %w", err)
	}
	if c.source, err = decodeSource(jsonData); err != nil {
		return Config{}, fmt.Errorf("spawner: config: %w", err)
	}
	if len(c.Args) > 0 && len(c.Cmd) == 0 {
		warnings = append(warnings, fmt.Sprintf("ignoring args %q: without cmd the image's command is used; set cmd to pass arguments", c.Args))
	}
	c.warnings = warnings
	if adjust != nil {
		adjust(&c)
	}
	// Every option is checked here, so a bad value is reported at load
	// (all problems at once, by key) and never reaches a start. The
	// default image fills an absent option only: an explicit "" is an
	// error, as the API server would reject the pod.
	check := c.WithDefaults()
	if raw, ok := all["image"]; ok && strings.TrimSpace(string(raw)) == `""` {
		check.Pod.Image = ""
	}
	if check.Namespace == "" {
		check.Namespace = metav1.NamespaceDefault // detected at New; any valid name checks the rest
	}
	if err := check.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults returns c with KubeSpawner's defaults filled in.
func (c Config) WithDefaults() Config {
	if c.source == nil && (len(c.ProfileList) > 0 || c.ProfileListFunc != nil) {
		// A Config built in Go: its profiles merge into the options it
		// was given, not into the defaults below, as a loaded Config's
		// do. On error source stays nil, and validate reports it.
		if opts, errs := c.typedOptions(); len(errs) == 0 {
			c.source = opts
		}
	}
	if c.Port == 0 {
		c.Port = 8888
	}
	if c.ComponentLabel == "" {
		c.ComponentLabel = naming.DefaultComponent
	}
	if c.CommonLabels == nil {
		c.CommonLabels = naming.KubeSpawnerCommonLabels()
	}
	if c.StorageAccessModes == nil {
		// Unset only: an explicit [] is refused (validateOptions), as
		// the API server refuses a claim without access modes.
		c.StorageAccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 300
	}
	if c.K8sAPIRequestTimeout == 0 {
		c.K8sAPIRequestTimeout = 3
	}
	if c.K8sAPIRequestRetryTimeout == 0 {
		c.K8sAPIRequestRetryTimeout = 30
	}
	if c.DeleteGracePeriod == nil {
		c.DeleteGracePeriod = ptr.To[Seconds](1)
	}
	if c.Pod.Image == "" {
		c.Pod.Image = DefaultImage
	}
	if c.SlowSpawnMessageAfter == 0 {
		c.SlowSpawnMessageAfter = c.SlowSpawnMessageThreshold
	}
	if c.SlowSpawnMessageAfter == 0 {
		c.SlowSpawnMessageAfter = 30
	}
	if c.SecretMountPath == "" {
		c.SecretMountPath = "/etc/jupyterhub/ssl/"
	}
	if c.FatalReasons == nil {
		c.FatalReasons = DefaultFatalReasons
	}
	if c.SecretEnv == nil {
		c.SecretEnv = DefaultSecretEnv
	}
	return c
}

// validate checks the options that would otherwise fail only at Start,
// after objects exist, and reports all problems at once by option name.
func (c *Config) Validate() error {
	if errs := c.validateOptions(); len(errs) > 0 {
		return &ConfigError{Errs: errs}
	}
	return nil
}

// namingOptions maps the naming options onto naming.Options.
func (c Config) NamingOptions() (naming.Options, error) {
	o := naming.Options{
		Scheme:            c.SlugScheme,
		HubNamespace:      c.Namespace,
		UserNamespaces:    c.EnableUserNamespaces,
		PodTemplate:       c.PodNameTemplate,
		PVCTemplate:       c.PVCNameTemplate,
		SecretTemplate:    c.SecretNameTemplate,
		NamespaceTemplate: c.UserNamespaceTemplate,
		DNSTemplate:       c.DNSNameTemplate,
	}
	if c.SecretUsesPVCName() {
		o.SecretTemplate = "" // rendered by Plan (secretUsesPVCName)
	}
	switch c.TemplateSyntax {
	case "", "kubespawner":
		o.Syntax = naming.KubeSpawner
	case "go":
		o.Syntax = naming.Go
	default:
		return o, fmt.Errorf("spawner: template_syntax must be \"kubespawner\" or \"go\", not %q", c.TemplateSyntax)
	}
	return o, nil
}

// Warnings are what loading the configuration would have KubeSpawner
// log: deprecated option names, ignored options and arguments.
func (c Config) Warnings() []string { return slices.Clone(c.warnings) }

// optionField is a field of Config, or of its Pod, that an option of the
// KubeSpawner dictionary decodes into.
type optionField struct {
	key   string
	index []int // for reflect.Value.FieldByIndex on a Config
}

// fieldSets sorts Config's fields by how a Config rebuilt from its option
// dictionary (Load, as Resolve does) gets them back.
type fieldSets struct {
	// options are the fields an option decodes into: the JSON-tagged
	// ones and Pod's make_pod options (podOptionKeys).
	options []optionField
	// goOnly are the exported fields no option carries: tagged json:"-"
	// (the funcs), and Pod's fields that no make_pod option sets.
	// keepGoOnly copies them, so a new one is kept without a change.
	goOnly [][]int
}

// configFields sorts Config's fields, once.
var configFields = sync.OnceValue(func() fieldSets {
	var s fieldSets
	podKeys := map[string]string{} // "fsgid": "fs_gid": the PodSpec field's name, folded
	for _, k := range podOptionKeys {
		podKeys[strings.ReplaceAll(k, "_", "")] = k
	}
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported():
			// State Load derives from the options again.
		case f.Name == "HubOptions":
			// The hub's options (hubOptions), added by typedOptions.
		case f.Name == "ProfileList":
			// Not an option profiles merge into (decodeSource).
		case f.Name == "Pod":
			for j := range f.Type.NumField() {
				folded := strings.ToLower(f.Type.Field(j).Name)
				if key, ok := podKeys[folded]; ok {
					s.options = append(s.options, optionField{key, []int{i, j}})
					delete(podKeys, folded)
				} else {
					s.goOnly = append(s.goOnly, []int{i, j})
				}
			}
		case name == "-":
			s.goOnly = append(s.goOnly, []int{i})
		default:
			s.options = append(s.options, optionField{name, []int{i}})
		}
	}
	if len(podKeys) > 0 {
		panic(fmt.Sprintf("spawner: make_pod options without a manifest.PodSpec field: %v", slices.Sorted(maps.Values(podKeys))))
	}
	return s
})

// keepGoOnly copies into dst the fields of from that no option carries
// (configFields' goOnly): Resolve rebuilds its result from options, and
// only Go can carry a func.
func keepGoOnly(dst, from *Config) {
	d, f := reflect.ValueOf(dst).Elem(), reflect.ValueOf(from).Elem()
	for _, index := range configFields().goOnly {
		d.FieldByIndex(index).Set(f.FieldByIndex(index))
	}
}

// typedOptions is the option dictionary of a Config built in Go: what a
// configuration file that sets its fields loads as (decodeSource), for
// Resolve to merge profile overrides into. A field at its zero value is
// left out, as an option absent from a file: Load decodes both to
// the zero value, an override's mapping replaces both, and a Go Config's
// empty Image, which as an explicit "" Load refuses, is the
// default image. A field that cannot be an option is an error naming it.
func (c *Config) typedOptions() (map[string]any, field.ErrorList) {
	var errs field.ErrorList
	opts := map[string]any{}
	set := func(key string, raw []byte) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(key), string(raw), "is not JSON: "+err.Error()))
			return
		}
		opts[key] = v
	}
	cv := reflect.ValueOf(c).Elem()
	for _, f := range configFields().options {
		v := cv.FieldByIndex(f.index)
		if v.IsZero() {
			continue
		}
		value := optionValue(f.key, v.Interface())
		raw, err := json.Marshal(value)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(f.key), fmt.Sprintf("%T", value),
				"cannot be written as the option that profile overrides merge into: "+err.Error()))
			continue
		}
		set(f.key, raw)
	}
	for _, k := range slices.Sorted(maps.Keys(c.HubOptions)) {
		if !slices.Contains(hubOptions, k) {
			errs = append(errs, field.Invalid(field.NewPath(k), string(c.HubOptions[k]),
				"is in HubOptions but is not an option that acts in the hub: set its own Config field"))
			continue
		}
		set(k, c.HubOptions[k])
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return opts, nil
}

// optionValue is a field's value as KubeSpawner writes the option, where
// its JSON form is not that: allow_privilege_escalation is true, false or
// null; cpu_limit and cpu_guarantee are a float of CPUs; mem_limit and
// mem_guarantee a number of bytes (KubeSpawner's "1G" is 2^30 bytes, a
// Go Quantity's 10^9).
func optionValue(key string, v any) any {
	switch v := v.(type) {
	case manifest.PrivilegeEscalation:
		switch v {
		case manifest.EscalationAllowed:
			return true
		case manifest.EscalationUnset:
			return nil
		}
		return false
	case resource.Quantity:
		switch key {
		case "cpu_limit", "cpu_guarantee":
			return v.AsApproximateFloat64()
		case "mem_limit", "mem_guarantee":
			return v.Value()
		}
	}
	return v
}
