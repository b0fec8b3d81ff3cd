package kubespawner

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	PendingTimeout  Seconds `json:"pending_timeout"`
	CreatingTimeout Seconds `json:"creating_timeout"`
	// UnschedulableTimeout ends a start whose pod the scheduler has
	// refused (PodScheduled False, Unschedulable) this long, with reason
	// Unschedulable and the scheduler's message, unless an autoscaler
	// said it is adding a node for it (a TriggeredScaleUp or Nominated
	// event). It needs the pod's events, so it applies where a start
	// reads them (every start of a Manager; a Spawner's start with
	// progress or a TracerProvider) and they can be read. spawnkit's own;
	// default 120; 0 turns it off.
	UnschedulableTimeout      *Seconds `json:"unschedulable_timeout"`
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

// UnschedulableAfter is unschedulable_timeout as a duration, 0 when off.
func (c *Config) UnschedulableAfter() time.Duration {
	if c.UnschedulableTimeout == nil {
		return 0
	}
	return c.UnschedulableTimeout.Duration()
}
