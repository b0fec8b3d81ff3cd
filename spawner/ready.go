package spawner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/reflector"
)

// readyWait is one wait for a pod to be ready: what it waits for, set by
// the caller, and what the wait keeps between wake-ups, set by waitReady.
type readyWait struct {
	cfg *kubespawner.Config
	// startHandles are the start's informer handles and its subscription
	// to the pod; events nil: the pod's events are not followed.
	startHandles
	ns, name string
	uid      types.UID // the pod waited for
	em       *emitter
	tl       *phase.Timeline // what the start has seen of the pod

	fw           *eventForwarder // with events
	key          string          // built once: the loop reads the pod on every change
	pulls        *pullTracker
	began        time.Time
	inCache      bool             // the cache has shown the pod
	eventsDenied bool             // said once: the events cannot be read
	slow         <-chan time.Time // slow_spawn_message_after
	missing      <-chan time.Time // asks the API server about a pod the cache has not shown
	phaseCheck   <-chan time.Time // wakes the loop to check the phase bounds
	grace        <-chan time.Time // running once the pod is ready without events seen
	graceOver    bool
	tick         <-chan time.Time // the next progress message saying what the start waits for
	unsched      <-chan time.Time // unschedulable_timeout of a refused pod runs out
}

// waitReady waits, woken by the reflector's subscription (no sleep
// loops), until the pod w.ns/w.name of w.uid is ready, and returns it as
// the cache has it. It ends early, with a reason, when a
// container waits for a fatal reason or its image pull has failed twice,
// when the pod ends, and when the pod is deleted or replaced by someone
// else; start_timeout bounds it. The pod's events feed the progress
// meanwhile.
func (s *Spawner) waitReady(ctx context.Context, w *readyWait) (*reflector.Pod, Reason, error) {
	wctx, cancel := context.WithTimeout(ctx, w.cfg.StartTimeout.Duration())
	defer cancel()
	if w.events != nil {
		w.fw = &eventForwarder{em: w.em, uid: w.uid, shape: s.eventShaper(w.cfg), tl: w.tl}
		w.sub.OnEvent(w.fw.fromHandler)
		defer w.sub.OnEvent(nil)
	}
	if w.em.followed() {
		w.tick = s.b.clock.After(s.b.progressInterval())
	}
	w.key = reflector.PodKey(w.ns, w.name)
	w.pulls = newPullTracker(2)
	if after := w.cfg.SlowSpawnMessageAfter.Duration(); after > 0 {
		w.slow = s.b.clock.After(after)
	}
	// A pod not yet in the cache is normal for a moment; one that never
	// shows up may have been deleted before the cache saw it, so the API
	// server is asked after a while.
	w.missing = s.b.clock.After(5 * time.Second)
	w.began = s.b.clock.Now()
	for {
		if w.events != nil {
			w.forwardEvents(wctx)
		}
		// Neither a pod nor an error: not ready yet.
		if pod, reason, err := s.readyCheck(ctx, wctx, w); pod != nil || err != nil {
			return pod, reason, err
		}
		if reason, err := s.readySleep(ctx, wctx, w); err != nil {
			return nil, reason, err
		}
	}
}

// forwardEvents sends the progress, and the timeline, the pod's events
// the handler has not seen: events from before the subscription or the
// pod's uid (a kubelet's Pulling can come while the start still creates
// the pod's Secret), or all of them when the handler does not forward.
// It never waits for the
// event informer: the start needs only the pod, and events that cannot be
// read (a Role without list or watch on events) must not hold it to
// start_timeout.
func (w *readyWait) forwardEvents(wctx context.Context) {
	if w.events.Synced() {
		if evs, err := w.events.ForUID(wctx, w.uid); err == nil {
			for _, e := range evs {
				w.fw.time(e)
				w.fw.forward(e)
			}
		}
	}
	if err := w.events.Denied(); err != nil && !w.eventsDenied {
		w.eventsDenied = true
		w.em.note(-1, fmt.Sprintf("The pod's events cannot be shown: %v", err))
	}
}

// readyCheck reads the pod from the cache: it returns the pod when it is
// ready, a reason and an error when the wait is over without it, and
// neither while the wait goes on.
func (s *Spawner) readyCheck(ctx, wctx context.Context, w *readyWait) (*reflector.Pod, Reason, error) {
	pod, ok, err := w.pods.GetByKey(wctx, w.key)
	ours := w.inCache
	if err == nil && !w.inCache && (!ok || pod.UID != w.uid) {
		// Not ours in the cache: had the cache ours before (its add does
		// not wake the start: startWakes)? The subscription hears of a
		// change only after the cache has it, so if Seen says so, a
		// second read that misses it means deleted or replaced. (Seen
		// before every read would be simpler, but it takes the
		// Registry's subscription lock on every wake-up.)
		if ours = w.sub.Seen(w.pods, w.uid); ours {
			pod, ok, err = w.pods.GetByKey(wctx, w.key)
		}
	}
	switch {
	case err != nil:
		return nil, s.waitReason(ctx, wctx), s.waitErr(ctx, wctx, w.cfg, err)
	case ok && pod.UID == w.uid:
		w.inCache = true
		return s.judgePod(w, pod)
	case !ours:
		// Ours is not in the cache yet, and the cache may still hold an
		// older pod of this name (its deletion not yet seen). A pod
		// replaced before the cache ever showed ours is caught by the
		// API check (readySleep).
		return nil, "", nil
	case ok:
		return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s now has uid %s, not %s", ErrPodGone, pod.Namespace, pod.Name, pod.UID, w.uid)
	default:
		return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s was deleted", ErrPodGone, w.ns, w.name)
	}
}

// judgePod is readyCheck's verdict on the pod waited for, as the cache
// has it: ready (returned), failed (a reason and an error), or neither.
func (s *Spawner) judgePod(w *readyWait, pod *reflector.Pod) (*reflector.Pod, Reason, error) {
	if msg, fatal := w.pulls.observe(pod); fatal {
		return nil, ReasonErrImagePull, errors.New(msg)
	}
	if reason, msg := fatalReason(pod, w.cfg.FatalReasons, EnvSecretName(w.name)); reason != "" {
		return nil, reason, errors.New(msg)
	}
	if pod.DeletionTimestamp != nil {
		return nil, ReasonPodGone, fmt.Errorf("%w: pod %s/%s is being deleted", ErrPodGone, pod.Namespace, pod.Name)
	}
	if x := podExit(pod); x.Exited {
		return nil, x.Reason, fmt.Errorf("the pod ended before it was ready: %s", x.Message)
	}
	if reason, next, err := s.phaseBound(w.cfg, pod, w.began); reason != "" {
		return nil, reason, err
	} else if next > 0 && w.phaseCheck == nil {
		w.phaseCheck = s.b.clock.After(next)
	}
	// The cache's pod too: a refusal the informer delivered before the
	// create returned (or a create's retry found the pod) is not lost.
	w.tl.Pod(pod)
	if reason, err := s.unschedulableBound(w); reason != "" {
		return nil, reason, err
	}
	if !isReady(pod) {
		return nil, "", nil
	}
	// A kubelet reports Scheduled, Pulled and Started before Ready, but
	// the event informer can lag the pod informer under load; a progress
	// stream without any pod event tells the user nothing. So a start
	// that has seen none waits for them a moment (woken by the
	// subscription), never longer than eventGrace (short: it is added to
	// the start time of exactly those starts whose events lag). A start
	// without an OnProgress callback has nobody to show them to, and
	// does not wait.
	if w.events == nil || !w.em.followed() || w.graceOver || w.fw.any() {
		return pod, "", nil
	}
	// From here an event wakes the start; one forwarded before that was
	// counted by any, and one forwarded meanwhile is counted now.
	w.fw.graceWait.Store(true)
	if w.fw.any() {
		return pod, "", nil
	}
	if w.grace == nil {
		w.grace = s.b.clock.After(eventGrace)
	}
	return nil, "", nil
}

// readySleep waits for the next change that may end the wait: the pod's
// (the subscription), a timer's, or the end of wctx. It returns a reason
// and an error when the wait is over.
func (s *Spawner) readySleep(ctx, wctx context.Context, w *readyWait) (Reason, error) {
	select {
	case <-w.sub.C():
		if s.b.woken != nil {
			s.b.woken()
		}
	case <-w.grace:
		w.graceOver = true
	case <-w.phaseCheck:
		w.phaseCheck = nil
	case <-w.unsched:
		w.unsched = nil
	case <-w.tick:
		if msg := w.tl.Now(); msg != "" {
			w.em.note(-1, msg)
		}
		w.tick = s.b.clock.After(s.b.progressInterval())
	case <-w.missing:
		if !w.inCache && !w.sub.Seen(w.pods, w.uid) {
			if gone, err := s.podGone(wctx, w.ns, w.name, w.uid); err == nil && gone {
				return ReasonPodGone, fmt.Errorf("%w: pod %s/%s was deleted", ErrPodGone, w.ns, w.name)
			}
			w.missing = s.b.clock.After(5 * time.Second)
		}
	case <-w.slow:
		w.slow = nil
		w.em.note(-1, fmt.Sprintf("The server is taking longer than %s to start; still waiting (up to %s).",
			w.cfg.SlowSpawnMessageAfter.Duration(), w.cfg.StartTimeout.Duration()))
	case <-wctx.Done():
		return s.waitReason(ctx, wctx), s.waitErr(ctx, wctx, w.cfg, wctx.Err())
	}
	return "", nil
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

// unschedulableBound ends the wait when the scheduler has refused the
// pod for unschedulable_timeout and no autoscaler said it adds a node.
// Without readable events nothing can say an autoscaler is on its way,
// so it then leaves the start to pending_timeout and start_timeout.
func (s *Spawner) unschedulableBound(w *readyWait) (Reason, error) {
	limit := w.cfg.UnschedulableAfter()
	if limit <= 0 || w.events == nil || w.eventsDenied || !w.events.Synced() {
		return "", nil
	}
	since, msg, scaleUp := w.tl.Unschedulable()
	if since.IsZero() || scaleUp {
		return "", nil
	}
	left := limit - s.b.clock.Since(since)
	if left <= 0 {
		return ReasonUnschedulable, fmt.Errorf("pod %s/%s could not be scheduled for unschedulable_timeout (%s), and no autoscaler said it adds a node: %s",
			w.ns, w.name, limit, msg)
	}
	if w.unsched == nil {
		w.unsched = s.b.clock.After(left)
	}
	return "", nil
}

// progressEvery is how often a start's progress says what it waits for
// and for how long ("Pulling image x on node n for 42 s").
const progressEvery = 10 * time.Second

func (f *Factory) progressInterval() time.Duration {
	if f.progressEvery > 0 {
		return f.progressEvery
	}
	return progressEvery
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
