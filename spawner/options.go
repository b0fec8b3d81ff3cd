package spawner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Version is written into State so a hub can tell which spawnkit saved it.
const Version = "0.2.0"

// Interface is what a hub needs of one server; *Spawner implements it, and
// a hub can plug in another backend behind it.
type Interface interface {
	Start(ctx context.Context, opts StartOptions) (string, error)
	Resume(ctx context.Context, opts StartOptions) (string, error)
	Poll(ctx context.Context) (Status, error)
	Stop(ctx context.Context, opts StopOptions) error
	DeleteForever(ctx context.Context) error
	State() State
	LoadState(State)
	Close()
}

var _ Interface = (*Spawner)(nil)

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
}

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
	Config Config
	Hooks  Hooks
	// Clock stamps progress and times the slow-start message. Default:
	// the real clock.
	Clock clock.Clock
}

// base is what every Spawner made from the same Options shares,
// read-only after New.
type base struct {
	client   kubernetes.Interface
	registry *reflector.Registry
	cfg      Config // defaulted
	namer    *naming.Namer
	hooks    Hooks
	clock    clock.Clock
	// httpClient is true when client's requests go through net/http, so
	// the request timeout can start when a request leaves the client.
	httpClient bool
	// woken, set by tests only, is called each time a start's wait is
	// woken by its subscription.
	woken func()
}

func newBase(opts Options) (*base, error) {
	if opts.Client == nil || opts.Registry == nil {
		return nil, errors.New("spawner: Options needs Client and Registry")
	}
	cfg := opts.Config.withDefaults()
	if cfg.Namespace == "" {
		cfg.Namespace = detectNamespace()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
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
	b := &base{client: opts.Client, registry: opts.Registry, cfg: cfg, namer: namer, hooks: opts.Hooks, clock: opts.Clock}
	if b.clock == nil {
		b.clock = clock.RealClock{}
	}
	if rc, ok := opts.Client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		b.httpClient = true
	}
	return b, nil
}

// Spawner runs one user server. It is safe for concurrent use. Start,
// Resume, Stop and DeleteForever share one operation slot: one runs at a
// time, except that Stop first cancels a Start or Resume in flight. Poll,
// State and Server never wait for the slot.
type Spawner struct {
	server naming.Server
	b      *base
	names  naming.Names // rendered from today's templates by New

	// op is the operation slot: a token in a one-element channel, so a
	// waiter can give up when its ctx ends.
	op chan struct{}
	// done is closed by Close, so that waiters for the slot give up.
	done chan struct{}

	mu     sync.Mutex // guards the fields below
	state  State      // names in use and what the last start decided
	closed bool
	// readyUID and readyVersion are the uid and resourceVersion of the
	// pod the last start or resume found ready (the Manager skips
	// reconciling that version).
	readyUID     types.UID
	readyVersion string
	// cancels cancel the Starts and Resumes in flight or waiting for
	// the slot, by a sequence number.
	cancels map[uint64]context.CancelCauseFunc
	opSeq   uint64
	// pods and events are this Spawner's holds on the shared informers
	// of its namespace, kept from first use until Close so that Poll and
	// Start never restart an informer (a fresh LIST each time).
	pods   *reflector.Pods
	events *reflector.Events
	poll   pollCache // Poll's key and URL, rebuilt when their inputs change
}

// New creates a Spawner for one server. It checks the base configuration
// and renders and validates the server's names, so a configuration that
// cannot name this server fails here, before any API call; what depends
// on a start's options (profiles) is checked by Start before its first
// API call.
func New(server naming.Server, opts Options) (*Spawner, error) {
	b, err := newBase(opts)
	if err != nil {
		return nil, err
	}
	return b.newSpawner(server)
}

func (b *base) newSpawner(server naming.Server) (*Spawner, error) {
	names, err := b.namer.Names(server)
	if err != nil {
		return nil, fmt.Errorf("spawner: naming server %q of user %q: %w", server.Servername, server.Username, err)
	}
	s := &Spawner{server: server, b: b, names: names, op: make(chan struct{}, 1), done: make(chan struct{})}
	s.state = State{PodName: names.Pod, Namespace: names.Namespace, DNSName: names.DNS, Port: b.cfg.Port, Version: Version}
	return s, nil
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

// State returns the names in use and what the last start decided.
func (s *Spawner) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.clone()
}

// LoadState restores a State saved by State (or read from a pod with
// StateFromPod). Names from a loaded state win over today's templates, so
// a server started before a template or namespace change stays reachable;
// the recorded port, scheme and host make its URL the same as before.
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
	st.Version = Version
	s.state = st.clone()
}

// acquire takes the operation slot, waiting at most until ctx ends.
func (s *Spawner) acquire(ctx context.Context) error {
	if s.isClosed() {
		return ErrClosed
	}
	select {
	case s.op <- struct{}{}:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("spawner: waiting for the operation in flight on server %q of user %q: %w", s.server.Servername, s.server.Username, context.Cause(ctx))
	}
	if s.isClosed() {
		<-s.op
		return ErrClosed
	}
	return nil
}

func (s *Spawner) release() { <-s.op }

func (s *Spawner) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
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
	pods, events := s.pods, s.events
	s.pods, s.events = nil, nil
	s.mu.Unlock()
	// Released without s.mu: the last release of an informer waits for
	// its handler, which may be waiting for a lock whose holder takes
	// s.mu (the Registry's handler calls the Manager's podChanged, which
	// takes entry locks; runStart holds one while it reads this Spawner).
	if pods != nil {
		pods.Release()
	}
	if events != nil {
		events.Release()
	}
}

// eventsHandle returns the Spawner's hold on the event informer of ns,
// or with enable_user_namespaces on the one informer of all namespaces,
// so that a hub watches events once, however many users it has.
func (s *Spawner) eventsHandle(ctx context.Context, ns string) (*reflector.Events, error) {
	if s.b.cfg.EnableUserNamespaces {
		ns = metav1.NamespaceAll
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.events != nil && s.events.Namespace() == ns {
		defer s.mu.Unlock()
		return s.events, nil
	}
	ev, err := s.b.registry.Events(ctx, ns)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	old := s.events
	s.events = ev
	s.mu.Unlock()
	if old != nil {
		old.Release() // without s.mu, as in Close
	}
	return ev, nil
}

// podsHandle returns the Spawner's hold on the pod informer of ns, or
// with enable_user_namespaces on the one informer of all namespaces (the
// Manager's), so that a hub watches pods once, however many users it has.
func (s *Spawner) podsHandle(ctx context.Context, ns string) (*reflector.Pods, error) {
	if s.b.cfg.EnableUserNamespaces {
		ns = metav1.NamespaceAll
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.pods != nil && s.pods.Namespace() == ns {
		defer s.mu.Unlock()
		return s.pods, nil
	}
	p, err := s.b.registry.Pods(ctx, ns)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	old := s.pods
	s.pods = p
	s.mu.Unlock()
	if old != nil {
		old.Release() // without s.mu, as in Close
	}
	return p, nil
}
