package spawner

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/reflector"
)

// waitReady waits, woken by the reflector's subscription (no sleep
// loops), until the pod ns/name of uid is ready, and returns it as the
// cache has it. It ends early, with a reason, when a
// container waits for a fatal reason or its image pull has failed twice,
// when the pod ends, and when the pod is deleted or replaced by someone
// else; start_timeout bounds it. The pod's events feed the progress
// meanwhile.
func (s *Spawner) waitReady(ctx context.Context, cfg *Config, pods *reflector.Pods, events *reflector.Events,
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
func (s *Spawner) phaseBound(cfg *Config, pod *reflector.Pod, began time.Time) (Reason, time.Duration, error) {
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

func (s *Spawner) waitErr(ctx, wctx context.Context, cfg *Config, err error) error {
	if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (%s)", ErrStartTimeout, cfg.StartTimeout.Duration())
	}
	return err
}
