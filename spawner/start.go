package spawner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/kubespawner"
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
// A failed Start returns a *StartError and deletes the pod it created and
// the claim it created; a claim that existed before is kept. A Start
// cancelled by Stop, by Close or by its ctx deletes its pod and keeps the
// claim; a Start whose ctx is cancelled with ErrDetach as the cause
// returns at once and leaves everything in place for Resume.
func (s *Spawner) Start(ctx context.Context, opts StartOptions) (string, error) {
	return s.operate(ctx, &opts, s.start)
}

// operate runs a Start or Resume: registered so that Stop and Close can
// cancel it (while it waits for the operation slot too), in the slot,
// reporting progress, and ending with the final event.
func (s *Spawner) operate(ctx context.Context, opts *StartOptions, do func(context.Context, *StartOptions, *emitter) (string, error)) (string, error) {
	ctx, done := s.beginOp(ctx)
	defer done()
	em := newEmitter(opts.OnProgress, opts.Progress, s.b.clock)
	if err := s.acquire(ctx); err != nil {
		err = s.opError(ctx, err)
		em.finish("", err)
		return "", err
	}
	defer s.release()
	url, err := do(ctx, opts, em)
	em.finish(url, err)
	return url, err
}

// opError is the error of an operation that could not take the slot.
// Like any failed start it is a *StartError: Cancelled (wrapping the
// cause: ErrStartCancelled, ErrClosed or the ctx's own error), or
// Detached when the cause is ErrDetach; nothing was created.
func (s *Spawner) opError(ctx context.Context, err error) error {
	reason := ReasonCancelled
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(cause, ErrDetach) {
			reason = ReasonDetached
		}
		if !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	}
	return &StartError{Server: s.server, Step: StepPlan, Reason: reason, Err: err}
}

// beginOp registers a Start or Resume, so that Stop and Close can cancel
// it while it runs or waits for the slot.
func (s *Spawner) beginOp(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel(ErrClosed)
		return ctx, func() {}
	}
	s.opSeq++
	id := s.opSeq
	if s.cancels == nil {
		s.cancels = map[uint64]context.CancelCauseFunc{}
	}
	s.cancels[id] = cancel
	return ctx, func() {
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		cancel(nil)
	}
}

// cancelOpsLocked cancels every Start and Resume in flight or waiting.
// Called with s.mu held.
func (s *Spawner) cancelOpsLocked(cause error) {
	for _, c := range s.cancels {
		c(cause)
	}
}

// startRun is what one Start has done so far, for its cleanup.
type startRun struct {
	startID  string
	ns, name string
	pod      types.UID // the pod this start created
	// createUncertain is set when a create failed in a way that leaves
	// open whether the server made the pod (a timeout, a lost
	// connection): the cleanup then looks for it.
	createUncertain bool
	claim           types.UID // the claim this start created, if any
	claimName       string
}

func newStartID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Spawner) start(ctx context.Context, opts *StartOptions, em *emitter) (string, error) {
	run := &startRun{}
	em.note(0, "Preparing the server's objects")
	prev := s.State()
	o, step, err := s.objectsFor(ctx, run, opts, em)
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
	return s.createAndWait(ctx, run, o, em, opts.OnPodCreated)
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
func (s *Spawner) createAndWait(ctx context.Context, run *startRun, o *Objects, em *emitter, onCreated func()) (string, error) {
	h, step, reason, err := s.beforePod(ctx, run, o, em)
	if h.sub != nil {
		defer h.sub.Close()
	}
	if err != nil {
		return "", s.failStart(ctx, run, step, reason, err)
	}
	growStack() // right before the deepest call: no wait in between for a GC to shrink the stack again
	created, err := s.createPod(ctx, run, h.pods, h.sub, o.Pod)
	if err != nil {
		return "", s.failStart(ctx, run, StepPod, collisionReason(err), err)
	}
	if onCreated != nil {
		onCreated()
	}
	return s.afterPod(ctx, run, o, h, created, em)
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
// failure it returns the step and reason; h.sub, when set, is the
// caller's to close.
func (s *Spawner) beforePod(ctx context.Context, run *startRun, o *Objects, em *emitter) (h startHandles, step Step, reason Reason, err error) {
	run.ns, run.name = o.State.Namespace, o.State.PodName
	if h.pods, err = s.podsHandle(ctx, run.ns); err != nil {
		return h, StepWatch, "", err
	}
	// Events feed only the progress: a start nobody follows does not
	// hold the event informer.
	if boolOr(o.cfg.EventsEnabled, true) && em.followed() {
		if h.events, err = s.eventsHandle(ctx, run.ns); err != nil {
			return h, StepWatch, "", err
		}
	}
	h.sub = s.b.registry.SubscribeIf(run.ns, run.name, startWakes(o.cfg.FatalReasons))
	if o.Namespace != nil {
		if err := s.ensureNamespace(ctx, o.Namespace); err != nil {
			return h, StepNamespace, "", err
		}
	}
	if o.NetworkPolicy != nil {
		if err := s.ensureNetworkPolicy(ctx, o.NetworkPolicy); err != nil {
			return h, StepPolicy, collisionReason(err), err
		}
	}
	if o.ResourceQuota != nil {
		quota, err := s.ensureQuota(ctx, o.ResourceQuota)
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
		em.note(0, "Ensuring the storage claim "+o.PVC.Name)
		if err := s.ensurePVC(ctx, run, o.PVC); err != nil {
			return h, StepPVC, collisionReason(err), err
		}
		s.mu.Lock()
		s.state.PVCName = o.PVC.Name
		s.mu.Unlock()
	}
	if s.b.hooks.ModifyPod != nil {
		if err := s.b.hooks.ModifyPod(context.WithValue(ctx, emitterKey{}, em), s, o.Pod); err != nil {
			return h, StepHook, "", fmt.Errorf("ModifyPod: %w", err)
		}
	}
	em.note(0, "Creating pod "+run.ns+"/"+run.name)
	return h, "", "", nil
}

// afterPod records the created pod, makes the secret and the service it
// owns, runs AfterPodCreated and waits for the pod to be ready.
func (s *Spawner) afterPod(ctx context.Context, run *startRun, o *Objects, h startHandles, created *corev1.Pod, em *emitter) (string, error) {
	fail := func(step Step, reason Reason, err error) error {
		return s.failStart(ctx, run, step, reason, err)
	}
	run.pod = created.UID
	if err := s.checkKept(ctx, o.Pod, created, o.cfg.AllowedDroppedFields, em); err != nil {
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
		if err := s.ensureOwned(ctx, created, o.EnvSecret); err != nil {
			return "", fail(StepSecret, collisionReason(err), err)
		}
	}
	if o.Secret != nil {
		if err := s.ensureOwned(ctx, created, o.Secret); err != nil {
			return "", fail(StepSecret, collisionReason(err), err)
		}
	}
	if o.Service != nil {
		svc := o.Service.DeepCopy()
		svc.Spec.Selector = created.Labels
		if err := s.ensureOwned(ctx, created, svc); err != nil {
			return "", fail(StepService, collisionReason(err), err)
		}
	}
	if s.b.hooks.AfterPodCreated != nil {
		if err := s.b.hooks.AfterPodCreated(context.WithValue(ctx, emitterKey{}, em), s, created); err != nil {
			return "", fail(StepHook, "", fmt.Errorf("AfterPodCreated: %w", err))
		}
	}
	ready, reason, err := s.waitReady(ctx, o.cfg, h.pods, h.events, h.sub, created.Namespace, created.Name, created.UID, em)
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
func (s *Spawner) objectsFor(ctx context.Context, run *startRun, opts *StartOptions, em *emitter) (*Objects, Step, error) {
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
	em.note(0, "Using the claim "+legacy+" of an earlier KubeSpawner (handle_legacy_names)")
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

// failureReason is the reason of a failure no step named: APIError for
// the API server's refusal or a request that got no answer, else
// StartFailed.
func failureReason(err error) Reason {
	var status apierrors.APIStatus
	var netErr net.Error
	if errors.As(err, &status) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return ReasonAPIError
	}
	return ReasonStartFailed
}

func collisionReason(err error) Reason {
	if IsCollision(err) {
		return ReasonCollision
	}
	return ""
}

// failStart turns a failure into a *StartError after cleaning up: a
// detached start leaves everything; a cancelled one deletes its pod; a
// failed one deletes its pod and the claim it created.
func (s *Spawner) failStart(ctx context.Context, run *startRun, step Step, reason Reason, err error) error {
	if reason == "" {
		reason = failureReason(err)
	}
	serr := &StartError{Server: s.server, Step: step, Reason: reason, Err: err}
	cancelled := ctx.Err() != nil
	if cancelled {
		cause := context.Cause(ctx)
		if errors.Is(cause, ErrDetach) {
			serr.Reason, serr.Err = ReasonDetached, fmt.Errorf("%w: %w", cause, err)
			return serr
		}
		serr.Reason = ReasonCancelled
		if !errors.Is(err, cause) {
			serr.Err = fmt.Errorf("%w: %w", cause, err)
		}
	}
	// The cleanup outlives a cancelled ctx, bounded by the retry budget.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.K8sAPIRequestRetryTimeout.Duration())
	defer cancel()
	var errs []error
	if run.ns != "" {
		if err := s.cleanupPod(cctx, run); err != nil {
			errs = append(errs, fmt.Errorf("deleting the pod after the failure: %w", err))
		}
	}
	if !cancelled && run.claim != "" {
		if err := s.deleteClaim(cctx, run.ns, run.claimName, run.claim); err != nil {
			errs = append(errs, fmt.Errorf("deleting the claim this start created: %w", err))
		}
	}
	if len(errs) > 0 {
		serr.Err = errors.Join(append([]error{serr.Err}, errs...)...)
	}
	return serr
}

// waitReady waits, woken by the reflector's subscription (no sleep
// loops), until the pod ns/name of uid is ready, and returns it as the
// cache has it. It ends early, with a reason, when a
// container waits for a fatal reason or its image pull has failed twice,
// when the pod ends, and when the pod is deleted or replaced by someone
// else; start_timeout bounds it. The pod's events feed the progress
// meanwhile.
func (s *Spawner) waitReady(ctx context.Context, cfg *kubespawner.Config, pods *reflector.Pods, events *reflector.Events,
	sub *reflector.Subscription, ns, name string, uid types.UID, em *emitter) (*reflector.Pod, Reason, error) {
	wctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout.Duration())
	defer cancel()
	var fw *eventForwarder
	if events != nil {
		fw = &eventForwarder{em: em, uid: uid, shape: s.eventShaper(cfg)}
		if em.inline {
			sub.OnEvent(fw.fromHandler)
			defer sub.OnEvent(nil)
		}
	}
	key := reflector.PodKey(ns, name) // built once: the loop reads the pod on every change
	pulls := newPullTracker(2)
	var slow <-chan time.Time
	if after := cfg.SlowSpawnMessageAfter.Duration(); after > 0 {
		slow = s.b.clock.After(after)
	}
	// A pod not yet in the cache is normal for a moment; one that never
	// shows up may have been deleted before the cache saw it, so the API
	// server is asked after a while.
	missing := s.b.clock.After(5 * time.Second)
	began := s.b.clock.Now()
	var phaseCheck <-chan time.Time // wakes the loop to check the phase bounds
	inCache := false
	var grace <-chan time.Time // running once the pod is ready without events seen
	graceOver := false
	eventsDenied := false
	for {
		if events != nil {
			// Those the handler has not forwarded yet: events from before
			// the subscription or the pod's uid, or all of them when the
			// handler does not forward. Never waiting for the event
			// informer: the start needs only the pod, and events that
			// cannot be read (a Role without list or watch on events)
			// must not hold it to start_timeout.
			if events.Synced() {
				if evs, err := events.ForUID(wctx, uid); err == nil {
					for _, e := range evs {
						fw.forward(e)
					}
				}
			}
			if err := events.Denied(); err != nil && !eventsDenied {
				eventsDenied = true
				em.note(-1, fmt.Sprintf("The pod's events cannot be shown: %v", err))
			}
		}
		pod, ok, err := pods.GetByKey(wctx, key)
		ours := inCache
		if err == nil && !inCache && (!ok || pod.UID != uid) {
			// Not ours in the cache: had the cache ours before (its add
			// does not wake the start: startWakes)? The subscription
			// hears of a change only after the cache has it, so if Seen
			// says so, a second read that misses it means deleted or
			// replaced. (Seen before every read would be simpler, but it
			// takes the Registry's subscription lock on every wake-up.)
			if ours = sub.Seen(pods, uid); ours {
				pod, ok, err = pods.GetByKey(wctx, key)
			}
		}
		switch {
		case err != nil:
			return nil, s.waitReason(ctx, wctx), s.waitErr(ctx, wctx, cfg, err)
		case ok && pod.UID == uid:
			inCache = true
			if msg, fatal := pulls.observe(pod); fatal {
				return nil, ReasonErrImagePull, errors.New(msg)
			}
			if reason, msg := fatalReason(pod, cfg.FatalReasons, EnvSecretName(name)); reason != "" {
				return nil, reason, errors.New(msg)
			}
			if pod.DeletionTimestamp != nil {
				return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s is being deleted", ErrPodGone, pod.Namespace, pod.Name)
			}
			if x := podExit(pod); x.Exited {
				return nil, x.Reason, fmt.Errorf("the pod ended before it was ready: %s", x.Message)
			}
			if reason, next, err := s.phaseBound(cfg, pod, began); reason != "" {
				return nil, reason, err
			} else if next > 0 && phaseCheck == nil {
				phaseCheck = s.b.clock.After(next)
			}
			if isReady(pod) {
				// A kubelet reports Scheduled, Pulled and Started before
				// Ready, but the event informer can lag the pod informer
				// under load; a progress stream without any pod event
				// tells the user nothing. So a start that has seen none
				// waits for them a moment (woken by the subscription),
				// never longer than eventGrace (short: it is added to the start
				// time of exactly those starts whose events lag). A start
				// without an OnProgress callback has nobody to show them
				// to, and does not wait.
				if events == nil || graceOver || fw.any() {
					return pod, "", nil
				}
				// From here an event wakes the start; one forwarded
				// before that was counted by any, and one forwarded
				// meanwhile is counted now.
				fw.graceWait.Store(true)
				if fw.any() {
					return pod, "", nil
				}
				if grace == nil {
					grace = s.b.clock.After(eventGrace)
				}
			}
		case !ours:
			// Ours is not in the cache yet, and the cache may still hold an
			// older pod of this name (its deletion not yet seen). A pod
			// replaced before the cache ever showed ours is caught by the
			// API check below.
		case ok:
			return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s now has uid %s, not %s", ErrPodGone, pod.Namespace, pod.Name, pod.UID, uid)
		default:
			return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s was deleted", ErrPodGone, ns, name)
		}
		select {
		case <-sub.C():
			if s.b.woken != nil {
				s.b.woken()
			}
		case <-grace:
			graceOver = true
		case <-phaseCheck:
			phaseCheck = nil
		case <-missing:
			if !inCache && !sub.Seen(pods, uid) {
				if gone, err := s.podGone(wctx, ns, name, uid); err == nil && gone {
					return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s was deleted", ErrPodGone, ns, name)
				}
				missing = s.b.clock.After(5 * time.Second)
			}
		case <-slow:
			slow = nil
			em.note(-1, fmt.Sprintf("The server is taking longer than %s to start; still waiting (up to %s).",
				cfg.SlowSpawnMessageAfter.Duration(), cfg.StartTimeout.Duration()))
		case <-wctx.Done():
			return nil, s.waitReason(ctx, wctx), s.waitErr(ctx, wctx, cfg, wctx.Err())
		}
	}
}

// phaseBound checks a starting pod against pending_timeout (not
// scheduled since the start began) and creating_timeout (scheduled, not
// running since it was scheduled): a reason and error when one is past,
// else how long until the nearest one is (0: none applies).
func (s *Spawner) phaseBound(cfg *kubespawner.Config, pod *reflector.Pod, began time.Time) (Reason, time.Duration, error) {
	now := s.b.clock.Now()
	scheduled := pod.Scheduled.Status == corev1.ConditionTrue
	switch {
	case !scheduled && cfg.PendingTimeout > 0:
		left := cfg.PendingTimeout.Duration() - now.Sub(began)
		if left <= 0 {
			return ReasonPendingTimeout, 0, fmt.Errorf("pod %s/%s was not scheduled within pending_timeout (%s): %s",
				pod.Namespace, pod.Name, cfg.PendingTimeout.Duration(), pod.Scheduled.Message)
		}
		return "", left, nil
	case scheduled && pod.Phase == corev1.PodPending && cfg.CreatingTimeout > 0:
		since := pod.Scheduled.LastTransitionTime.Time
		if since.IsZero() || since.Before(began) {
			since = began
		}
		left := cfg.CreatingTimeout.Duration() - now.Sub(since)
		if left <= 0 {
			return ReasonCreatingTimeout, 0, fmt.Errorf("pod %s/%s was scheduled but its containers were not running within creating_timeout (%s)",
				pod.Namespace, pod.Name, cfg.CreatingTimeout.Duration())
		}
		return "", left, nil
	}
	return "", 0, nil
}

// eventForwarder sends a start's pod events to its progress once each
// (by the event's uid and count), from the start's goroutine and, for the
// Manager's starts (emitter.inline: a Stream alone receives them), from the event informer's handler
// as each event arrives, so that the start need not wake for it.
type eventForwarder struct {
	em  *emitter
	uid types.UID // the start's pod
	// shape rewrites or drops an event's message (eventShaper); nil
	// shows each as it is.
	shape func(*corev1.Event) (string, bool)
	// graceWait is set while a ready start waits for its first event:
	// then an event wakes it.
	graceWait atomic.Bool

	mu   sync.Mutex // guards seen
	seen map[occurrence]bool
}

// occurrence is one occurrence of an event: its uid and count.
type occurrence struct {
	uid   types.UID
	count int32
}

// forward sends e to the progress unless it was sent before.
func (fw *eventForwarder) forward(e *corev1.Event) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	o := occurrence{e.UID, e.Count}
	if fw.seen[o] {
		return
	}
	if fw.seen == nil {
		fw.seen = map[occurrence]bool{}
	}
	fw.seen[o] = true
	message, keep := e.Message, true
	if fw.shape != nil {
		message, keep = fw.shape(e)
	}
	if keep {
		fw.em.event(e, message)
	}
}

// eventShaper is what the start's progress shows of an event:
// event_message_rules, then the EventMessage hook; nil when neither is
// set.
func (s *Spawner) eventShaper(cfg *kubespawner.Config) func(*corev1.Event) (string, bool) {
	rules := compileEventRules(cfg.EventMessageRules)
	hook := s.b.hooks.EventMessage
	if len(rules) == 0 && hook == nil {
		return nil
	}
	return func(e *corev1.Event) (string, bool) {
		message, keep := rules.message(e.Reason, e.Message)
		if keep && hook != nil {
			message, keep = hook(s, e, message)
		}
		return message, keep
	}
}

// any reports whether an event has been sent.
func (fw *eventForwarder) any() bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.seen) > 0
}

// fromHandler is the subscription's OnEvent function: it forwards an
// event of the start's pod and wakes the start only while it waits for
// its first event. An event of another pod of the name, or without a uid,
// does not concern it.
func (fw *eventForwarder) fromHandler(e *corev1.Event) bool {
	if e.InvolvedObject.UID != fw.uid {
		// Another pod's, or one without a uid, which the start does not
		// follow (events.ForUID does not return it) either way.
		return false
	}
	fw.forward(e)
	return fw.graceWait.Load()
}

// eventGrace bounds how long a ready pod's start waits for its first pod
// event to reach the progress stream.
const eventGrace = 300 * time.Millisecond

// waitReason is Timeout when start_timeout (not the caller) ended the wait.
func (s *Spawner) waitReason(ctx, wctx context.Context) Reason {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return ReasonTimeout
	}
	return ""
}

func (s *Spawner) waitErr(ctx, wctx context.Context, cfg *kubespawner.Config, err error) error {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (%s)", ErrStartTimeout, cfg.StartTimeout.Duration())
	}
	return err
}

// Resume waits for a server whose pod already exists (found after a
// restart, or left by a detached Start) to become ready, as the last step
// of Start does, and returns its URL. The State (LoadState or
// StateFromPod) names the pod. Like Start it reports progress to
// opts.OnProgress (the other fields of opts are not used), can be
// cancelled by Stop and Close, and deletes the pod when the server fails
// (but not when detached). Without a pod it returns ErrNoPod.
func (s *Spawner) Resume(ctx context.Context, opts StartOptions) (string, error) {
	return s.operate(ctx, &opts, s.resume)
}

func (s *Spawner) resume(ctx context.Context, _ *StartOptions, em *emitter) (string, error) {
	st := s.State()
	run := &startRun{ns: st.Namespace, name: st.PodName}
	fail := func(step Step, reason Reason, err error) error {
		return s.failStart(ctx, run, step, reason, err)
	}
	pods, err := s.podsHandle(ctx, st.Namespace)
	if err != nil {
		return "", fail(StepWatch, "", err)
	}
	var events *reflector.Events
	if boolOr(s.b.cfg.EventsEnabled, true) && em.followed() {
		if events, err = s.eventsHandle(ctx, st.Namespace); err != nil {
			return "", fail(StepWatch, "", err)
		}
	}
	sub := s.b.registry.SubscribeIf(st.Namespace, st.PodName, startWakes(s.b.cfg.FatalReasons))
	defer sub.Close()
	pod, ok, err := pods.Get(ctx, st.Namespace, st.PodName)
	if err != nil {
		return "", fail(StepWatch, "", err)
	}
	if !ok {
		run.ns = "" // nothing to clean up
		return "", fail(StepWait, ReasonPodGone, fmt.Errorf("%w: pod %s/%s", ErrNoPod, st.Namespace, st.PodName))
	}
	if err := s.checkCachedPodOwner(pod); err != nil {
		run.ns = ""
		return "", fail(StepWait, ReasonCollision, err)
	}
	run.startID, run.pod = pod.Annotations.Get(StartIDAnnotation), pod.UID
	if rec, ok := StateFromPod(pod); ok {
		s.LoadState(rec)
	}
	em.note(0, "Following the start of pod "+st.Namespace+"/"+st.PodName)
	ready, reason, err := s.waitReady(ctx, &s.b.cfg, pods, events, sub, pod.Namespace, pod.Name, pod.UID, em)
	if err != nil {
		return "", fail(StepWait, reason, err)
	}
	return s.finishReady(ready), nil
}
