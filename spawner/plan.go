package spawner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// StartOptions are what a hub hands one start. JupyterHub issues a new
// API token and environment on every start, so these belong to the start,
// not to the Spawner.
type StartOptions struct {
	// UserOptions select a profile and its options (KubeSpawner's keys:
	// "profile", "<option>", "<option>--unlisted-choice"); see
	// Config.Resolve.
	UserOptions map[string]string
	// Env is what the hub's single-user server needs (API token, URLs,
	// OAuth variables), added after the configuration's environment.
	Env []corev1.EnvVar
	// Cmd replaces the configuration's cmd when not nil; Args are
	// appended to it (JupyterHub's cmd and get_args()).
	Cmd, Args []string
	// SSL turns on internal SSL for this start.
	SSL *SSL
	// UserID is the hub's id of the user, recorded in State.
	UserID int64
	// OnProgress, when set, is called with every progress event of this
	// operation, in order, from the operation's goroutine, before the
	// operation returns; the last call has Ready or Failed set. It must
	// not block for long. Registering it with the call itself means no
	// event can be missed; NewStream turns it into a replayable stream.
	OnProgress func(ProgressEvent)
}

// Objects are what a Start creates for a server, rendered without a
// cluster.
type Objects struct {
	// Config is the effective configuration: the base one with the
	// profile and options chosen by the user options applied.
	Config Config
	// State is what the pod records (StateAnnotation): names, port,
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
}

// Plan renders the objects a Start of server would create under cfg and
// opts, with no API call and no Registry: for dry runs, golden tests and
// tools. Start makes its objects the same way (adding the start id), so a
// configuration that cannot work fails here, before any object exists.
// Plan calls cfg.ProfileListFunc, if set, with ctx.
func Plan(ctx context.Context, server naming.Server, cfg Config, opts StartOptions) (*Objects, error) {
	cfg = cfg.withDefaults()
	if cfg.Namespace == "" {
		cfg.Namespace = detectNamespace()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nopts, err := cfg.namingOptions()
	if err != nil {
		return nil, err
	}
	namer, err := naming.New(nopts)
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	names, err := namer.Names(server)
	if err != nil {
		return nil, fmt.Errorf("spawner: naming server %q of user %q: %w", server.Servername, server.Username, err)
	}
	st := State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS}
	return plan(ctx, server, &cfg, names, st, opts, "")
}

// Plan renders the objects a Start of this Spawner's server with opts
// would create, with the names in use (State), without any API call.
func (s *Spawner) Plan(ctx context.Context, opts StartOptions) (*Objects, error) {
	return plan(ctx, s.server, &s.b.cfg, s.names, s.State(), opts, "")
}

// plan renders a start's objects. base is the defaulted configuration,
// names the server's names from today's templates (their fields feed the
// templated options), st the names in use (a loaded State wins over
// today's templates), and startID marks what this start creates.
func plan(ctx context.Context, server naming.Server, base *Config, names naming.Names, st State, opts StartOptions, startID string) (*Objects, error) {
	cfg, err := base.Resolve(ctx, opts.UserOptions)
	if err != nil {
		return nil, err
	}
	if len(base.ProfileList) > 0 || base.ProfileListFunc != nil {
		// Resolve rebuilt cfg from the options' JSON: restore what only
		// Go can carry, and the defaults.
		cfg.UIDFunc, cfg.GIDFunc, cfg.FSGIDFunc, cfg.SupplementalGIDsFunc = base.UIDFunc, base.GIDFunc, base.FSGIDFunc, base.SupplementalGIDsFunc
		if cfg.Namespace == "" {
			cfg.Namespace = base.Namespace
		}
		cfg = cfg.withDefaults()
		if err := cfg.validate(); err != nil {
			return nil, fmt.Errorf("spawner: with user options %v: %w", opts.UserOptions, err)
		}
	}
	syntax := naming.KubeSpawner
	if cfg.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	r, err := render(&cfg, names.Fields, syntax)
	if err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	r.secretName = names.Secret

	st.StartID = startID
	st.Port = cfg.Port
	st.SSL = opts.SSL != nil
	st.Services = cfg.ServicesEnabled || opts.SSL != nil
	st.ConnectHost = r.connectHost
	st.UserID = opts.UserID
	st.UserOptions = maps.Clone(opts.UserOptions)
	st.URL = ""
	st.Version = Version
	if cfg.StoragePVCEnsure && st.PVCName == "" {
		st.PVCName = names.PVC
	}
	o := &Objects{Config: cfg, State: st}

	common := objectLabels(&cfg, server, naming.CommonLabels(server, nil, cfg.CommonLabels))
	owned := ownerAnnotations(server, nil)
	if cfg.EnableUserNamespaces {
		if o.Namespace, err = manifest.Namespace(manifest.NamespaceSpec{Name: st.Namespace, Labels: common, Annotations: owned}); err != nil {
			return nil, err
		}
	}
	if cfg.StoragePVCEnsure {
		ann := ownerAnnotations(server, cfg.StorageExtraAnnotations)
		if startID != "" {
			ann[StartIDAnnotation] = startID
		}
		o.PVC, err = manifest.PVC(manifest.PVCSpec{
			Name:         st.PVCName,
			StorageClass: cfg.StorageClass,
			Selector:     cfg.StorageSelector,
			AccessModes:  cfg.StorageAccessModes,
			Storage:      cfg.StorageCapacity,
			Labels:       objectLabels(&cfg, server, naming.CommonLabels(server, cfg.StorageExtraLabels, cfg.CommonLabels)),
			Annotations:  ann,
		})
		if err != nil {
			return nil, err
		}
		o.PVC.Namespace = st.Namespace
	}
	if o.Pod, err = buildPod(&cfg, server, r, st, opts); err != nil {
		return nil, err
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
	return o, nil
}

// rendered are a start's templated options, expanded for its server.
type rendered struct {
	extraLabels, extraAnnotations, environment map[string]string
	volumes                                    []corev1.Volume
	mounts                                     []corev1.VolumeMount
	connectHost                                string // pod_connect_ip, when set
	secretName                                 string // the internal-SSL secret
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
		{"environment", cfg.Environment, &r.environment},
	} {
		if *m.target, err = expandMap(m.in, fields, syntax); err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
	}
	r.volumes, r.mounts = cfg.Pod.Volumes, cfg.Pod.VolumeMounts
	if err := expandTyped(&r.volumes, fields, syntax); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err := expandTyped(&r.mounts, fields, syntax); err != nil {
		return nil, fmt.Errorf("volume_mounts: %w", err)
	}
	if cfg.PodConnectIP != "" {
		t, err := naming.Parse(cfg.PodConnectIP, syntax)
		if err != nil {
			return nil, fmt.Errorf("pod_connect_ip: %w", err)
		}
		if r.connectHost, err = t.Execute(fields); err != nil {
			return nil, fmt.Errorf("pod_connect_ip: %w", err)
		}
	}
	return r, nil
}

func buildPod(cfg *Config, server naming.Server, r *rendered, st State, opts StartOptions) (*corev1.Pod, error) {
	spec := cfg.Pod
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
	cmd := cfg.Cmd
	if opts.Cmd != nil {
		cmd = opts.Cmd
	}
	spec.Cmd = append(slices.Clone(cmd), opts.Args...)
	if len(spec.Cmd) == 0 {
		spec.Cmd = nil
	}
	spec.Labels = objectLabels(cfg, server, naming.PodLabels(server, cfg.ComponentLabel, r.extraLabels, cfg.CommonLabels))
	ann := ownerAnnotations(server, r.extraAnnotations)
	if st.StartID != "" {
		ann[StartIDAnnotation] = st.StartID
	}
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	ann[StateAnnotation] = string(stateJSON)
	spec.Annotations = ann
	env := make([]corev1.EnvVar, 0, len(r.environment)+len(spec.Env)+len(opts.Env))
	env = append(env, spec.Env...)
	for _, k := range slices.Sorted(maps.Keys(r.environment)) {
		env = append(env, corev1.EnvVar{Name: k, Value: r.environment[k]})
	}
	spec.Env = append(env, opts.Env...)
	if opts.SSL != nil {
		spec.SSLSecretName, spec.SSLSecretMountPath = r.secretName, cfg.SecretMountPath
	}
	// manifest.Pod copies what it is given, so the rendered values are
	// never changed by a build.
	spec.Volumes, spec.VolumeMounts = r.volumes, r.mounts
	pod, err := manifest.Pod(spec)
	if err != nil {
		return nil, err
	}
	pod.Namespace = st.Namespace
	return pod, nil
}

// objectLabels adds what every object spawnkit creates carries: the
// managed-by and component labels and the server name label (the user
// name label comes with CommonLabels). orphan finds objects by them; the
// raw names are in the annotations.
func objectLabels(cfg *Config, server naming.Server, l map[string]string) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	out[naming.LabelManagedBy] = naming.ManagedBySpawnkit
	out[naming.LabelComponent] = cfg.ComponentLabel
	out[naming.LabelServername] = naming.SafeLabel(server.Servername)
	return out
}

// ownerAnnotations are extra annotations plus the raw user and server
// names, written last so that no configured annotation can forge them:
// they decide which server an object belongs to.
func ownerAnnotations(server naming.Server, extra map[string]string) map[string]string {
	a := maps.Clone(extra)
	if a == nil {
		a = map[string]string{}
	}
	delete(a, naming.AnnotationServername)
	delete(a, StartIDAnnotation)
	delete(a, StateAnnotation)
	maps.Copy(a, naming.Annotations(server, nil))
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
	return json.Unmarshal(raw, target)
}
