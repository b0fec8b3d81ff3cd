package testcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitForPod watches one pod until cond returns true, returning the pod
// that satisfied it. A deleted pod is passed to cond as nil. It fails when
// ctx ends or cond returns an error. It lists first, so a pod that already
// satisfies cond returns at once.
func (c *Cluster) WaitForPod(ctx context.Context, namespace, name string, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	pods := c.Client.CoreV1().Pods(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return pods.Watch(ctx, opts)
		},
	}
	var last *corev1.Pod
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, func(store cache.Store) (bool, error) {
		if len(store.List()) == 0 {
			return cond(nil)
		}
		return false, nil
	}, func(e watch.Event) (bool, error) {
		pod, _ := e.Object.(*corev1.Pod)
		if e.Type == watch.Deleted {
			return cond(nil)
		}
		last = pod
		return cond(pod)
	})
	if err != nil {
		state := "never seen"
		if last != nil {
			state = fmt.Sprintf("last phase %q", last.Status.Phase)
		}
		return nil, fmt.Errorf("waiting for pod %s/%s (%s): %w", namespace, name, state, err)
	}
	if ev == nil {
		return nil, nil
	}
	pod, _ := ev.Object.(*corev1.Pod)
	if ev.Type == watch.Deleted {
		return nil, nil
	}
	return pod, nil
}

// PodRunning is a WaitForPod condition: phase Running with a pod IP.
func PodRunning(p *corev1.Pod) (bool, error) {
	return p != nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
}

// PodGone is a WaitForPod condition: the pod no longer exists.
func PodGone(p *corev1.Pod) (bool, error) { return p == nil, nil }
