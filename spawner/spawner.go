package spawner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Version is written into State so a hub can tell which spawnkit saved it.
const Version = "0.2.0"

// Hooks let a hub adjust what a Spawner does. Each may be nil. Hooks run
// in Start's goroutine while Start holds the Spawner's operation slot and
// no lock: a hook may call Poll, State and Server, but a hook that calls
// Start, Stop or DeleteForever of its own Spawner waits for itself (until
// that call's ctx ends).
type Hooks struct {
	// ModifyPod changes the pod before it is created. The pod is Start's
	// own copy.
	ModifyPod func(ctx context.Context, s *Spawner, pod *corev1.Pod) error
	// AfterPodCreated runs once the pod and its secret and service exist
	// (KubeSpawner's after_pod_created_hook); an error fails Start, which
	// then deletes the pod.
	AfterPodCreated func(ctx context.Context, s *Spawner, pod *corev1.Pod) error
	// PodURL, when set, makes the server's URL from the ready pod and the
	// URL spawnkit would use. It runs when Start and Resume end, and in
	// every Poll that finds the pod with an IP, on the pod as the shared
	// cache keeps it (reflector.Pod: names, labels, owner and spawnkit
	// annotations, container ports, IPs, phase, conditions, container
	// states; see the reflector package's cache contract), read-only. A
	// hook that needs more of the pod reads it from the API server,
	// which Poll otherwise never calls to read.
	PodURL func(s *Spawner, pod *reflector.Pod, defaultURL string) string
	// EventMessage, when set, decides what a Kubernetes event of the
	// start's pod says in its progress: it gets the event (a read-only
	// cache object) and the message after event_message_rules, and
	// returns the message to show, or keep false to show nothing. It
	// runs on the event informer's goroutine: it must not block.
	EventMessage func(s *Spawner, ev *corev1.Event, message string) (shown string, keep bool)
}

// ReportProgress adds message to the progress of the start whose hook
// ctx is (ModifyPod, AfterPodCreated), and reports whether it had one:
// a hook tells the user what it does ("Mounting your project
// volume..."). On any other ctx it does nothing.
func ReportProgress(ctx context.Context, message string) bool {
	em, ok := ctx.Value(emitterKey{}).(*emitter)
	if !ok {
		return false
	}
	em.note(-1, message)
	return true
}

// emitterKey is the ctx key of a start's emitter, for ReportProgress.
type emitterKey struct{}

// SSL is the internal-SSL material a hub hands a server (JupyterHub's
// internal_ssl): PEM contents, not paths. The material goes into a secret
// owned by the pod and mounted at secret_mount_path; a service gives the
// pod a DNS name, and the URL is https://<dns name>:<port>.
type SSL struct {
	Key, Cert []byte
	// CA is the notebooks' CA bundle, HubCA the hub's.
	CA, HubCA []byte
}

// Options configure New. Client and Registry are required; the zero
// value of every other field means its default.
type Options struct {
	Client   kubernetes.Interface
	Registry *reflector.Registry
	// Config is the server's base configuration; each Start resolves its
	// user options (profiles) on it.
	Config kubespawner.Config
	Hooks  Hooks
	// Clock stamps progress and times the slow-start message. Default:
	// the real clock.
	Clock clock.Clock
	// Cluster names the cluster Client talks to, for a hub that runs
	// servers in several (one Factory per cluster): a DNS-1123 label.
	// Every object a start creates or updates then carries it as the
	// label naming.LabelCluster, State.Cluster records it, and a start
	// whose configuration's kubernetes_cluster names other clusters
	// only is refused (see ErrOtherCluster). Default "": a hub with one
	// cluster, whose objects and State name none and which ignores
	// kubernetes_cluster. (The package's Plan, a dry run without a
	// Factory, names no cluster; Spawner.Plan does.)
	Cluster string
	// TracerProvider, when set, receives a span per Start, Resume and
	// Stop with a child per phase (docs/observability.md lists them).
	// nil, the default, makes no spans at all (not the global
	// provider's: a hub opts in, with otel.GetTracerProvider() say).
	// HashNames exports the user's and server's names, and the names
	// made from them, as the first 16 hex digits of their SHA-256.
	TracerProvider trace.TracerProvider
	HashNames      bool
}

// Factory makes the Spawners of one configuration: it checks the Config,
// its templates and the Registry once, and each New only renders one
// server's names. A hub with many users makes one Factory and a Spawner
// per server from it (the Manager does). A Factory is read-only after
// NewFactory and safe for concurrent use.
type Factory struct {
	client   kubernetes.Interface
	registry *reflector.Registry
	cfg      kubespawner.Config // defaulted
	namer    *naming.Namer
	hooks    Hooks
	clock    clock.Clock
	cluster  string // Options.Cluster
	tracer   *phase.Tracer
	// httpClient is true when client's requests go through net/http, so
	// the request timeout can start when a request leaves the client.
	httpClient bool
	// profileNS are the namespaces profiles can name; openNS names a
	// profile option that lets the user type one (Namespaces).
	profileNS []string
	openNS    string
	// retired are the retired_namespaces given by name; retiredNamers
	// render the templated ones per server.
	retired       []string
	retiredNamers []*naming.Namer
	// watchAll is set when a server's pod can be in any namespace
	// (enable_user_namespaces, a templated retired namespace): its
	// Spawners then share the informer of all namespaces, as the
	// Manager holds it.
	watchAll bool
	// ownPrefix and ownSuffix surround the user name in the namespace
	// today's user_namespace_template renders (ownShapeKnown: found).
	ownPrefix, ownSuffix string
	ownShapeKnown        bool
	// woken, set by tests only, is called each time a start's wait is
	// woken by its subscription.
	woken func()
	// progressEvery, set by tests only, replaces progressEvery.
	progressEvery time.Duration
}

// NewFactory checks opts once for every Spawner it will make: Client and
// Registry are set, the Config (with its defaults) is valid, its name
// templates parse, and the Registry selects the pods of component_label.
// A Config with a profile list is checked again, profile by profile, by
// each Start that chooses one (the user options pick it).
func NewFactory(opts Options) (*Factory, error) {
	if opts.Client == nil || opts.Registry == nil {
		return nil, errors.New("spawner: Options needs Client and Registry")
	}
	if opts.Cluster != "" {
		if msgs := validation.IsDNS1123Label(opts.Cluster); len(msgs) > 0 {
			return nil, fmt.Errorf("spawner: Options.Cluster %q is not a cluster name (a DNS-1123 label): %s", opts.Cluster, strings.Join(msgs, "; "))
		}
	}
	cfg := opts.Config.WithDefaults()
	if cfg.Namespace == "" {
		cfg.Namespace = detectNamespace()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if want := naming.LabelComponent + "=" + cfg.ComponentLabel; opts.Registry.PodLabelSelector() != want {
		return nil, fmt.Errorf("spawner: the registry selects pods by %q but component_label makes %q: create the Registry with PodLabelSelector %q",
			opts.Registry.PodLabelSelector(), want, want)
	}
	nopts, err := cfg.NamingOptions()
	if err != nil {
		return nil, err
	}
	namer, err := naming.New(nopts)
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	f := &Factory{client: opts.Client, registry: opts.Registry, cfg: cfg, namer: namer, hooks: opts.Hooks, clock: opts.Clock, cluster: opts.Cluster,
		tracer: phase.NewTracer(opts.TracerProvider, opts.HashNames)}
	f.profileNS, f.openNS = cfg.OverrideNamespaces()
	if err := f.setRetired(); err != nil {
		return nil, err
	}
	f.watchAll = cfg.EnableUserNamespaces || len(f.retiredNamers) > 0
	f.setOwnNamespaceShape()
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if rc, ok := opts.Client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		f.httpClient = true
	}
	return f, nil
}

// Config returns the Factory's configuration, with its defaults filled
// in (the namespace included).
func (f *Factory) Config() kubespawner.Config { return f.cfg }

// Cluster is the name of the cluster the Factory's Client talks to
// (Options.Cluster); "" for a hub with one cluster.
func (f *Factory) Cluster() string { return f.cluster }

// Spawner runs one user server. It is safe for concurrent use. Start,
// Resume, Stop and DeleteForever share one operation slot: one runs at a
// time, except that Stop first cancels a Start or Resume in flight. Poll,
// State and Server never wait for the slot.
type Spawner struct {
	server naming.Server
	b      *Factory
	names  naming.Names // rendered from today's templates by New

	// op is the operation slot: a token in a one-element channel, so a
	// waiter can give up when its ctx ends.
	op chan struct{}
	// done is closed by Close, so that waiters for the slot give up.
	done chan struct{}

	mu     sync.Mutex // guards the fields below
	state  State      // names in use and what the last start decided
	closed bool
	// ready is the pod the last start or resume found ready (ReadyPod).
	ready PodRef
	// cancels cancel the Starts and Resumes in flight or waiting for
	// the slot, by a sequence number.
	cancels map[uint64]context.CancelCauseFunc
	opSeq   uint64
	// pods is this Spawner's hold on the shared pod informer of its
	// namespace, kept from first use until Close so that Poll and Start
	// never restart an informer (a fresh LIST each time). The event
	// informer is held only while a start or resume follows its pod
	// (startEvents): the Registry keeps it running a while after the
	// last one, and a hub's memory does not keep a burst's events.
	pods hold[*reflector.Pods]
	poll pollCache // Poll's key and URL, rebuilt when their inputs change
}

// PodRef names one version of a pod.
type PodRef struct {
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
}

// New creates a Spawner for one server: NewFactory(opts), then its New.
// A hub with many servers makes the Factory once.
func New(server naming.Server, opts Options) (*Spawner, error) {
	f, err := NewFactory(opts)
	if err != nil {
		return nil, err
	}
	return f.New(server)
}

// New creates a Spawner for one server. It renders and validates the
// server's names, so a configuration that cannot name this server fails
// here, before any API call; what depends on a start's options
// (profiles) is checked by Plan, and by Start before its first API call.
func (f *Factory) New(server naming.Server) (*Spawner, error) {
	names, err := f.namer.Names(server)
	if err != nil {
		return nil, fmt.Errorf("spawner: naming server %q of user %q: %w", server.Servername, server.Username, err)
	}
	s := &Spawner{server: server, b: f, names: names, op: make(chan struct{}, 1), done: make(chan struct{})}
	s.state = State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS, Port: f.cfg.Port, Cluster: f.cluster, Version: Version}
	return s, nil
}

// ReadyPod is the pod the last Start or Resume found ready, as the
// shared cache held it then (its resourceVersion says which version);
// false before any start succeeded. A hub that follows the pod informer
// itself can skip the version whose readiness Start already reported.
func (s *Spawner) ReadyPod() (PodRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready, s.ready.UID != ""
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

// Factory returns the Factory that made this Spawner.
func (s *Spawner) Factory() *Factory { return s.b }

// Server returns the server this Spawner runs.
func (s *Spawner) Server() naming.Server { return s.server }

// State returns the names in use and what the last start decided.
func (s *Spawner) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.clone()
}

// LoadState restores a State saved by State (or read from a pod with
// StateFromPod). Names from a loaded state win over today's templates
// for Poll, Stop and Resume, so a server started before a template or
// namespace change stays reachable; the recorded port, scheme and host
// make its URL the same as before. A Start uses today's names (keeping
// the claim, PVCName), as KubeSpawner's after clear_state, and first
// removes the pod left under the loaded names.
// Cluster is always the Factory's (Options.Cluster), whatever st
// records: a Spawner's objects are where its Client is.
func (s *Spawner) LoadState(st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.state
	keepPVC := cur.PVCName
	if st.PodName == "" {
		st.PodName = cur.PodName
	}
	if st.Namespace == "" {
		st.Namespace = cur.Namespace
	}
	if st.DNSName == "" {
		st.DNSName = cur.DNSName
	}
	if st.Port == 0 {
		st.Port = cur.Port
	}
	if st.PVCName == "" || !boolOr(s.b.cfg.RememberPVCName, true) {
		st.PVCName = keepPVC
	}
	st.Cluster = s.b.cluster
	st.Version = Version
	s.state = st.clone()
}

// Close ends the Spawner for good: a Start or Resume in flight is
// cancelled (with ErrClosed as its cause: its pod is deleted, as for any
// cancellation but ErrDetach), Close waits for it to return, then releases
// the Spawner's holds on the shared informers. Every later call returns
// ErrClosed. The server itself keeps running unless a start was in
// flight. Close is idempotent.
func (s *Spawner) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.cancelOpsLocked(ErrClosed)
	s.mu.Unlock()
	// Wait for the operation in flight, which ends soon once cancelled.
	s.op <- struct{}{}
	s.mu.Lock()
	pods, heldPods := s.pods.take()
	s.mu.Unlock()
	// Released without s.mu: the last release of an informer waits for
	// its handler, which may be waiting for a lock whose holder takes
	// s.mu (the Registry's handler calls the Manager's podChanged, which
	// takes entry locks; runStart holds one while it reads this Spawner).
	if heldPods {
		pods.Release()
	}
}
