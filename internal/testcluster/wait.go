package testcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// WaitForPod watches one pod until cond returns true, returning the pod
// that satisfied it. A deleted pod is passed to cond as nil. It fails when
// ctx ends or cond returns an error. It lists first, so a pod that already
// satisfies cond returns at once.
//
// A list and a watch from its resourceVersion, again after the watch
// ends, rather than client-go's watchtools.UntilWithSync: its event
// processor can miss the wake-up of its stop (the condition variable is
// signalled without its lock) and then waits for ever, a goroutine that
// goleak reports after the tests.
func (c *Cluster) WaitForPod(ctx context.Context, namespace, name string, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	pods := c.Client.CoreV1().Pods(namespace)
	var last *corev1.Pod
	fail := func(err error) (*corev1.Pod, error) {
		state := "never seen"
		if last != nil {
			state = fmt.Sprintf("last phase %q", last.Status.Phase)
		}
		return nil, fmt.Errorf("waiting for pod %s/%s (%s): %w", namespace, name, state, err)
	}
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			return fail(err)
		}
		var pod *corev1.Pod
		if len(list.Items) > 0 {
			pod = &list.Items[0]
			last = pod
		}
		if ok, err := cond(pod); err != nil || ok {
			if err != nil {
				return fail(err)
			}
			return pod, nil
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			return fail(err)
		}
		pod, done, err := follow(ctx, w, &last, cond)
		w.Stop()
		if err != nil {
			return fail(err)
		}
		if done {
			return pod, nil
		}
		// The watch ended (expired, or the server closed it): list again.
	}
}

// follow passes w's events to cond until it returns true (done), ctx
// ends or w ends (done false: list again).
func follow(ctx context.Context, w watch.Interface, last **corev1.Pod, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case e, open := <-w.ResultChan():
			if !open || e.Type == watch.Error {
				return nil, false, nil
			}
			pod, isPod := e.Object.(*corev1.Pod)
			if !isPod || e.Type == watch.Bookmark {
				continue
			}
			if e.Type == watch.Deleted {
				ok, err := cond(nil)
				return nil, ok, err
			}
			*last = pod
			if ok, err := cond(pod); err != nil || ok {
				return pod, ok, err
			}
		}
	}
}

// PodRunning is a WaitForPod condition: phase Running with a pod IP.
func PodRunning(p *corev1.Pod) (bool, error) {
	return p != nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
}

// PodGone is a WaitForPod condition: the pod no longer exists.
func PodGone(p *corev1.Pod) (bool, error) { return p == nil, nil }
