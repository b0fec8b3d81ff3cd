package spawner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// StopOptions configure Stop.
type StopOptions struct {
	// Now deletes with a grace period of 0 instead of delete_grace_period.
	Now bool
	// OnProgress, when set, is called with Stop's progress: stopping,
	// then stopped (Ready false, Progress 100) or failed.
	OnProgress func(ProgressEvent)
	// Progress, when set, receives the same events.
	Progress *Stream
}

// Stop stops the server: it cancels a Start or Resume in flight (which
// then returns a *StartError with reason Cancelled wrapping
// ErrStartCancelled, and deletes its pod), then deletes the pod with
// delete_grace_period (0 with Now) and waits until the API server no
// longer has it, all bounded by ctx. It costs the API server one
// request, the delete: whose the pod is comes from the shared cache. A pod that is already gone is
// success, so Stop is idempotent; a pod of another server under this
// server's name is a *CollisionError and is not touched. The claim is
// never touched. Waiting for the pod to go is bounded by stop_timeout
// (start_timeout by default, as KubeSpawner waits): a pod that stays (a
// finalizer nobody removes) ends Stop with an error wrapping
// ErrStopTimeout that names it.
func (s *Spawner) Stop(ctx context.Context, opts StopOptions) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.cancelOpsLocked(ErrStartCancelled)
	s.mu.Unlock()
	ctx, span := s.opSpan(ctx, phase.OpStop)
	defer span.End()
	if st := s.State(); st.PodName != "" {
		s.podAttrs(span, st.Namespace, st.PodName)
	}
	em := newEmitter(opts.OnProgress, opts.Progress, s.b.clock)
	em.traceID = phase.TraceID(ctx)
	em.note(0, "Stopping the server")
	if err := s.acquire(ctx); err != nil {
		s.b.tracer.Fail(span, "", err)
		em.finishStop(err)
		return err
	}
	defer s.release()
	limit := s.b.cfg.StopTimeout
	if limit <= 0 {
		limit = s.b.cfg.StartTimeout
	}
	sctx, cancel := context.WithTimeoutCause(ctx, limit.Duration(), ErrStopTimeout)
	defer cancel()
	err := s.stop(sctx, opts)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(sctx), ErrStopTimeout) {
		st := s.State()
		err = fmt.Errorf("spawner: pod %s/%s was deleted but is still there after stop_timeout (%s): a finalizer nobody removes, or a node that does not answer: %w",
			st.Namespace, st.PodName, limit.Duration(), ErrStopTimeout)
	}
	if err != nil {
		s.b.tracer.Fail(span, "", err)
	}
	em.finishStop(err)
	return err
}

func (s *Spawner) stop(ctx context.Context, opts StopOptions) error {
	grace := int64(s.b.cfg.DeleteGracePeriod.Duration() / time.Second)
	if opts.Now {
		grace = 0
	}
	st := s.State()
	return s.stopAt(ctx, st, grace, st.PodName != s.names.Pod || st.Namespace != s.names.Namespace)
}

// stopAt deletes the server's pod at st's names, if there is one, and
// waits until the API server no longer has it. earlier says st's names
// are not today's (a configuration changed since they were used): a pod
// of another server there (one that today's templates give those names)
// then means this server's pod is gone, and is left alone; under today's
// names it is a *CollisionError.
func (s *Spawner) stopAt(ctx context.Context, st State, grace int64, earlier bool) error {
	err := s.stopPodAt(ctx, st, grace)
	var ce *CollisionError
	if earlier && errors.As(err, &ce) {
		return nil
	}
	return err
}

func (s *Spawner) stopPodAt(ctx context.Context, st State, grace int64) error {
	pods, err := s.podsHandle(ctx, st.Namespace)
	if err != nil {
		return err
	}
	sub := s.b.registry.Subscribe(st.Namespace, st.PodName)
	defer sub.Close()
	w := podWatch{pods: pods, sub: sub, ns: st.Namespace, name: st.PodName}
	// The cache says whose the pod is (it keeps the owner annotations),
	// so a stop is one request: the delete, with the cached uid as its
	// precondition, which never touches a newer pod of the name. Only a
	// pod the cache has not seen (a create it has not caught up with) is
	// read from the API server.
	if cached, ok, err := pods.Get(ctx, st.Namespace, st.PodName); err == nil && ok {
		if err := s.checkCachedPodOwner(cached); err != nil {
			return err
		}
		if err := s.deletePod(ctx, w, grace, cached.UID); err != nil {
			return fmt.Errorf("spawner: stopping pod %s/%s: %w", st.Namespace, st.PodName, err)
		}
		return nil
	}
	var pod *corev1.Pod
	err = s.call(ctx, func(ctx context.Context) error {
		p, err := s.b.client.CoreV1().Pods(st.Namespace).Get(ctx, st.PodName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		pod = p
		return err
	})
	if err != nil {
		return fmt.Errorf("spawner: stopping pod %s/%s: %w", st.Namespace, st.PodName, err)
	}
	if pod == nil {
		return s.waitPodGone(ctx, w, "")
	}
	if err := s.checkOwner("Pod", pod, true); err != nil {
		return err
	}
	if err := s.deletePod(ctx, w, grace, pod.UID); err != nil {
		return fmt.Errorf("spawner: stopping pod %s/%s: %w", st.Namespace, st.PodName, err)
	}
	return nil
}

// DeleteForever deletes the server's claim when delete_pvc is on (the
// default): for a named server only when the claim name template names
// the server, so a claim shared with the user's other servers is never
// deleted. A claim of another server is a *CollisionError; a claim
// without owner annotations (KubeSpawner's) is deleted only when this
// server's State records it. Call it after Stop, when the hub deletes the
// server. It waits for an operation in flight, and returns once the claim
// is gone (a claim a pod still mounts stays terminating: then the error,
// when ctx ends, says so, and the deletion stays requested).
func (s *Spawner) DeleteForever(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	if !boolOr(s.b.cfg.DeletePVC, true) {
		return nil
	}
	if s.server.Servername != "" && !pvcTemplateNamesServer(s.b.namer.Options().PVCTemplate) {
		return nil
	}
	st := s.State()
	name := st.PVCName
	if name == "" {
		name = s.names.PVC
	}
	var claim *corev1.PersistentVolumeClaim
	err := s.call(ctx, func(ctx context.Context) error {
		c, err := s.b.client.CoreV1().PersistentVolumeClaims(st.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		claim = c
		return err
	})
	if err != nil || claim == nil {
		return err
	}
	if _, annotated := claim.Annotations[naming.AnnotationUsername]; annotated || st.PVCName != name {
		if err := s.checkOwner("PersistentVolumeClaim", claim, s.server.Servername != ""); err != nil {
			return err
		}
	}
	if err := s.deleteClaim(ctx, st.Namespace, name, claim.UID); err != nil {
		return fmt.Errorf("spawner: deleting claim %s/%s: %w", st.Namespace, name, err)
	}
	return s.waitClaimGone(ctx, st.Namespace, name, claim.UID)
}

// waitClaimGone waits, bounded by ctx, until the claim of uid is gone:
// the pvc-protection finalizer keeps a deleted claim while a pod still
// uses it, and a hub that deletes a user and recreates them must not meet
// the old claim, terminating, under the new server's name. It reads the
// claim at most every second (one GET each; deletion usually takes one).
func (s *Spawner) waitClaimGone(ctx context.Context, ns, name string, uid types.UID) error {
	delay := 50 * time.Millisecond
	for {
		var c *corev1.PersistentVolumeClaim
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			c, err = s.b.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				c, err = nil, nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("spawner: waiting for claim %s/%s to go: %w", ns, name, err)
		}
		if c == nil || c.UID != uid {
			return nil
		}
		t := s.b.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("spawner: claim %s/%s is deleted but still terminating (finalizers %q: a pod still mounts it?): %w",
				ns, name, c.Finalizers, context.Cause(ctx))
		case <-t.C():
		}
		delay = min(2*delay, time.Second)
	}
}

// pvcTemplateNamesServer reports whether a claim template depends on the
// server name.
func pvcTemplateNamesServer(t string) bool {
	for _, f := range []string{"servername", "user_server", "Servername", "UserServer"} {
		if strings.Contains(t, f) {
			return true
		}
	}
	return false
}

// podWatch is a pod name and what a caller waits on it with: the pods
// informer of its namespace and a subscription to the name's changes.
type podWatch struct {
	pods     *reflector.Pods
	sub      *reflector.Subscription
	ns, name string
	// stopped: the wait after a delete is traced (terminating, gone).
	stopped bool
}

// deletePod deletes the pod w names (with a UID precondition when uid is
// set, so a newer pod of the same name is never touched) and waits until
// the cache no longer has it; NotFound and a failed precondition are
// success.
func (s *Spawner) deletePod(ctx context.Context, w podWatch, grace int64, uid types.UID) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace)}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: ptr.To(uid)}
	}
	end := s.step(ctx, phase.Delete, "Pod", w.name)
	err := s.call(ctx, func(ctx context.Context) error {
		err := s.b.client.CoreV1().Pods(w.ns).Delete(ctx, w.name, opts)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
	if end(err); err != nil {
		return err
	}
	w.stopped = s.b.tracer.On()
	return s.waitPodGone(ctx, w, uid)
}

// waitPodGone waits until the cache has no pod of w's name (with uid,
// when set), woken by the subscription.
func (s *Spawner) waitPodGone(ctx context.Context, w podWatch, uid types.UID) error {
	var gone goneTimes
	if w.stopped {
		gone.from = s.b.clock.Now()
		defer func() { s.emitGone(ctx, &gone) }()
	}
	for {
		p, ok, err := w.pods.Get(ctx, w.ns, w.name)
		if err != nil {
			return err
		}
		if !ok || (uid != "" && p.UID != uid) {
			return nil
		}
		if w.stopped && gone.stopped.IsZero() && !anyRunning(p) {
			gone.stopped = s.b.clock.Now()
		}
		select {
		case <-w.sub.C():
		case <-ctx.Done():
			gone.err = fmt.Errorf("waiting for pod %s/%s to go: %w", w.ns, w.name, context.Cause(ctx))
			return gone.err
		}
	}
}

// podGone asks the API server whether the pod ns/name of uid is gone.
func (s *Spawner) podGone(ctx context.Context, ns, name string, uid types.UID) (bool, error) {
	var gone bool
	err := s.call(ctx, func(ctx context.Context) error {
		p, err := s.b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = true
			return nil
		case err != nil:
			return err
		}
		gone = p.UID != uid
		return nil
	})
	return gone, err
}
