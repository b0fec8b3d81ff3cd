package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/retry"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Version is written into State so a hub can tell which spawnkit saved it.
const Version = "0.1.0"

// ManagedByLabel marks every object spawnkit creates.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "spawnkit"
)

// Interface is what a hub needs of a spawner; *Spawner implements it, and
// a hub can plug in another backend.
type Interface interface {
	Start(ctx context.Context) (string, error)
	Poll(ctx context.Context) (Status, error)
	Stop(ctx context.Context, opts StopOptions) error
	Progress(ctx context.Context) <-chan ProgressEvent
}

var _ Interface = (*Spawner)(nil)

// Hooks let a hub adjust what a Spawner does. Each may be nil.
type Hooks struct {
	// ModifyPod changes the pod before it is created.
	ModifyPod func(ctx context.Context, s *Spawner, pod *corev1.Pod) error
	// AfterPodCreated runs once the pod exists; an error deletes the pod
	// and fails Start.
	AfterPodCreated func(ctx context.Context, s *Spawner, pod *corev1.Pod) error
	// PodURL, when set, makes the server's URL from the ready pod and the
	// URL spawnkit would use.
	PodURL func(s *Spawner, pod *corev1.Pod, defaultURL string) string
}

// SSL is the internal-SSL material a hub hands a server (JupyterHub's
// internal_ssl): PEM contents, not paths.
type SSL struct {
	Key, Cert []byte
	// CA is the notebooks' CA bundle, HubCA the hub's.
	CA, HubCA []byte
}

// Options configure New. Client and Registry are required.
type Options struct {
	Client   kubernetes.Interface
	Registry *reflector.Registry
	Config   Config
	Hooks    Hooks
	// Env is what the hub's single-user server needs (API token, URLs),
	// added after Config's environment.
	Env []corev1.EnvVar
	// SSL turns on internal SSL: the material is put in a secret owned by
	// the pod and mounted at secret_mount_path, a service gives the pod a
	// DNS name, and the URL is https://<dns name>:<port>.
	SSL *SSL
	// Clock stamps progress. Default: the real clock.
	Clock clock.Clock
}

// Spawner runs one user server. Its methods are safe for concurrent use;
// Start and Stop of one Spawner are serialized.
type Spawner struct {
	server   naming.Server
	client   kubernetes.Interface
	registry *reflector.Registry
	cfg      Config
	hooks    Hooks
	env      []corev1.EnvVar
	ssl      *SSL
	clock    clock.Clock
	namer    *naming.Namer

	op sync.Mutex // serializes Start, Stop and DeleteForever

	mu       sync.Mutex // guards the fields below
	names    naming.Names
	state    State // names in use: from LoadState or the last Start
	progress *stream
	lastURL  string // the URL the last successful Start returned
	// pods and events are this Spawner's holds on the shared informers
	// of its namespace, kept from first use until Close so that Poll and
	// Start never restart an informer (a fresh LIST each time).
	pods   *reflector.Pods
	events *reflector.Events

	rendered rendered // set by New, read-only after
}

// eventsHandle returns the Spawner's hold on the event informer of ns.
func (s *Spawner) eventsHandle(ctx context.Context, ns string) (*reflector.Events, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil && s.events.Namespace() == ns {
		return s.events, nil
	}
	ev, err := s.registry.Events(ctx, ns)
	if err != nil {
		return nil, err
	}
	if s.events != nil {
		s.events.Release()
	}
	s.events = ev
	return ev, nil
}

// podsHandle returns the Spawner's hold on the pod informer of ns.
func (s *Spawner) podsHandle(ctx context.Context, ns string) (*reflector.Pods, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods != nil && s.pods.Namespace() == ns {
		return s.pods, nil
	}
	p, err := s.registry.Pods(ctx, ns)
	if err != nil {
		return nil, err
	}
	if s.pods != nil {
		s.pods.Release()
	}
	s.pods = p
	return p, nil
}

// Close releases the Spawner's hold on shared informers. The server
// keeps running; a Spawner used after Close takes a new hold.
func (s *Spawner) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods != nil {
		s.pods.Release()
		s.pods = nil
	}
	if s.events != nil {
		s.events.Release()
		s.events = nil
	}
}

// New creates a Spawner for one server. Names are rendered (and checked)
// here, so a configuration that cannot name this server fails before any
// API call.
func New(server naming.Server, opts Options) (*Spawner, error) {
	if opts.Client == nil || opts.Registry == nil {
		return nil, errors.New("spawner: Options needs Client and Registry")
	}
	cfg := opts.Config.withDefaults()
	if cfg.Namespace == "" {
		cfg.Namespace = detectNamespace()
	}
	if want := naming.LabelComponent + "=" + cfg.ComponentLabel; opts.Registry.PodLabelSelector() != want {
		return nil, fmt.Errorf("spawner: the registry selects pods by %q but component_label makes %q: create the Registry with PodLabelSelector %q",
			opts.Registry.PodLabelSelector(), want, want)
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
	s := &Spawner{
		server: server, client: opts.Client, registry: opts.Registry, cfg: cfg, hooks: opts.Hooks,
		env: opts.Env, ssl: opts.SSL, clock: opts.Clock, namer: namer, names: names,
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if err := s.render(); err != nil {
		return nil, fmt.Errorf("spawner: server %q of user %q: %w", server.Servername, server.Username, err)
	}
	s.state = State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS, Version: Version}
	return s, nil
}

// rendered are the templated options of a server, expanded once by New
// (so a bad template fails there, before any API call, and Start and Poll
// never parse templates).
type rendered struct {
	extraLabels, extraAnnotations, environment map[string]string
	volumes                                    []corev1.Volume
	mounts                                     []corev1.VolumeMount
	connectHost                                string // pod_connect_ip, when set
}

func (s *Spawner) render() error {
	r := &s.rendered
	var err error
	for _, m := range []struct {
		key    string
		in     map[string]string
		target *map[string]string
	}{
		{"extra_labels", s.cfg.ExtraLabels, &r.extraLabels},
		{"extra_annotations", s.cfg.ExtraAnnotations, &r.extraAnnotations},
		{"environment", s.cfg.Environment, &r.environment},
	} {
		if *m.target, err = s.expandMap(m.in); err != nil {
			return fmt.Errorf("%s: %w", m.key, err)
		}
	}
	r.volumes, r.mounts = s.cfg.Pod.Volumes, s.cfg.Pod.VolumeMounts
	if err := s.expandTyped(&r.volumes); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	if err := s.expandTyped(&r.mounts); err != nil {
		return fmt.Errorf("volume_mounts: %w", err)
	}
	if s.cfg.PodConnectIP != "" {
		t, err := naming.Parse(s.cfg.PodConnectIP, s.templateSyntax())
		if err != nil {
			return fmt.Errorf("pod_connect_ip: %w", err)
		}
		if r.connectHost, err = t.Execute(s.names.Fields); err != nil {
			return fmt.Errorf("pod_connect_ip: %w", err)
		}
	}
	return nil
}

// detectNamespace is the hub's namespace when running in a cluster, else
// "default", as KubeSpawner does.
func detectNamespace() string {
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return metav1.NamespaceDefault
}

// Server returns the server this Spawner runs.
func (s *Spawner) Server() naming.Server { return s.server }

// State is what a hub persists to find a server again after a restart.
type State struct {
	PodName   string `json:"pod_name"`
	Namespace string `json:"namespace"`
	DNSName   string `json:"dns_name"`
	// PVCName is set once the claim is known to exist.
	PVCName string `json:"pvc_name,omitempty"`
	Version string `json:"spawnkit_version"`
}

// State returns the names in use.
func (s *Spawner) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// LoadState restores names saved by State. Names from a loaded state win
// over today's templates, so a server started before a template or
// namespace change stays reachable.
func (s *Spawner) LoadState(st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.PodName != "" {
		s.state.PodName = st.PodName
	}
	if st.Namespace != "" {
		s.state.Namespace = st.Namespace
	}
	if st.DNSName != "" {
		s.state.DNSName = st.DNSName
	}
	if st.PVCName != "" && boolOr(s.cfg.RememberPVCName, true) {
		s.state.PVCName = st.PVCName
	}
}

// String is the state as JSON, the form a hub stores.
func (st State) String() string { b, _ := json.Marshal(st); return string(b) }

// StartError reports which step of Start failed and why.
type StartError struct {
	Server naming.Server
	Step   string // "watch", "namespace", "pvc", "pod", "hook", "service" or "wait"
	// Reason is a container's waiting reason when a fatal one ended the
	// wait (ErrImagePull, ...), or "Timeout".
	Reason string
	Err    error
}

func (e *StartError) Error() string {
	reason := ""
	if e.Reason != "" {
		reason = " (" + e.Reason + ")"
	}
	return fmt.Sprintf("spawner: starting server %q of user %q failed at %s%s: %v", e.Server.Servername, e.Server.Username, e.Step, reason, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ErrStartTimeout is wrapped by the error of a Start that ran out of time.
var ErrStartTimeout = errors.New("the server did not become ready within start_timeout")

// Start creates the server's objects and waits until its pod is running
// and ready, returning the URL to reach it. A failed Start deletes the pod
// it created (never the claim) and returns a *StartError.
func (s *Spawner) Start(ctx context.Context) (string, error) {
	return s.startWith(ctx, newStream())
}

// startWith is Start reporting to a given progress stream (the Manager
// creates it before the start begins, so no reader misses it).
func (s *Spawner) startWith(ctx context.Context, prog *stream) (string, error) {
	s.op.Lock()
	defer s.op.Unlock()
	st := s.State()
	s.mu.Lock()
	s.progress = prog
	s.mu.Unlock()
	started := s.clock.Now()

	url, err := s.start(ctx, st, prog, started)
	if err != nil {
		prog.finish(ProgressEvent{Progress: 100, Failed: true, Message: err.Error(), Time: s.clock.Now()})
		return "", err
	}
	s.mu.Lock()
	s.lastURL = url
	s.mu.Unlock()
	prog.finish(ProgressEvent{Progress: 100, Ready: true, URL: url, Message: "Server ready at " + url, Time: s.clock.Now()})
	return url, nil
}

func (s *Spawner) start(ctx context.Context, st State, prog *stream, started time.Time) (string, error) {
	fail := func(step, reason string, err error) error {
		return &StartError{Server: s.server, Step: step, Reason: reason, Err: err}
	}
	ns := st.Namespace
	pods, err := s.podsHandle(ctx, ns)
	if err != nil {
		return "", fail("watch", "", err)
	}
	var events *reflector.Events
	if boolOr(s.cfg.EventsEnabled, true) {
		if events, err = s.eventsHandle(ctx, ns); err != nil {
			return "", fail("watch", "", err)
		}
	}
	sub := s.registry.Subscribe(ns, st.PodName)
	defer sub.Close()

	if s.cfg.EnableUserNamespaces {
		if err := s.ensureNamespace(ctx, ns); err != nil {
			return "", fail("namespace", "", err)
		}
	}
	if s.cfg.StoragePVCEnsure {
		if err := s.ensurePVC(ctx, ns); err != nil {
			return "", fail("pvc", "", err)
		}
	}

	pod, err := s.buildPod(st)
	if err != nil {
		return "", fail("pod", "", err)
	}
	if s.hooks.ModifyPod != nil {
		if err := s.hooks.ModifyPod(ctx, s, pod); err != nil {
			return "", fail("hook", "", fmt.Errorf("ModifyPod: %w", err))
		}
	}
	created, err := s.createPod(ctx, pods, sub, pod)
	if err != nil {
		return "", fail("pod", "", err)
	}
	// From here on a failure must not leave the pod behind.
	cleanup := func(cause error) error {
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.K8sAPIRequestRetryTimeout.Duration())
		defer cancel()
		if err := s.deletePod(delCtx, ns, st.PodName, 0, created.UID); err != nil {
			return errors.Join(cause, fmt.Errorf("deleting the pod after the failure: %w", err))
		}
		return cause
	}
	if s.hooks.AfterPodCreated != nil {
		if err := s.hooks.AfterPodCreated(ctx, s, created); err != nil {
			return "", fail("hook", "", cleanup(fmt.Errorf("AfterPodCreated: %w", err)))
		}
	}
	if s.ssl != nil || s.cfg.ServicesEnabled {
		if err := s.ensureOwned(ctx, created); err != nil {
			return "", fail("service", "", cleanup(err))
		}
	}
	running, reason, err := s.waitReady(ctx, pods, events, sub, created, prog, started)
	if err != nil {
		return "", fail("wait", reason, cleanup(err))
	}
	return s.url(running), nil
}

// ensureOwned creates the internal-SSL secret and the service, owned by
// the pod so the garbage collector removes them with it. An old object of
// the same name (owned by a previous pod) is deleted first, as KubeSpawner
// does.
func (s *Spawner) ensureOwned(ctx context.Context, pod *corev1.Pod) error {
	owner := []metav1.OwnerReference{manifest.OwnerReference(pod.Name, pod.UID)}
	labels := s.labels(naming.CommonLabels(s.server, nil, s.cfg.CommonLabels))
	annotations := naming.Annotations(s.server, nil)
	if s.ssl != nil {
		secret, err := manifest.Secret(manifest.SecretSpec{
			Name: s.names.Secret, Key: s.ssl.Key, Cert: s.ssl.Cert, CA: s.ssl.CA, HubCA: s.ssl.HubCA,
			OwnerReferences: owner, Labels: labels, Annotations: annotations,
		})
		if err != nil {
			return err
		}
		secrets := s.client.CoreV1().Secrets(pod.Namespace)
		if err := s.replace(ctx, func(ctx context.Context) error {
			_, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
			return err
		}, func(ctx context.Context) error {
			return secrets.Delete(ctx, secret.Name, metav1.DeleteOptions{})
		}); err != nil {
			return fmt.Errorf("secret %s: %w", secret.Name, err)
		}
	}
	svc, err := manifest.Service(manifest.ServiceSpec{
		Name: pod.Name, Port: s.cfg.Port, Selector: pod.Labels,
		OwnerReferences: owner, Labels: labels, Annotations: annotations,
	})
	if err != nil {
		return err
	}
	services := s.client.CoreV1().Services(pod.Namespace)
	if err := s.replace(ctx, func(ctx context.Context) error {
		_, err := services.Create(ctx, svc, metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) error {
		return services.Delete(ctx, svc.Name, metav1.DeleteOptions{})
	}); err != nil {
		return fmt.Errorf("service %s: %w", svc.Name, err)
	}
	return nil
}

// replace creates an object, deleting an existing one of the same name
// first when the create finds it.
func (s *Spawner) replace(ctx context.Context, create, del func(context.Context) error) error {
	return s.withRetry(ctx, func(ctx context.Context) error {
		err := create(ctx)
		if apierrors.IsAlreadyExists(err) {
			if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return errReplaced
		}
		return err
	})
}

func (s *Spawner) ensureNamespace(ctx context.Context, ns string) error {
	obj, err := manifest.Namespace(manifest.NamespaceSpec{
		Name:        ns,
		Labels:      s.labels(naming.CommonLabels(s.server, nil, s.cfg.CommonLabels)),
		Annotations: naming.Annotations(s.server, nil),
	})
	if err != nil {
		return err
	}
	return s.withRetry(ctx, func(ctx context.Context) error {
		_, err := s.client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func (s *Spawner) ensurePVC(ctx context.Context, ns string) error {
	name := s.State().PVCName
	if name == "" {
		name = s.names.PVC
	}
	obj, err := manifest.PVC(manifest.PVCSpec{
		Name:         name,
		StorageClass: s.cfg.StorageClass,
		Selector:     s.cfg.StorageSelector,
		AccessModes:  s.cfg.StorageAccessModes,
		Storage:      s.cfg.StorageCapacity,
		Labels:       s.labels(naming.CommonLabels(s.server, s.cfg.StorageExtraLabels, s.cfg.CommonLabels)),
		Annotations:  naming.Annotations(s.server, s.cfg.StorageExtraAnnotations),
	})
	if err != nil {
		return err
	}
	err = s.withRetry(ctx, func(ctx context.Context) error {
		_, err := s.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsForbidden(err):
			// A quota may forbid creating a claim that already exists.
			if _, getErr := s.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); getErr == nil {
				return nil
			}
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.state.PVCName = name
	s.mu.Unlock()
	return nil
}

// labels adds what every object spawnkit creates carries: the managed-by
// and component labels and the server name label (the user name label
// comes with CommonLabels). orphan finds objects by them; the raw names
// are in the annotations.
func (s *Spawner) labels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	out[ManagedByLabel] = ManagedByValue
	out[naming.LabelComponent] = s.cfg.ComponentLabel
	out[naming.LabelServername] = naming.SafeLabel(s.server.Servername)
	return out
}

func (s *Spawner) buildPod(st State) (*corev1.Pod, error) {
	spec := s.cfg.Pod
	spec.Name = st.PodName
	for _, f := range []struct {
		fn     func(naming.Server) *int64
		target **int64
	}{{s.cfg.UIDFunc, &spec.UID}, {s.cfg.GIDFunc, &spec.GID}, {s.cfg.FSGIDFunc, &spec.FSGID}} {
		if f.fn != nil {
			*f.target = f.fn(s.server)
		}
	}
	if s.cfg.SupplementalGIDsFunc != nil {
		spec.SupplementalGIDs = s.cfg.SupplementalGIDsFunc(s.server)
	}
	spec.Port = s.cfg.Port
	if s.cfg.Cmd != nil {
		spec.Cmd = s.cfg.Cmd
	}
	r := s.rendered
	spec.Labels = s.labels(naming.PodLabels(s.server, s.cfg.ComponentLabel, r.extraLabels, s.cfg.CommonLabels))
	spec.Annotations = naming.Annotations(s.server, r.extraAnnotations)
	env := make([]corev1.EnvVar, 0, len(r.environment)+len(spec.Env)+len(s.env))
	env = append(env, spec.Env...)
	for _, k := range slices.Sorted(maps.Keys(r.environment)) {
		env = append(env, corev1.EnvVar{Name: k, Value: r.environment[k]})
	}
	spec.Env = append(env, s.env...)
	if s.ssl != nil {
		spec.SSLSecretName, spec.SSLSecretMountPath = s.names.Secret, s.cfg.SecretMountPath
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

func (s *Spawner) expandMap(m map[string]string) (map[string]string, error) {
	if len(m) == 0 {
		return m, nil
	}
	v, err := naming.ParseValue(m, s.templateSyntax())
	if err != nil {
		return nil, err
	}
	out, err := v.Expand(s.names.Fields)
	if err != nil {
		return nil, err
	}
	return out.(map[string]string), nil
}

// expandTyped renders the templates in the strings of a typed value
// (volumes, mounts) through its JSON form, as KubeSpawner's _expand_all.
func (s *Spawner) expandTyped(target any) error {
	raw, err := json.Marshal(target)
	if err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return err
	}
	v, err := naming.ParseValue(generic, s.templateSyntax())
	if err != nil {
		return err
	}
	out, err := v.Expand(s.names.Fields)
	if err != nil {
		return err
	}
	if raw, err = json.Marshal(out); err != nil {
		return err
	}
	return json.Unmarshal(raw, target)
}

// templateSyntax is the syntax of every template in the configuration.
func (s *Spawner) templateSyntax() naming.Syntax { return s.namer.Options().Syntax }

// withRetry runs one API call under the request timeout, retrying under
// the retry timeout.
func (s *Spawner) withRetry(ctx context.Context, op func(ctx context.Context) error) error {
	return retry.Do(ctx, retry.Options{
		MaxElapsed: s.cfg.K8sAPIRequestRetryTimeout.Duration(),
		Retryable:  retryableAPIError,
	}, func(ctx context.Context) error {
		reqCtx, cancel := context.WithTimeout(ctx, s.cfg.K8sAPIRequestTimeout.Duration())
		defer cancel()
		return op(reqCtx)
	})
}

// retryableAPIError: server-side trouble and timeouts are worth another
// try; a request the server rejects is not.
func retryableAPIError(err error) bool {
	switch {
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err),
		apierrors.IsUnauthorized(err), apierrors.IsNotFound(err), apierrors.IsMethodNotSupported(err):
		return false
	}
	return true
}

// errReplaced marks a create that found an old object of the same name
// and deleted it: worth another try.
var errReplaced = errors.New("an old object of the same name was in the way and has been deleted")

// createPod creates the pod; an existing pod of the same name is stale
// (the hub would not start a running server): it is deleted, and the
// create retried once it is gone from the cache.
func (s *Spawner) createPod(ctx context.Context, pods *reflector.Pods, sub *reflector.Subscription, pod *corev1.Pod) (*corev1.Pod, error) {
	var created *corev1.Pod
	err := s.withRetry(ctx, func(ctx context.Context) error {
		var err error
		created, err = s.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			if delErr := s.deletePod(ctx, pod.Namespace, pod.Name, 0, ""); delErr != nil {
				return fmt.Errorf("%w; deleting it: %w", errReplaced, delErr)
			}
			return errReplaced
		}
		return err
	})
	return created, err
}

// deletePod deletes a pod (with a UID precondition when uid is set) and
// waits until it is gone; NotFound is success.
func (s *Spawner) deletePod(ctx context.Context, ns, name string, grace int64, uid types.UID) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace)}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: ptr.To(uid)}
	}
	err := s.client.CoreV1().Pods(ns).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	pods, err := s.podsHandle(ctx, ns)
	if err != nil {
		return err
	}
	sub := s.registry.Subscribe(ns, name)
	defer sub.Close()
	for {
		p, ok, err := pods.Get(ctx, ns, name)
		if err != nil {
			return err
		}
		if !ok || (uid != "" && p.UID != uid) {
			return nil
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s/%s to go: %w", ns, name, ctx.Err())
		}
	}
}

// waitReady waits, woken by the reflector, until the pod runs with an IP
// and every container is ready; a fatal waiting reason or the start
// timeout ends it. Pod events are fed to the progress stream meanwhile.
func (s *Spawner) waitReady(ctx context.Context, pods *reflector.Pods, events *reflector.Events, sub *reflector.Subscription,
	created *corev1.Pod, prog *stream, started time.Time) (*corev1.Pod, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout.Duration())
	defer cancel()
	// An event is reported once per occurrence (uid and count), and only
	// if newer than this Start (timestamps have second precision).
	seen := map[string]bool{}
	pulls := pullTracker{}
	marker := started.Truncate(time.Second)
	var slow <-chan time.Time
	if after := s.cfg.SlowSpawnMessageAfter.Duration(); after > 0 {
		slow = s.clock.After(after)
	}
	for {
		if events != nil {
			evs, err := events.ForUID(ctx, created.UID)
			if err == nil {
				for _, e := range evs {
					key := string(e.UID) + "/" + strconv.Itoa(int(e.Count))
					if seen[key] || reflector.EventTime(e).Before(marker) {
						continue
					}
					seen[key] = true
					prog.event(e)
				}
			}
		}
		pod, ok, err := pods.Get(ctx, created.Namespace, created.Name)
		switch {
		case err != nil:
			return nil, timeoutReason(ctx), s.waitErr(ctx, err)
		case ok && pod.UID == created.UID:
			pulls.observe(pod)
			if reason, msg := fatalReason(pod, s.cfg.FatalReasons); reason != "" && pulls.fatal(reason) {
				return nil, reason, fmt.Errorf("container %s", msg)
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				return nil, string(pod.Status.Phase), fmt.Errorf("the pod ended (%s) before it was ready", pod.Status.Phase)
			}
			if isReady(pod) {
				return pod, "", nil
			}
		case !ok:
			// Not in the cache yet, or deleted under us.
		}
		select {
		case <-sub.C():
		case <-slow:
			slow = nil
			prog.note(fmt.Sprintf("The server is taking longer than %s to start; still waiting (up to %s).",
				s.cfg.SlowSpawnMessageAfter.Duration(), s.cfg.StartTimeout.Duration()), s.clock.Now())
		case <-ctx.Done():
			return nil, timeoutReason(ctx), s.waitErr(ctx, ctx.Err())
		}
	}
}

func timeoutReason(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "Timeout"
	}
	return ""
}

func (s *Spawner) waitErr(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (%s): %w", ErrStartTimeout, s.cfg.StartTimeout.Duration(), err)
	}
	return err
}

// pullTracker makes ErrImagePull fatal only when it comes back: a single
// failed pull is often a registry hiccup that the kubelet's retry fixes.
// It counts, per container, the times its state turned to ErrImagePull.
type pullTracker map[string]*pullState

type pullState struct {
	last  string
	count int
}

// fatal reports whether a fatal reason ends the start now.
func (p pullTracker) fatal(reason string) bool {
	if reason != "ErrImagePull" {
		return true
	}
	for _, st := range p {
		if st.count >= 2 {
			return true
		}
	}
	return false
}

// observe records every container's waiting reason; call it on every
// state of the pod seen.
func (p pullTracker) observe(pod *corev1.Pod) {
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		st := p[cs.Name]
		if st == nil {
			st = &pullState{}
			p[cs.Name] = st
		}
		cur := ""
		if cs.State.Waiting != nil {
			cur = cs.State.Waiting.Reason
		}
		if cur == "ErrImagePull" && st.last != "ErrImagePull" {
			st.count++
		}
		st.last = cur
	}
}

// fatalReason returns a fatal waiting reason of any container.
func fatalReason(pod *corev1.Pod, fatal []string) (string, string) {
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			for _, r := range fatal {
				if w.Reason == r {
					return r, fmt.Sprintf("%s: %s: %s", cs.Name, w.Reason, w.Message)
				}
			}
		}
	}
	return "", ""
}

func isReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}

// url is the server's URL: https://<dns name>:<port> with internal SSL,
// http://<dns name>:<port> with services, http://<pod_connect_ip>:<port>
// when that template is set, else http://<pod IP>:<port> (IPv6 in
// brackets); the PodURL hook has the last word.
func (s *Spawner) url(pod *corev1.Pod) string {
	port := strconv.Itoa(int(s.cfg.Port))
	st := s.State()
	var u string
	switch {
	case s.ssl != nil:
		u = "https://" + net.JoinHostPort(st.DNSName, port)
	case s.cfg.ServicesEnabled:
		u = "http://" + net.JoinHostPort(st.DNSName, port)
	case s.rendered.connectHost != "":
		u = "http://" + net.JoinHostPort(s.rendered.connectHost, port)
	default:
		u = "http://" + net.JoinHostPort(pod.Status.PodIP, port)
	}
	if s.hooks.PodURL != nil {
		u = s.hooks.PodURL(s, pod, u)
	}
	return u
}

// watch waits for an existing pod (found by a Manager after a restart)
// to become ready, as the last step of Start does.
func (s *Spawner) watch(ctx context.Context, pod *corev1.Pod) (string, string, error) {
	pods, err := s.podsHandle(ctx, pod.Namespace)
	if err != nil {
		return "", "", err
	}
	sub := s.registry.Subscribe(pod.Namespace, pod.Name)
	defer sub.Close()
	running, reason, err := s.waitReady(ctx, pods, nil, sub, pod, newStream(), s.clock.Now())
	if err != nil {
		return "", reason, err
	}
	return s.url(running), "", nil
}
