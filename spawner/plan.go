package spawner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// Objects are what a Start creates for a server, rendered without a
// cluster: by the package's Plan (a dry run) or by Spawner.Plan (a plan
// that Start can then carry out, see StartOptions.Plan). They are
// read-only but for the one Start they are handed to, which owns them.
type Objects struct {
	// StartID marks the objects one start creates (naming.AnnotationStartID);
	// empty in a dry run's objects.
	StartID string
	// Names are the server's names from the configuration's templates.
	Names naming.Names
	// Env is the server's environment in KubeSpawner's get_env order:
	// the hub's Env, environment, JUPYTER_IMAGE_SPEC and JUPYTER_IMAGE,
	// then the expanded environment (a variable set again keeps its
	// place). The pod's container has it in dependency order.
	Env []EnvEntry
	// State is what the pod records (naming.AnnotationState): names, port,
	// scheme and host.
	State State
	// Namespace is set with enable_user_namespaces, PVC with
	// storage_pvc_ensure, Secret with internal SSL, and Service with
	// internal SSL or services_enabled. Start sets the owner reference
	// of the secret and service to the pod it creates, and the service's
	// selector to the pod's final labels.
	Namespace *corev1.Namespace
	PVC       *corev1.PersistentVolumeClaim
	Pod       *corev1.Pod
	Secret    *corev1.Secret
	Service   *corev1.Service
	// NetworkPolicy (network_policy) and ResourceQuota
	// (user_namespace_resource_quota) are the user namespace's, with
	// enable_user_namespaces: shared by the user's servers, made or
	// brought up to date by each start before anything of the server.
	NetworkPolicy *networkingv1.NetworkPolicy
	ResourceQuota *corev1.ResourceQuota
	// EnvSecret holds the values of the variables Config.SecretEnv
	// names (the API token), which Pod's env references by
	// secretKeyRef; nil when the server has none of them. Start creates
	// it right after the pod, owned by it (see Start).
	EnvSecret *corev1.Secret

	// cfg is the effective configuration, shared and read-only: the
	// Factory's own when no profile or init change applies (bench row:
	// client CPU per spawn).
	cfg *Config
	// made says what a Spawner's plan was made for; zero in a dry run's.
	made planOrigin
	// taken is set by the Start that carries the plan out.
	taken atomic.Bool
}

// planOrigin is what a plan depends on beyond its options: the Factory
// (configuration and templates), the server, and the names in use.
type planOrigin struct {
	factory *Factory
	server  naming.Server
	names   namesInUse
}

// namesInUse are the names in use (State) a rendering depends on.
type namesInUse struct{ pod, namespace, dns, pvc string }

func namesOf(st *State) namesInUse {
	return namesInUse{st.PodName, st.Namespace, st.DNSName, st.PVCName}
}

// Config is the effective configuration: the base one with the profile
// and options chosen by the user options applied.
func (o *Objects) Config() Config { return *o.cfg }

// Plan renders the objects a Start of server would create under cfg and
// opts, with no API call and no Registry: for dry runs, golden tests and
// tools. Start makes its objects the same way (adding the start id), so a
// configuration that cannot work fails here, before any object exists.
// Plan calls cfg.ProfileListFunc, if set, with ctx.
func Plan(ctx context.Context, server naming.Server, cfg Config, opts StartOptions) (*Objects, error) {
	cfg = cfg.withDefaults()
	hubNS := opts.HubNamespace
	if hubNS == "" {
		hubNS = detectNamespace()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = hubNS
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nopts, err := cfg.namingOptions()
	if err != nil {
		return nil, err
	}
	nopts.HubNamespace, nopts.Namespace = hubNS, cfg.Namespace
	namer, err := naming.New(nopts)
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	names, err := namer.Names(server)
	if err != nil {
		return nil, fmt.Errorf("spawner: naming server %q of user %q: %w", server.Servername, server.Username, err)
	}
	st := State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS}
	return plan(ctx, server, &cfg, &names, &st, &opts, "", "")
}

// Plan renders the objects a Start of this Spawner's server with opts
// would create, with the names in use (State), without any API call, and
// gives them a start id: handed to Start as StartOptions.Plan, they are
// what that Start creates, so a hub can check a start's options (a bad
// profile choice is a *ProfileError here) before it commits to the
// start, and the start does not render again.
func (s *Spawner) Plan(ctx context.Context, opts StartOptions) (*Objects, error) {
	st := s.State()
	o, err := plan(ctx, s.server, &s.b.cfg, &s.names, &st, &opts, newStartID(), s.b.cluster)
	if err != nil {
		return nil, err
	}
	o.made = planOrigin{factory: s.b, server: s.server, names: namesOf(&st)}
	return o, nil
}

// planFor returns opts.Plan when s can carry it out: made by Spawner.Plan
// of this server and Factory, with the names s uses now, and not taken by
// another Start. The plan is then this start's; otherwise (nil) the start
// renders its own.
func (s *Spawner) planFor(opts *StartOptions, st *State) *Objects {
	p := opts.Plan
	opts.Plan = nil // the start keeps its objects only until they are made
	if p == nil || p.made.factory != s.b || p.made.server != s.server || p.made.names != namesOf(st) {
		return nil
	}
	if !p.taken.CompareAndSwap(false, true) {
		return nil
	}
	return p
}

// plan renders a start's objects. base is the defaulted configuration,
// names the server's names from today's templates (their fields feed the
// templated options and name the pod: a start uses today's
// configuration, as KubeSpawner's after clear_state), st the server's
// state (its claim in use, PVCName, is kept across a template change, as
// KubeSpawner keeps pvc_name), startID marks what this start creates,
// and cluster is the Factory's (Options.Cluster; "" for none).
//
// The arguments are pointers, read and never changed, and the result is
// built in place: these structs are a kilobyte together, and copies of
// them would deepen every start's goroutine stack.
func plan(ctx context.Context, server naming.Server, base *Config, namesIn *naming.Names, stIn *State, opts *StartOptions, startID, cluster string) (*Objects, error) {
	if err := checkInputLimits(opts); err != nil {
		return nil, err
	}
	o := &Objects{StartID: startID, State: *stIn, Names: *namesIn}
	st, names := &o.State, &o.Names
	st.PodName, st.Namespace, st.DNSName = names.Pod, names.Namespace, names.DNS
	cfg, err := atInit(base, &names.Fields, len(opts.Attributes) > 0)
	if err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	if len(base.ProfileList) > 0 || base.ProfileListFunc != nil || len(opts.Attributes) > 0 {
		if cfg, err = withProfile(ctx, base, cfg, opts); err != nil {
			return nil, err
		}
		if err := checkProfileNamespace(base, cfg.Namespace, names.Namespace, server); err != nil {
			return nil, err
		}
		if cfg.Namespace != base.Namespace {
			// A profile's namespace: KubeSpawner creates the objects
			// there, with the names (DNS name included) it computed at
			// init.
			st.Namespace, names.Namespace = cfg.Namespace, cfg.Namespace
		}
	} else if err := noProfileList(opts.UserOptions); err != nil {
		return nil, err
	}
	if err := checkCluster(cluster, cfg, server); err != nil {
		return nil, err
	}
	syntax := naming.KubeSpawner
	if cfg.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	fields := names.Fields
	// _expand_user_properties renders {namespace} from the namespace in
	// force (a profile's), and the scheme-dependent fields by the
	// slug_scheme in force: a profile's applies to every template
	// expanded after the user options load, while the names computed at
	// init (pod_name, pvc_name) keep the configured scheme.
	fields.Namespace = names.Namespace
	if cfg.SlugScheme != base.SlugScheme {
		f, err := naming.NewFields(server, cfg.SlugScheme, "")
		if err != nil {
			return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
		}
		f.HubNamespace, f.PodName, f.PVCName, f.Namespace = fields.HubNamespace, fields.PodName, fields.PVCName, fields.Namespace
		fields = f
	}
	if st.PVCName != "" {
		// The claim in use (remembered, or found by handle_legacy_names)
		// is what {pvc_name} names, as KubeSpawner's self.pvc_name.
		fields.PVCName = st.PVCName
	}
	r, err := render(cfg, fields, syntax)
	if err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	r.secretName = names.Secret
	secretErr := names.Check("secret_name")
	if base.secretUsesPVCName() {
		// Rendered with the fields at the secret's turn: the base
		// configuration's, before the claim's name.
		r.secretName, secretErr = base.secretName(names.Fields)
	}

	st.StartID = startID
	st.Cluster = cluster
	st.Port = cfg.Port
	st.SSL = opts.SSL != nil
	st.Services = cfg.ServicesEnabled || opts.SSL != nil
	st.ConnectHost = r.connectHost
	st.UserID = opts.UserID
	st.Hub = opts.Hub
	st.UserOptions = maps.Clone(opts.UserOptions)
	st.URL = ""
	st.Version = Version
	if cfg.StoragePVCEnsure && st.PVCName == "" {
		st.PVCName = names.PVC
	}
	// The secret, claim and DNS names are refused only where they are
	// used, as the API server would refuse the object named by them
	// (naming.Names.Check); KubeSpawner renders them all regardless.
	for _, use := range []struct {
		field string
		used  bool
	}{{"pvc_name", cfg.StoragePVCEnsure && st.PVCName == names.PVC}, {"secret_name", opts.SSL != nil}, {"dns_name", st.Services}} {
		err := names.Check(use.field)
		if use.field == "secret_name" {
			err = secretErr
		}
		if use.used && err != nil {
			return nil, fmt.Errorf("spawner: naming server %q of user %q: %w", server.Servername, server.Username, err)
		}
	}
	o.cfg = cfg

	// Labels and annotations per object, as KubeSpawner 7.1 makes them,
	// plus spawnkit's managed-by label (orphan finds objects by it), the
	// cluster label of a Factory with a cluster, and the raw names,
	// which no configured label or annotation can replace.
	if cfg.EnableUserNamespaces {
		nsAnn := ownerAnnotations(server, r.nsAnnotations)
		if o.Namespace, err = manifest.Namespace(manifest.NamespaceSpec{Name: st.Namespace, Labels: withManagedBy(r.nsLabels, cluster), Annotations: nsAnn}); err != nil {
			return nil, fmt.Errorf("spawner: user namespace: %w", err)
		}
		if o.NetworkPolicy, o.ResourceQuota, err = namespaceObjects(cfg, server, r, st.Namespace, cluster); err != nil {
			return nil, err
		}
	}
	if cfg.StoragePVCEnsure {
		ann := addOwner(server, commonAnnotations(opts, r.storageAnnotations))
		if startID != "" {
			ann[naming.AnnotationStartID] = startID
		}
		labels := addManagedBy(naming.CommonLabels(server, r.storageLabels, cfg.CommonLabels), cluster)
		labels[naming.LabelAppComponent] = cfg.ComponentLabel
		labels[naming.LabelComponent] = StorageComponent
		o.PVC, err = manifest.PVC(manifest.PVCSpec{
			Name:         st.PVCName,
			StorageClass: cfg.StorageClass,
			Selector:     r.storageSelector,
			AccessModes:  cfg.StorageAccessModes,
			Storage:      cfg.StorageCapacity,
			Labels:       labels,
			Annotations:  ann,
		})
		if err != nil {
			return nil, err
		}
		o.PVC.Namespace = st.Namespace
	}
	var secretEnv map[string]string
	if o.Pod, o.Env, secretEnv, err = buildPod(cfg, server, r, st, opts); err != nil {
		return nil, err
	}
	if err := claimsCanExist(o.Pod); err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	// The secrets' and the service's labels and annotations (manifest
	// copies them into each object).
	var common, owned map[string]string
	if opts.SSL != nil || st.Services || len(secretEnv) > 0 {
		common = addManagedBy(naming.CommonLabels(server, r.extraLabels, cfg.CommonLabels), cluster)
		owned = addOwner(server, commonAnnotations(opts, r.extraAnnotations))
	}
	if len(secretEnv) > 0 {
		o.EnvSecret, err = manifest.EnvSecret(manifest.EnvSecretSpec{
			Name: EnvSecretName(st.PodName), Data: secretEnv, Labels: common, Annotations: owned,
		})
		if err != nil {
			return nil, err
		}
		o.EnvSecret.Namespace = st.Namespace
	}
	if opts.SSL != nil {
		o.Secret, err = manifest.Secret(manifest.SecretSpec{
			Name: r.secretName, Key: opts.SSL.Key, Cert: opts.SSL.Cert, CA: opts.SSL.CA, HubCA: opts.SSL.HubCA,
			Labels: common, Annotations: owned,
		})
		if err != nil {
			return nil, err
		}
		o.Secret.Namespace = st.Namespace
	}
	if st.Services {
		o.Service, err = manifest.Service(manifest.ServiceSpec{
			Name: st.PodName, Port: cfg.Port, Selector: o.Pod.Labels, Labels: common, Annotations: owned,
		})
		if err != nil {
			return nil, err
		}
		o.Service.Namespace = st.Namespace
	}
	if err := checkFinalMetadata(o); err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	return o, nil
}

// withProfile is initCfg with the profile and options opts.UserOptions
// choose applied, defaulted and validated.
//
// It is a function of its own, and configurations travel by pointer, so
// that the copies Resolve makes stay out of plan's stack frame, which a
// start's goroutine keeps for its whole wait (bench row: client CPU per
// spawn).
func withProfile(ctx context.Context, base, initCfg *Config, opts *StartOptions) (*Config, error) {
	resolved, err := initCfg.ResolveWith(ctx, opts.UserOptions, opts.Attributes)
	if err != nil {
		return nil, err
	}
	cfg := &resolved
	if cfg.Port == 0 {
		// KubeSpawner turns port 0 into 8888 at init only: a
		// profile's 0 reaches the pod as containerPort 0.
		return nil, &ConfigError{Errs: field.ErrorList{field.Invalid(field.NewPath("port"), 0,
			fmt.Sprintf("the profile chosen by user options %v sets port 0, which KubeSpawner sends as containerPort 0 and the API server rejects; set a port from 1 to 65535", opts.UserOptions))}}
	}
	// Resolve rebuilt cfg from the options (keeping the Go-only fields):
	// restore the defaults.
	if cfg.Namespace == "" {
		cfg.Namespace = base.Namespace
	}
	*cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("spawner: with user options %v: %w", opts.UserOptions, err)
	}
	return cfg, nil
}

// atInit is base as KubeSpawner's __init__ leaves it, before any
// profile applies: port 0 is 8888 and working_dir is expanded. A
// profile's port or working_dir, applied later, is used as it is, and
// its name templates and namespace come too late to change the names.
//
// With nothing to change (no port 0, no working_dir, no hub attributes
// (resolves) and no profile list
// whose merge the loaded options feed) it is base itself: plan only reads
// the configuration it renders from, and a start then copies no
// configuration.
func atInit(base *Config, fields *naming.Fields, resolves bool) (*Config, error) {
	if !resolves && base.Port != 0 && base.Pod.WorkingDir == "" && len(base.ProfileList) == 0 && base.ProfileListFunc == nil {
		return base, nil
	}
	c := *base
	if c.Port == 0 {
		c.Port = 8888
	}
	if c.source != nil {
		c.source = maps.Clone(c.source)
		c.source["port"] = c.Port
	}
	if c.Pod.WorkingDir != "" {
		syntax := naming.KubeSpawner
		if c.TemplateSyntax == "go" {
			syntax = naming.Go
		}
		wd, err := expandString(c.Pod.WorkingDir, *fields, syntax)
		if err != nil {
			return nil, fmt.Errorf("working_dir: %w", err)
		}
		c.Pod.WorkingDir = wd
		for _, k := range []string{"working_dir", "singleuser_working_dir"} {
			if _, ok := c.source[k]; ok {
				c.source[k] = wd
			}
		}
	}
	return &c, nil
}

// StorageComponent is the component label of claims, as KubeSpawner's.
const StorageComponent = "singleuser-storage"

// rendered are a start's templated options, expanded for its server:
// exactly the options KubeSpawner 7.1 expands.
type rendered struct {
	extraLabels, extraAnnotations     map[string]string
	storageLabels, storageAnnotations map[string]string
	nsLabels, nsAnnotations           map[string]string
	quota                             map[string]string // user_namespace_resource_quota
	environment                       []EnvEntry        // expanded; non-string values as loaded
	storageSelector                   *metav1.LabelSelector
	volumes                           []corev1.Volume
	mounts                            []corev1.VolumeMount
	initContainers, extraContainers   []corev1.Container
	extraPodConfig                    manifest.Overrides
	serviceAccount                    string
	connectHost                       string // pod_connect_ip, when set
	secretName                        string // the internal-SSL secret
}

func render(cfg *Config, fields naming.Fields, syntax naming.Syntax) (*rendered, error) {
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
	for _, e := range cfg.environmentEntries() {
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
		r.environment = append(r.environment, EnvEntry{Name: e.Name, Value: v})
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
		if r.serviceAccount, err = expandString(cfg.Pod.ServiceAccount, fields, syntax); err != nil {
			return nil, fmt.Errorf("service_account: %w", err)
		}
	}
	if errs := checkRendered(cfg, r); len(errs) > 0 {
		return nil, &ConfigError{Errs: errs}
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
			if parts[i], err = expandString(p, fields, syntax); err != nil {
				return nil, fmt.Errorf("pod_connect_ip: %w", err)
			}
		}
		r.connectHost = strings.Join(parts, ".")
		if syntax != naming.KubeSpawner {
			if r.connectHost, err = expandString(cfg.PodConnectIP, fields, syntax); err != nil {
				return nil, fmt.Errorf("pod_connect_ip: %w", err)
			}
		}
	}
	return r, nil
}

// checkRendered checks the rendered labels, annotations and service
// account the way the API server will, by option: a template is only
// known to be valid once it is rendered for a server.
func checkRendered(cfg *Config, r *rendered) field.ErrorList {
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

// literalValues is m with its templated values emptied: the keys of
// templated labels and annotations are not templates (KubeSpawner
// expands values only), and a value without a field renders as itself,
// so both can be checked before any server exists.
func literalValues(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !isTemplate(v) {
			out[k] = v
		} else {
			out[k] = ""
		}
	}
	return out
}

// isTemplate reports whether s holds a template field in either syntax,
// so it can only be checked once rendered.
func isTemplate(s string) bool { return strings.Contains(s, "{") }

func expandString(s string, fields naming.Fields, syntax naming.Syntax) (string, error) {
	v, err := naming.ParseValue(s, syntax)
	if err != nil {
		return "", err
	}
	out, err := v.Expand(fields)
	if err != nil {
		return "", err
	}
	return out.(string), nil
}

// environmentEntries is `environment` in order: as loaded, or sorted by
// name for a Config built in Go.
func (c *Config) environmentEntries() []EnvEntry {
	if c.environment != nil {
		return c.environment
	}
	out := make([]EnvEntry, 0, len(c.Environment))
	for _, k := range slices.Sorted(maps.Keys(c.Environment)) {
		out = append(out, EnvEntry{Name: k, Value: c.Environment[k]})
	}
	return out
}

// serverEnv is KubeSpawner's get_env: the hub's env; the raw
// environment (JupyterHub's base class); JUPYTER_IMAGE_SPEC and
// JUPYTER_IMAGE; then the expanded environment. A variable set again
// keeps its place, as in a Python dict.
func serverEnv(cfg *Config, r *rendered, opts *StartOptions) envDict {
	var d envDict
	for _, e := range opts.Env {
		if e.ValueFrom != nil {
			var m map[string]any
			b, _ := json.Marshal(e)
			_ = json.Unmarshal(b, &m)
			delete(m, "name")
			d.set(e.Name, m)
			continue
		}
		d.set(e.Name, e.Value)
	}
	// JupyterHub's get_env adds MEM_LIMIT, MEM_GUARANTEE, CPU_LIMIT and
	// CPU_GUARANTEE from the Spawner's limits. A hub that did not (a Go
	// hub, or a JupyterHub whose limits live in this configuration) gets
	// them from here, in JupyterHub's format (integer bytes, Python
	// floats); the hub's own values win.
	for _, v := range []struct {
		name string
		q    resource.Quantity
		cpu  bool
	}{
		{"MEM_LIMIT", cfg.Pod.MemLimit, false}, {"MEM_GUARANTEE", cfg.Pod.MemGuarantee, false},
		{"CPU_LIMIT", cfg.Pod.CPULimit, true}, {"CPU_GUARANTEE", cfg.Pod.CPUGuarantee, true},
	} {
		if v.q.IsZero() || slices.ContainsFunc(d, func(e EnvEntry) bool { return e.Name == v.name }) {
			continue
		}
		if v.cpu {
			d.set(v.name, pyFloatString(v.q.AsApproximateFloat64()))
		} else {
			d.set(v.name, strconv.FormatInt(v.q.Value(), 10))
		}
	}
	for _, e := range cfg.environmentEntries() {
		d.set(e.Name, e.Value)
	}
	d.set("JUPYTER_IMAGE_SPEC", cfg.Pod.Image)
	d.set("JUPYTER_IMAGE", cfg.Pod.Image)
	for _, e := range r.environment {
		d.set(e.Name, e.Value)
	}
	return d
}

// envVars turns get_env's dict into the container's variables and their
// dict keys (manifest.PodSpec.EnvKeys): a dict value keeps a name of its
// own, as make_pod names it after its key only when it has none.
func envVars(d envDict) ([]corev1.EnvVar, []string, error) {
	out := make([]corev1.EnvVar, 0, len(d))
	keys := make([]string, 0, len(d))
	var bad []string
	for _, e := range d {
		switch v := e.Value.(type) {
		case string:
			out = append(out, corev1.EnvVar{Name: e.Name, Value: v})
		case nil:
			out = append(out, corev1.EnvVar{Name: e.Name})
		case map[string]any:
			b, _ := json.Marshal(v)
			var ev corev1.EnvVar
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ev); err != nil {
				return nil, nil, fmt.Errorf("spawner: environment: %s: %w", e.Name, err)
			}
			if ev.Name == "" {
				ev.Name = e.Name
			}
			out = append(out, ev)
		default:
			bad = append(bad, fmt.Sprintf("%s: value %v is not a string; quote it (Kubernetes env values are strings)", e.Name, v))
			continue
		}
		keys = append(keys, e.Name)
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("spawner: environment: %s", strings.Join(bad, "; "))
	}
	return out, keys, nil
}

func buildPod(cfg *Config, server naming.Server, r *rendered, st *State, opts *StartOptions) (*corev1.Pod, []EnvEntry, map[string]string, error) {
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
	d := serverEnv(cfg, r, opts)
	if spec.Env, spec.EnvKeys, err = envVars(d); err != nil {
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
	return pod, []EnvEntry(d), secretEnv, nil
}

// UserNamespacePolicyName and UserNamespaceQuotaName name the
// NetworkPolicy and ResourceQuota of a user namespace.
const (
	UserNamespacePolicyName = "singleuser"
	UserNamespaceQuotaName  = "singleuser"
)

// namespaceObjects renders the user namespace's NetworkPolicy and
// ResourceQuota (each nil when not configured). They carry spawnkit's
// managed-by label (and cluster's, when set) and the user's name (no
// server's: they are the user's), and select the servers by the
// component label.
func namespaceObjects(cfg *Config, server naming.Server, r *rendered, ns, cluster string) (*networkingv1.NetworkPolicy, *corev1.ResourceQuota, error) {
	labels := withManagedBy(map[string]string{naming.LabelComponent: "singleuser-namespace"}, cluster)
	ann := map[string]string{naming.AnnotationUsername: server.Username}
	var policy *networkingv1.NetworkPolicy
	if np := cfg.NetworkPolicy; np != nil && np.Enabled {
		hubNS := np.HubNamespace
		if hubNS == "" {
			hubNS = cfg.Namespace
		}
		rules := manifest.DefaultEgressAllowRules
		for k, v := range np.EgressAllowRules {
			switch k {
			case "cloud_metadata_server":
				rules.CloudMetadataServer = v
			case "dns_ports_cloud_metadata_server":
				rules.DNSPortsCloudMetadataServer = v
			case "dns_ports_kube_system_namespace":
				rules.DNSPortsKubeSystemNamespace = v
			case "dns_ports_private_ips":
				rules.DNSPortsPrivateIPs = v
			case "non_private_ips":
				rules.NonPrivateIPs = v
			case "private_ips":
				rules.PrivateIPs = v
			}
		}
		or := func(m map[string]string, component string) map[string]string {
			if len(m) > 0 {
				return m
			}
			return map[string]string{"app": "jupyterhub", naming.LabelComponent: component}
		}
		port := np.HubPort
		if port == 0 {
			port = 8081
		}
		var err error
		policy, err = manifest.NetworkPolicy(manifest.NetworkPolicySpec{
			Name:                 UserNamespacePolicyName,
			ServerLabels:         map[string]string{naming.LabelComponent: cfg.ComponentLabel},
			HubNamespace:         hubNS,
			HubLabels:            or(np.HubPodLabels, "hub"),
			ProxyLabels:          or(np.ProxyPodLabels, "proxy"),
			AutoHTTPSLabels:      or(np.AutoHTTPSPodLabels, "autohttps"),
			HubPort:              port,
			AllowedIngressPorts:  np.AllowedIngressPorts,
			InterNamespaceAccess: np.InterNamespaceAccessLabels == "accept",
			EgressAllowRules:     rules,
			CloudMetadataIP:      np.CloudMetadataIP,
			Ingress:              np.Ingress,
			Egress:               np.Egress,
			Labels:               labels,
			Annotations:          ann,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("spawner: network_policy: %w", err)
		}
		policy.Namespace = ns
	}
	var quota *corev1.ResourceQuota
	if len(r.quota) > 0 {
		hard := corev1.ResourceList{}
		for k, v := range r.quota {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, nil, fmt.Errorf("spawner: user_namespace_resource_quota: %s: %q is not a quantity: %w", k, v, err)
			}
			hard[corev1.ResourceName(k)] = q
		}
		var err error
		if quota, err = manifest.ResourceQuota(manifest.ResourceQuotaSpec{Name: UserNamespaceQuotaName, Hard: hard, Labels: labels, Annotations: ann}); err != nil {
			return nil, nil, fmt.Errorf("spawner: user_namespace_resource_quota: %w", err)
		}
		quota.Namespace = ns
	}
	return policy, quota, nil
}

// moveToSecret turns each variable of env named in names that has a
// value into a reference to that key of the Secret secret, and returns
// the values it took (nil when none): the Secret's data.
func moveToSecret(env []corev1.EnvVar, names []string, secret string) map[string]string {
	var data map[string]string
	for i := range env {
		e := &env[i]
		if e.ValueFrom != nil || e.Value == "" || !slices.Contains(names, e.Name) {
			continue
		}
		if data == nil {
			data = make(map[string]string, len(names))
		}
		data[e.Name] = e.Value
		e.Value = ""
		e.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: e.Name}}
	}
	return data
}

// withManagedBy returns a copy of l with spawnkit's managed-by label, by
// which orphan finds what spawnkit created, and, when cluster is not "",
// the cluster label (naming.LabelCluster) naming it.
func withManagedBy(l map[string]string, cluster string) map[string]string {
	out := make(map[string]string, len(l)+2)
	maps.Copy(out, l)
	return addManagedBy(out, cluster)
}

// addManagedBy is withManagedBy for a map of the caller's own: it adds
// the labels to l itself, over any configured value. With a cluster, a
// configured legacy cluster label (naming.LegacyLabelCluster) is dropped,
// so that no label on the object names another cluster.
func addManagedBy(l map[string]string, cluster string) map[string]string {
	l[naming.LabelManagedBy] = naming.ManagedBySpawnkit
	if cluster != "" {
		l[naming.LabelCluster] = cluster
		delete(l, naming.LegacyLabelCluster)
	}
	return l
}

// commonAnnotations are KubeSpawner's _build_common_annotations without
// the names (ownerAnnotations adds them): the hub's version when given,
// then the configured extra annotations. The map is new, with room for
// what ownerAnnotations and the pod add.
func commonAnnotations(opts *StartOptions, extra map[string]string) map[string]string {
	a := make(map[string]string, len(extra)+5)
	if opts.HubVersion != "" {
		a[naming.AnnotationJupyterHubVersion] = opts.HubVersion
	}
	maps.Copy(a, extra)
	return a
}

// ownerAnnotations are extra annotations plus the raw user and server
// names, written last so that no configured annotation can forge them:
// they decide which server an object belongs to.
func ownerAnnotations(server naming.Server, extra map[string]string) map[string]string {
	a := make(map[string]string, len(extra)+4)
	maps.Copy(a, extra)
	return addOwner(server, a)
}

// addOwner is ownerAnnotations for a map of the caller's own: it writes
// the names into a itself.
func addOwner(server naming.Server, a map[string]string) map[string]string {
	delete(a, naming.AnnotationServername)
	delete(a, naming.AnnotationStartID)
	delete(a, naming.AnnotationState)
	a[naming.AnnotationUsername] = server.Username
	if server.Servername != "" {
		a[naming.AnnotationServername] = server.Servername
	}
	return a
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
		return &ConfigError{Errs: errs}
	}
	return nil
}
