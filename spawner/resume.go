package spawner

import (
	"context"
	"fmt"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"go.opentelemetry.io/otel/trace"
)

// Resume waits for a server whose pod already exists (found after a
// restart, or left by a detached Start) to become ready, as the last step
// of Start does, and returns its URL. The State (LoadState or
// StateFromPod) names the pod. Like Start it reports progress to
// opts.OnProgress (the other fields of opts are not used), can be
// cancelled by Stop and Close, and deletes the pod when the server fails
// (but not when detached). Without a pod it returns ErrNoPod.
func (s *Spawner) Resume(ctx context.Context, opts StartOptions) (string, error) {
	return s.operate(ctx, phase.OpResume, &opts, s.resume)
}

func (s *Spawner) resume(ctx context.Context, opts *StartOptions, em *emitter) (string, error) {
	st := s.State()
	run := &startRun{em: em, ns: st.Namespace, name: st.PodName, tl: phase.NewTimeline(s.b.clock.Now), onPhase: opts.OnPhase}
	fail := func(step Step, reason Reason, err error) error {
		return s.failStart(ctx, run, step, reason, err)
	}
	pods, err := s.podsHandle(ctx, st.Namespace)
	if err != nil {
		return "", fail(StepWatch, "", err)
	}
	var events *reflector.Events
	if boolOr(s.b.cfg.EventsEnabled, true) && (em.followed() || s.b.tracer.On()) {
		if events, err = s.startEvents(ctx, st.Namespace); err != nil {
			return "", fail(StepWatch, "", err)
		}
		defer events.Release()
	}
	sub := s.b.registry.SubscribeIf(st.Namespace, st.PodName, run.tl.Watch(startWakes(s.b.cfg.FatalReasons), s.b.cfg.UnschedulableAfter() > 0))
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
	run.startID, run.pod = pod.Annotations.Get(naming.AnnotationStartID), pod.UID
	run.tl.Created(pod.UID, "")
	run.tl.Pod(pod)
	s.podAttrs(trace.SpanFromContext(ctx), pod.Namespace, pod.Name)
	if rec, ok := StateFromPod(pod); ok {
		s.LoadState(rec)
	}
	em.note(0, "Following the start of pod "+st.Namespace+"/"+st.PodName)
	ready, reason, err := s.waitReady(ctx, &readyWait{
		cfg: &s.b.cfg, startHandles: startHandles{pods: pods, events: events, sub: sub}, em: em, tl: run.tl,
		ns: pod.Namespace, name: pod.Name, uid: pod.UID,
	})
	s.endWait(ctx, run, err)
	if err != nil {
		return "", fail(StepWait, reason, err)
	}
	return s.finishReady(ready), nil
}
