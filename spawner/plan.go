package spawner

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/spawnkit/spawnkit/kubespawner"
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
	Env []kubespawner.EnvEntry
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
	cfg *kubespawner.Config
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
func (o *Objects) Config() kubespawner.Config { return *o.cfg }

// Plan renders the objects a Start of server would create under cfg and
// opts, with no API call and no Registry: for dry runs, golden tests and
// tools. Start makes its objects the same way (adding the start id), so a
// configuration that cannot work fails here, before any object exists.
// Plan calls cfg.ProfileListFunc, if set, with ctx.
func Plan(ctx context.Context, server naming.Server, cfg kubespawner.Config, opts StartOptions) (*Objects, error) {
	cfg = cfg.WithDefaults()
	hubNS := opts.HubNamespace
	if hubNS == "" {
		hubNS = detectNamespace()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = hubNS
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nopts, err := cfg.NamingOptions()
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
	return plan(ctx, &planInput{server: server, base: &cfg, names: &names, state: &st, opts: &opts})
}

// Plan renders the objects a Start of this Spawner's server with opts
// would create, with the names in use (State), without any API call, and
// gives them a start id: handed to Start as StartOptions.Plan, they are
// what that Start creates, so a hub can check a start's options (a bad
// profile choice is a *ProfileError here) before it commits to the
// start, and the start does not render again.
func (s *Spawner) Plan(ctx context.Context, opts StartOptions) (*Objects, error) {
	st := s.State()
	o, err := plan(ctx, &planInput{server: s.server, base: &s.b.cfg, names: &s.names, state: &st, opts: &opts, startID: newStartID(), cluster: s.b.cluster})
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

// planInput is what plan renders a start's objects from. base is the
// defaulted configuration, names the server's names from today's
// templates (their fields feed the templated options and name the pod: a
// start uses today's configuration, as KubeSpawner's after clear_state),
// state the server's state (its claim in use, PVCName, is kept across a
// template change, as KubeSpawner keeps pvc_name), startID marks what
// this start creates, and cluster is the Factory's (Options.Cluster; ""
// for none).
//
// The pointers are read and never changed, and the result is built in
// place: these structs are a kilobyte together, and copies of them would
// deepen every start's goroutine stack.
type planInput struct {
	server  naming.Server
	base    *kubespawner.Config
	names   *naming.Names
	state   *State
	opts    *StartOptions
	startID string
	cluster string
}

// plan renders a start's objects: the effective configuration, its
// templated options expanded for the server, the state the pod records,
// then the objects themselves.
func plan(ctx context.Context, in *planInput) (*Objects, error) {
	if err := checkInputLimits(in.opts); err != nil {
		return nil, err
	}
	o := &Objects{StartID: in.startID, State: *in.state, Names: *in.names}
	o.State.PodName, o.State.Namespace, o.State.DNSName = o.Names.Pod, o.Names.Namespace, o.Names.DNS
	cfg, err := in.config(ctx, o)
	if err != nil {
		return nil, err
	}
	r, err := in.render(cfg, o)
	if err != nil {
		return nil, err
	}
	if err := in.record(cfg, r, o); err != nil {
		return nil, err
	}
	o.cfg = cfg
	if err := in.objects(cfg, r, o); err != nil {
		return nil, err
	}
	if err := checkFinalMetadata(o); err != nil {
		return nil, in.failed(err)
	}
	return o, nil
}

// failed is err said of the server being planned.
func (in *planInput) failed(err error) error {
	return fmt.Errorf("spawner: server %q of user %q: %w", in.server.Servername, in.server.Username, err)
}

// config is the configuration the start renders from: base as
// KubeSpawner's __init__ leaves it, with the profile and choices of the
// user options applied, placed on this Factory's cluster. A profile's
// namespace becomes the namespace of o's names.
func (in *planInput) config(ctx context.Context, o *Objects) (*kubespawner.Config, error) {
	base, opts := in.base, in.opts
	cfg, err := atInit(base, &o.Names.Fields, len(opts.Attributes) > 0)
	if err != nil {
		return nil, in.failed(err)
	}
	if len(base.ProfileList) > 0 || base.ProfileListFunc != nil || len(opts.Attributes) > 0 {
		if cfg, err = withProfile(ctx, base, cfg, opts); err != nil {
			return nil, err
		}
		if err := checkProfileNamespace(base, cfg.Namespace, o.Names.Namespace, in.server); err != nil {
			return nil, err
		}
		if cfg.Namespace != base.Namespace {
			// A profile's namespace: KubeSpawner creates the objects
			// there, with the names (DNS name included) it computed at
			// init.
			o.State.Namespace, o.Names.Namespace = cfg.Namespace, cfg.Namespace
		}
	} else if p := opts.UserOptions["profile"]; p != "" {
		// Resolve's error, without a copy of the configuration.
		return nil, &kubespawner.ProfileError{Profile: p, Msg: fmt.Sprintf("profile %q requested, but no profile_list is configured", p)}
	}
	if err := checkCluster(in.cluster, cfg, in.server); err != nil {
		return nil, err
	}
	return cfg, nil
}

// render expands cfg's templated options with the fields KubeSpawner's
// templates see at this point of a start, and names the internal-SSL
// secret.
func (in *planInput) render(cfg *kubespawner.Config, o *Objects) (*rendered, error) {
	names, st := &o.Names, &o.State
	fields := names.Fields
	// _expand_user_properties renders {namespace} from the namespace in
	// force (a profile's), and the scheme-dependent fields by the
	// slug_scheme in force: a profile's applies to every template
	// expanded after the user options load, while the names computed at
	// init (pod_name, pvc_name) keep the configured scheme.
	fields.Namespace = names.Namespace
	if cfg.SlugScheme != in.base.SlugScheme {
		f, err := naming.NewFields(in.server, cfg.SlugScheme, "")
		if err != nil {
			return nil, in.failed(err)
		}
		f.HubNamespace, f.PodName, f.PVCName, f.Namespace = fields.HubNamespace, fields.PodName, fields.PVCName, fields.Namespace
		fields = f
	}
	if st.PVCName != "" {
		// The claim in use (remembered, or found by handle_legacy_names)
		// is what {pvc_name} names, as KubeSpawner's self.pvc_name.
		fields.PVCName = st.PVCName
	}
	r, err := render(cfg, fields, cfg.Syntax())
	if err != nil {
		return nil, in.failed(err)
	}
	r.secretName = names.Secret
	r.secretNameErr = names.Check("secret_name")
	if in.base.SecretUsesPVCName() {
		// Rendered with the fields at the secret's turn: the base
		// configuration's, before the claim's name.
		r.secretName, r.secretNameErr = in.base.SecretName(names.Fields)
	}
	return r, nil
}

// record fills the state the pod records, and refuses the start when a
// name it uses is one the API server would refuse.
func (in *planInput) record(cfg *kubespawner.Config, r *rendered, o *Objects) error {
	st, names, opts := &o.State, &o.Names, in.opts
	st.StartID = in.startID
	st.Cluster = in.cluster
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
			err = r.secretNameErr
		}
		if use.used && err != nil {
			return fmt.Errorf("spawner: naming server %q of user %q: %w", in.server.Servername, in.server.Username, err)
		}
	}
	return nil
}

// objects builds the objects of o. Labels and annotations per object are
// KubeSpawner 7.1's, plus spawnkit's managed-by label (orphan finds
// objects by it), the cluster label of a Factory with a cluster, and the
// raw names, which no configured label or annotation can replace.
func (in *planInput) objects(cfg *kubespawner.Config, r *rendered, o *Objects) error {
	if cfg.EnableUserNamespaces {
		if err := in.userNamespace(cfg, r, o); err != nil {
			return err
		}
	}
	if cfg.StoragePVCEnsure {
		if err := in.claim(cfg, r, o); err != nil {
			return err
		}
	}
	var secretEnv map[string]string
	var err error
	if o.Pod, o.Env, secretEnv, err = buildPod(cfg, in.server, r, &o.State, in.opts); err != nil {
		return err
	}
	if err := claimsCanExist(o.Pod); err != nil {
		return in.failed(err)
	}
	return in.podObjects(cfg, r, o, secretEnv)
}

// userNamespace builds the user namespace and its NetworkPolicy and
// ResourceQuota.
func (in *planInput) userNamespace(cfg *kubespawner.Config, r *rendered, o *Objects) error {
	var err error
	nsAnn := ownerAnnotations(in.server, r.nsAnnotations)
	if o.Namespace, err = manifest.Namespace(manifest.NamespaceSpec{Name: o.State.Namespace, Labels: withManagedBy(r.nsLabels, in.cluster), Annotations: nsAnn}); err != nil {
		return fmt.Errorf("spawner: user namespace: %w", err)
	}
	o.NetworkPolicy, o.ResourceQuota, err = namespaceObjects(cfg, in.server, r, o.State.Namespace, in.cluster)
	return err
}

// claim builds the claim storage_pvc_ensure makes.
func (in *planInput) claim(cfg *kubespawner.Config, r *rendered, o *Objects) error {
	ann := addOwner(in.server, commonAnnotations(in.opts, r.storageAnnotations))
	if in.startID != "" {
		ann[naming.AnnotationStartID] = in.startID
	}
	labels := addManagedBy(naming.CommonLabels(in.server, r.storageLabels, cfg.CommonLabels), in.cluster)
	labels[naming.LabelAppComponent] = cfg.ComponentLabel
	labels[naming.LabelComponent] = StorageComponent
	var err error
	o.PVC, err = manifest.PVC(manifest.PVCSpec{
		Name:         o.State.PVCName,
		StorageClass: cfg.StorageClass,
		Selector:     r.storageSelector,
		AccessModes:  cfg.StorageAccessModes,
		Storage:      cfg.StorageCapacity,
		Labels:       labels,
		Annotations:  ann,
	})
	if err != nil {
		return err
	}
	o.PVC.Namespace = o.State.Namespace
	return nil
}

// podObjects builds what belongs to the pod: the environment Secret
// (secretEnv, the values kept out of the pod spec), the internal-SSL
// secret and the service.
func (in *planInput) podObjects(cfg *kubespawner.Config, r *rendered, o *Objects, secretEnv map[string]string) error {
	st, opts := &o.State, in.opts
	// The secrets' and the service's labels and annotations (manifest
	// copies them into each object).
	var common, owned map[string]string
	if opts.SSL != nil || st.Services || len(secretEnv) > 0 {
		common = addManagedBy(naming.CommonLabels(in.server, r.extraLabels, cfg.CommonLabels), in.cluster)
		owned = addOwner(in.server, commonAnnotations(opts, r.extraAnnotations))
	}
	var err error
	if len(secretEnv) > 0 {
		o.EnvSecret, err = manifest.EnvSecret(manifest.EnvSecretSpec{
			Name: EnvSecretName(st.PodName), Data: secretEnv, Labels: common, Annotations: owned,
		})
		if err != nil {
			return err
		}
		o.EnvSecret.Namespace = st.Namespace
	}
	if opts.SSL != nil {
		o.Secret, err = manifest.Secret(manifest.SecretSpec{
			Name: r.secretName, Key: opts.SSL.Key, Cert: opts.SSL.Cert, CA: opts.SSL.CA, HubCA: opts.SSL.HubCA,
			Labels: common, Annotations: owned,
		})
		if err != nil {
			return err
		}
		o.Secret.Namespace = st.Namespace
	}
	if st.Services {
		o.Service, err = manifest.Service(manifest.ServiceSpec{
			Name: st.PodName, Port: cfg.Port, Selector: o.Pod.Labels, Labels: common, Annotations: owned,
		})
		if err != nil {
			return err
		}
		o.Service.Namespace = st.Namespace
	}
	return nil
}

// withProfile is initCfg with the profile and options opts.UserOptions
// choose applied, defaulted and validated.
//
// It is a function of its own, and configurations travel by pointer, so
// that the copies Resolve makes stay out of plan's stack frame, which a
// start's goroutine keeps for its whole wait (bench row: client CPU per
// spawn).
func withProfile(ctx context.Context, base, initCfg *kubespawner.Config, opts *StartOptions) (*kubespawner.Config, error) {
	resolved, err := initCfg.ResolveWith(ctx, opts.UserOptions, opts.Attributes)
	if err != nil {
		return nil, err
	}
	cfg := &resolved
	if cfg.Port == 0 {
		// KubeSpawner turns port 0 into 8888 at init only: a
		// profile's 0 reaches the pod as containerPort 0.
		return nil, &kubespawner.ConfigError{Errs: field.ErrorList{field.Invalid(field.NewPath("port"), 0,
			fmt.Sprintf("the profile chosen by user options %v sets port 0, which KubeSpawner sends as containerPort 0 and the API server rejects; set a port from 1 to 65535", opts.UserOptions))}}
	}
	// Resolve rebuilt cfg from the options (keeping the Go-only fields):
	// restore the defaults.
	if cfg.Namespace == "" {
		cfg.Namespace = base.Namespace
	}
	*cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("spawner: with user options %v: %w", opts.UserOptions, err)
	}
	return cfg, nil
}

// atInit is base as KubeSpawner's __init__ leaves it (Config.AtInit).
// With nothing to change (no port 0, no working_dir, no hub attributes
// (resolves) and no profile list whose merge the loaded options feed) it
// is base itself: plan only reads the configuration it renders from, and
// a start then copies no configuration.
func atInit(base *kubespawner.Config, fields *naming.Fields, resolves bool) (*kubespawner.Config, error) {
	if !resolves && base.Port != 0 && base.Pod.WorkingDir == "" && len(base.ProfileList) == 0 && base.ProfileListFunc == nil {
		return base, nil
	}
	return base.AtInit(fields)
}
