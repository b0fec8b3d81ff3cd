package spawner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/reflector"
)

// StartOptions are what a hub hands one start. JupyterHub issues a new
// API token and environment on every start, so these belong to the start,
// not to the Spawner.
type StartOptions struct {
	// UserOptions select a profile and its options (KubeSpawner's keys:
	// "profile", "<option>", "<option>--unlisted-choice"); see
	// Config.Resolve.
	UserOptions map[string]string
	// Attributes are KubeSpawner options the hub set on its Spawner
	// before this start (JupyterHub's cpu_limit, cpu_guarantee,
	// mem_limit, mem_guarantee, set by the hub's config or by
	// apply_user_options and pre_spawn hooks), as KubeSpawner reads its
	// own attributes: over the configuration, under the chosen profile's
	// overrides (which KubeSpawner applies in start, after them). Keys
	// must be in HubAttributes.
	Attributes map[string]any
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
	// Hub names the hub that starts the server, recorded in State (and so
	// on the pod), for a service shared by several hubs.
	Hub string
	// HubNamespace is the namespace the hub runs in, the default of
	// namespace and the source of {hubnamespace}. Default: the in-cluster
	// service account's namespace, else "default" (as KubeSpawner).
	HubNamespace string
	// HubVersion, when set, is written as the
	// hub.jupyter.org/jupyterhub-version annotation, as KubeSpawner does
	// with JupyterHub's version.
	HubVersion string
	// OnProgress, when set, is called with every progress event of this
	// operation, in order, from the operation's goroutine, before the
	// operation returns; the last call has Ready or Failed set. It must
	// not block for long. Registering it with the call itself means no
	// event can be missed.
	OnProgress func(ProgressEvent)
	// Progress, when set, receives the same events as OnProgress, in the
	// same order. A Stream never blocks, so with Progress alone the pod's
	// events are published from the event informer's handler as they
	// arrive, without waking the operation's goroutine: the cheaper way
	// for a hub that serves progress to many readers.
	Progress *Stream
	// OnPodCreated, when set, is called once, from Start's goroutine,
	// right after the API server accepted the pod's create (before its
	// secret, service and AfterPodCreated). From then on the start is in
	// the cluster: a Spawner that finds the pod (Resume, a Manager's
	// recovery) takes it over if this process goes away. It must not
	// block. Resume never calls it: its pod exists already.
	OnPodCreated func()
	// Plan, when set, is what this start creates: objects Spawner.Plan
	// made with the same options (the caller's own check of them, done
	// before it commits to the start). Start carries the plan out when it
	// was made by this server's Spawner (or another of the same Factory
	// and server) and the names in use have not changed since; otherwise
	// it renders again, as without a Plan. A plan serves one Start, which
	// may change its objects (ModifyPod).
	Plan *Objects
	// OnPhase, when set, is called from the operation's goroutine as
	// each phase of the start ends (the Manager's phase histogram).
	OnPhase func(PhaseTiming)
}

// Start creates the server's objects and waits until its pod is ready,
// returning the URL to reach it.
//
// Before any API call Start resolves opts.UserOptions (profiles) and
// renders every object (see Plan), so a configuration that cannot work
// creates nothing. Then, in order: the user namespace (with
// enable_user_namespaces), the claim (with storage_pvc_ensure), the pod
// (ModifyPod first), the internal-SSL secret and the service (owned by
// the pod), AfterPodCreated, and the wait for the pod's PodReady
// condition, bounded by start_timeout.
//
// Start never deletes, replaces or reuses an object that belongs to
// another server (see CollisionError). A pod of an earlier start of this
// server is stale and replaced; a claim without owner annotations
// (KubeSpawner's, or made by hand) is reused, so a migrating hub keeps
// its users' homes.
//
// A failed Start returns a *StartError and deletes the pod it created, and
// the claim it created unless it failed waiting for the pod (StepWait: an
// image that cannot be pulled, a pod no node takes) with the claim bound;
// a claim that existed before is kept. A Start
// cancelled by Stop, by Close or by its ctx deletes its pod and keeps the
// claim; a Start whose ctx is cancelled with ErrDetach as the cause
// returns at once and leaves everything in place for Resume.
func (s *Spawner) Start(ctx context.Context, opts StartOptions) (string, error) {
	return s.operate(ctx, phase.OpStart, &opts, s.start)
}

// startRun is what one Start carries through its steps (its progress)
// and what it has done so far, for its cleanup.
type startRun struct {
	em       *emitter
	startID  string
	ns, name string
	pod      types.UID // the pod this start created
	// createUncertain is set when a create failed in a way that leaves
	// open whether the server made the pod (a timeout, a lost
	// connection): the cleanup then looks for it.
	createUncertain bool
	claim           types.UID // the claim this start created, if any
	claimName       string
	// tl follows the pod from its create; onPhase is StartOptions'.
	tl      *phase.Timeline
	onPhase func(PhaseTiming)
	began   time.Time // when the objects' creates began
}

func newStartID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Spawner) start(ctx context.Context, opts *StartOptions, em *emitter) (string, error) {
	run := &startRun{em: em, tl: phase.NewTimeline(s.b.clock.Now), onPhase: opts.OnPhase}
	em.note(0, "Preparing the server's objects")
	prev := s.State()
	began := s.b.clock.Now()
	end := s.b.tracer.Step(ctx, phase.Plan)
	o, step, err := s.objectsFor(ctx, run, opts)
	end(err)
	if err == nil {
		run.phased(phase.Plan, s.b.clock.Now().Sub(began))
		s.podAttrs(trace.SpanFromContext(ctx), o.State.Namespace, o.State.PodName)
	}
	if err != nil {
		var reason Reason
		if step == StepPlan {
			reason = ReasonInvalid
		}
		return "", s.failStart(ctx, run, step, reason, err)
	}
	if err := s.removeEarlier(ctx, prev, &o.State, em); err != nil {
		return "", s.failStart(ctx, run, StepPod, collisionReason(err), err)
	}
	return s.createAndWait(ctx, run, o, opts.OnPodCreated)
}

// removeEarlier deletes the pod an earlier start of the server made
// under other names than this start's and today's (prev, the State
// loaded or recorded: the pod_name_template, namespace or profile
// changed since, or a KubeSpawner pod was adopted), if
// it is still there, and waits until it is gone: a start replaces the
// server's earlier pod, as it does under the same name, so a server
// never has two pods (which would both mount its claim). A pod there of
// another server (today's templates may give it those names) is not this
// server's: it is left alone, and the start goes on.
func (s *Spawner) removeEarlier(ctx context.Context, prev State, next *State, em *emitter) error {
	if (prev.PodName == s.names.Pod && prev.Namespace == s.names.Namespace) || (prev.PodName == next.PodName && prev.Namespace == next.Namespace) {
		return nil // today's names (a new Spawner's), or this start's
	}
	// Said only when the cache holds the pod: waiting for it to end
	// (its grace period) is then part of the start, and shown.
	if pods, err := s.podsHandle(ctx, prev.Namespace); err == nil {
		if p, ok, _ := pods.Get(ctx, prev.Namespace, prev.PodName); ok && ownedBy(s.server, p) {
			em.note(0, "Removing the server's earlier pod "+prev.Namespace+"/"+prev.PodName+" (its names have changed since)")
		}
	}
	if err := s.stopAt(ctx, prev, int64(s.b.cfg.DeleteGracePeriod.Duration()/time.Second), true); err != nil {
		return fmt.Errorf("spawner: removing the earlier pod %s/%s of server %q of user %q: %w",
			prev.Namespace, prev.PodName, s.server.Servername, s.server.Username, err)
	}
	return nil
}

// createAndWait creates a start's rendered objects o and waits for its
// pod to be ready.
//
// Its own frame is small, and the steps before and after the pod's
// create are functions of their own: the create (client-go encoding
// the pod) is the deepest path of a start's goroutine, whose stack stays
// as large as that path needed while the start waits.
func (s *Spawner) createAndWait(ctx context.Context, run *startRun, o *Objects, onCreated func()) (string, error) {
	h, step, reason, err := s.beforePod(ctx, run, o)
	if h.sub != nil {
		defer h.sub.Close()
	}
	if h.events != nil {
		defer h.events.Release()
	}
	if err != nil {
		return "", s.failStart(ctx, run, step, reason, err)
	}
	growStack() // right before the deepest call: no wait in between for a GC to shrink the stack again
	end := s.step(ctx, "create pod", "Pod", o.Pod.Name)
	created, err := s.createPod(ctx, run, h.pods, h.sub, o.Pod)
	end(err)
	if err != nil {
		return "", s.failStart(ctx, run, StepPod, collisionReason(err), err)
	}
	if onCreated != nil {
		onCreated()
	}
	return s.afterPod(ctx, run, o, h, created)
}

// startHandles are the informer handles and the subscription a start
// holds from before its create to its end.
type startHandles struct {
	pods   *reflector.Pods
	events *reflector.Events
	sub    *reflector.Subscription
}

// beforePod takes the informers and subscribes to the pod, then makes
// the user namespace and the claim and runs ModifyPod on o.Pod. On
// failure it returns the step and reason; h.sub and h.events, when set,
// are the caller's to close and release.
func (s *Spawner) beforePod(ctx context.Context, run *startRun, o *Objects) (h startHandles, step Step, reason Reason, err error) {
	run.ns, run.name = o.State.Namespace, o.State.PodName
	run.began = s.b.clock.Now()
	if h.pods, err = s.podsHandle(ctx, run.ns); err != nil {
		return h, StepWatch, "", err
	}
	// Events feed the progress and the trace: a start that has neither
	// does not hold the event informer (it costs a start about a tenth of
	// its client CPU), and unschedulable_timeout, which needs an
	// autoscaler's word, then leaves it to the other bounds.
	if boolOr(o.cfg.EventsEnabled, true) && (run.em.followed() || s.b.tracer.On()) {
		if h.events, err = s.startEvents(ctx, run.ns); err != nil {
			return h, StepWatch, "", err
		}
	}
	h.sub = s.b.registry.SubscribeIf(run.ns, run.name, run.tl.Watch(startWakes(o.cfg.FatalReasons), o.cfg.UnschedulableAfter() > 0))
	if h.events != nil {
		// Timed as they come from the pod's create on (a kubelet's
		// Pulling can come while the Secret is made); waitReady's own
		// handler takes over.
		h.sub.OnEvent(func(e *corev1.Event) bool { run.tl.Event(e); return false })
	}
	if o.Namespace != nil {
		end := s.step(ctx, "create namespace", "Namespace", o.Namespace.Name)
		err := s.ensureNamespace(ctx, o.Namespace)
		if end(err); err != nil {
			return h, StepNamespace, "", err
		}
	}
	if o.NetworkPolicy != nil {
		end := s.step(ctx, "create network policy", "NetworkPolicy", o.NetworkPolicy.Name)
		err := s.ensureNetworkPolicy(ctx, o.NetworkPolicy)
		if end(err); err != nil {
			return h, StepPolicy, collisionReason(err), err
		}
	}
	if o.ResourceQuota != nil {
		end := s.step(ctx, "create resource quota", "ResourceQuota", o.ResourceQuota.Name)
		quota, err := s.ensureQuota(ctx, o.ResourceQuota)
		end(err)
		if err != nil {
			return h, StepQuota, collisionReason(err), err
		}
		// Before anything of the server exists: a refusal leaves
		// nothing behind.
		if err := quotaRoom(quota, o.Pod); err != nil {
			return h, StepQuota, ReasonQuotaExceeded, err
		}
	}
	if o.PVC != nil {
		run.em.note(0, "Ensuring the storage claim "+o.PVC.Name)
		end := s.step(ctx, "create claim", "PersistentVolumeClaim", o.PVC.Name)
		err := s.ensurePVC(ctx, run, o.PVC)
		if end(err); err != nil {
			return h, StepPVC, collisionReason(err), err
		}
		s.mu.Lock()
		s.state.PVCName = o.PVC.Name
		s.mu.Unlock()
	}
	if s.b.hooks.ModifyPod != nil {
		if err := s.b.hooks.ModifyPod(context.WithValue(ctx, emitterKey{}, run.em), s, o.Pod); err != nil {
			return h, StepHook, "", fmt.Errorf("ModifyPod: %w", err)
		}
	}
	run.em.note(0, "Creating pod "+run.ns+"/"+run.name)
	return h, "", "", nil
}

// afterPod records the created pod, makes the secret and the service it
// owns, runs AfterPodCreated and waits for the pod to be ready.
func (s *Spawner) afterPod(ctx context.Context, run *startRun, o *Objects, h startHandles, created *corev1.Pod) (string, error) {
	fail := func(step Step, reason Reason, err error) error {
		return s.failStart(ctx, run, step, reason, err)
	}
	run.pod = created.UID
	run.tl.Created(created.UID, mainImage(created))
	if err := s.checkKept(ctx, o.Pod, created, o.cfg.AllowedDroppedFields, run.em); err != nil {
		return "", fail(StepPod, ReasonInvalid, err)
	}
	s.mu.Lock()
	s.state = o.State.clone()
	s.mu.Unlock()
	// The environment Secret first, within moments of the pod: the
	// kubelet cannot create the container before it exists. It is made
	// after the pod, not before, so that it can be owned by it (the
	// garbage collector deletes it with the pod, whoever deletes the pod)
	// under a Role without update or patch, as z2jh's: an owner reference
	// needs the pod's uid. A kubelet that gets to the container first
	// reports CreateContainerConfigError for this Secret and retries,
	// which waitReady does not take as fatal (envSecretMissing).
	if o.EnvSecret != nil {
		end := s.step(ctx, "create secret", "Secret", o.EnvSecret.Name)
		err := s.ensureOwned(ctx, created, o.EnvSecret)
		if end(err); err != nil {
			return "", fail(StepSecret, collisionReason(err), err)
		}
	}
	if o.Secret != nil {
		end := s.step(ctx, "create secret", "Secret", o.Secret.Name)
		err := s.ensureOwned(ctx, created, o.Secret)
		if end(err); err != nil {
			return "", fail(StepSecret, collisionReason(err), err)
		}
	}
	if o.Service != nil {
		svc := o.Service.DeepCopy()
		svc.Spec.Selector = created.Labels
		end := s.step(ctx, "create service", "Service", svc.Name)
		err := s.ensureOwned(ctx, created, svc)
		if end(err); err != nil {
			return "", fail(StepService, collisionReason(err), err)
		}
	}
	if s.b.hooks.AfterPodCreated != nil {
		if err := s.b.hooks.AfterPodCreated(context.WithValue(ctx, emitterKey{}, run.em), s, created); err != nil {
			return "", fail(StepHook, "", fmt.Errorf("AfterPodCreated: %w", err))
		}
	}
	run.phased(phase.Objects, s.b.clock.Now().Sub(run.began))
	ready, reason, err := s.waitReady(ctx, &readyWait{
		cfg: o.cfg, startHandles: h, em: run.em, tl: run.tl,
		ns: created.Namespace, name: created.Name, uid: created.UID,
	})
	s.endWait(ctx, run, err)
	if err != nil {
		return "", fail(StepWait, reason, err)
	}
	return s.finishReady(ready), nil
}

// objectsFor renders a start's objects (or takes opts.Plan)
// and sets run.startID; with storage, a claim of an earlier KubeSpawner
// found by handle_legacy_names replaces the planned one. On failure it
// returns the step that failed.
//
// It is a function of its own so that the rendering's stack frames
// are gone before the start's API calls: a start's goroutine waits for
// most of its life with a stack as deep as start's own frame plus
// client-go's, and every GC scans it.
func (s *Spawner) objectsFor(ctx context.Context, run *startRun, opts *StartOptions) (*Objects, Step, error) {
	st := s.State()
	o := s.planFor(opts, &st)
	if o == nil {
		var err error
		if o, err = plan(ctx, &planInput{server: s.server, base: &s.b.cfg, names: &s.names, state: &st, opts: opts, startID: newStartID(), cluster: s.b.cluster}); err != nil {
			return nil, StepPlan, err
		}
	}
	run.startID = o.StartID
	// A plan made earlier too: it cannot know of an old claim.
	if o.PVC == nil || st.PVCName != "" {
		return o, "", nil
	}
	legacy, err := s.legacyPVC(ctx, o.cfg, o.PVC)
	if err != nil {
		return nil, StepPVC, err
	}
	if legacy == "" {
		return o, "", nil
	}
	run.em.note(0, "Using the claim "+legacy+" of an earlier KubeSpawner (handle_legacy_names)")
	st.PVCName = legacy
	if o, err = plan(ctx, &planInput{server: s.server, base: &s.b.cfg, names: &s.names, state: &st, opts: opts, startID: run.startID, cluster: s.b.cluster}); err != nil {
		return nil, StepPlan, err
	}
	return o, "", nil
}

// finishReady records and returns the URL of a ready pod.
// The PodURL hook runs without s.mu held: hooks may call State and Poll.
func (s *Spawner) finishReady(pod *reflector.Pod) string {
	s.mu.Lock()
	url := s.state.urlFor(pod)
	s.mu.Unlock()
	if s.b.hooks.PodURL != nil {
		url = s.b.hooks.PodURL(s, pod, url)
	}
	s.mu.Lock()
	s.state.URL = url
	s.ready = PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	s.mu.Unlock()
	return url
}
