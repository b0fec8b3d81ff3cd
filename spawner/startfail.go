package spawner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spawnkit/spawnkit/naming"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
// failed one deletes its pod, and the claim it created unless the pod
// got as far as the wait with the claim bound (an image that cannot be
// pulled: the next start needs the same claim, which may hold the
// user's first files). A claim still pending goes: it holds nothing, and
// one that cannot bind (a wrong storage_class) would fail every later
// start of the server.
func (s *Spawner) failStart(ctx context.Context, run *startRun, step Step, reason Reason, err error) error {
	if reason == "" {
		reason = failureReason(err)
	}
	serr := &StartError{Server: s.server, Step: step, Reason: reason, Err: err}
	// A start that failed after its pod's create and before its wait
	// still shows the phases it saw (none failed: the step did).
	s.endWait(ctx, run, nil)
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
	if !cancelled && run.claim != "" && (step != StepWait || !s.claimBound(cctx, run)) {
		if err := s.deleteClaim(cctx, run.ns, run.claimName, run.claim); err != nil {
			errs = append(errs, fmt.Errorf("deleting the claim this start created: %w", err))
		}
	}
	if len(errs) > 0 {
		serr.Err = errors.Join(append([]error{serr.Err}, errs...)...)
	}
	return serr
}

// cleanupPod deletes the pod a failed or cancelled start created: the one
// it knows by UID, or, when a create's outcome was uncertain, a pod of
// that name carrying this start's id, watched for a while in case the
// create is still landing.
func (s *Spawner) cleanupPod(ctx context.Context, run *startRun) error {
	pods, release, err := s.podsHandleAfterClose(ctx, run.ns)
	if err != nil {
		return err
	}
	defer release()
	sub := s.b.registry.Subscribe(run.ns, run.name)
	defer sub.Close()
	w := podWatch{pods: pods, sub: sub, ns: run.ns, name: run.name}
	if run.pod != "" {
		return s.deletePod(ctx, w, 0, run.pod)
	}
	if !run.createUncertain || run.startID == "" {
		return nil
	}
	// A create whose answer was lost may still land: look for it for up
	// to one request timeout.
	deadline := s.b.clock.After(s.b.cfg.K8sAPIRequestTimeout.Duration() + 2*time.Second)
	for {
		var found *corev1.Pod
		err := s.call(ctx, func(ctx context.Context) error {
			p, err := s.b.client.CoreV1().Pods(run.ns).Get(ctx, run.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil && p.Annotations[naming.AnnotationStartID] == run.startID {
				found = p
			}
			return err
		})
		if err != nil {
			return err
		}
		if found != nil {
			return s.deletePod(ctx, w, 0, found.UID)
		}
		select {
		case <-sub.C():
		case <-deadline:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// claimBound reports whether the claim run created is bound (kept after
// a failed wait). When that cannot be read it says so: keeping a claim
// is the safe side.
func (s *Spawner) claimBound(ctx context.Context, run *startRun) bool {
	var bound bool
	err := s.call(ctx, func(ctx context.Context) error {
		c, err := s.b.client.CoreV1().PersistentVolumeClaims(run.ns).Get(ctx, run.claimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		bound = c.UID != run.claim || c.Status.Phase == corev1.ClaimBound
		return nil
	})
	return bound || err != nil && !apierrors.IsNotFound(err)
}
