package spawner

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/reflector"
)

// podWatch is a pod name and what a caller waits on it with: the pods
// informer of its namespace and a subscription to the name's changes.
type podWatch struct {
	pods     *reflector.Pods
	sub      *reflector.Subscription
	ns, name string
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
	err := s.call(ctx, func(ctx context.Context) error {
		err := s.b.client.CoreV1().Pods(w.ns).Delete(ctx, w.name, opts)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.waitPodGone(ctx, w, uid)
}

// waitPodGone waits until the cache has no pod of w's name (with uid,
// when set), woken by the subscription.
func (s *Spawner) waitPodGone(ctx context.Context, w podWatch, uid types.UID) error {
	for {
		p, ok, err := w.pods.Get(ctx, w.ns, w.name)
		if err != nil {
			return err
		}
		if !ok || (uid != "" && p.UID != uid) {
			return nil
		}
		select {
		case <-w.sub.C():
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s/%s to go: %w", w.ns, w.name, context.Cause(ctx))
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
