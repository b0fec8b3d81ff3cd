package jupyterhub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// podWatch records every change to the pods of the test's namespace,
// from watchPods until the test ends.
type podWatch struct {
	mu sync.Mutex // guards events and ended
	// events are the changes seen, in order.
	events []podEvent
	// ended is set when the watch stopped before the test ended.
	ended error
}

type podEvent struct {
	at       time.Time
	typ      watch.EventType
	name     string
	uid      types.UID
	deleting bool
	restarts int32
}

func watchPods(t *testing.T, c *testcluster.Cluster) *podWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := c.Client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pw := &podWatch{}
	done := make(chan struct{})
	// Owned by the test: its cleanup stops the watch and waits.
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				pw.mu.Lock()
				pw.ended = fmt.Errorf("the pod watch got %s %T", ev.Type, ev.Object)
				pw.mu.Unlock()
				return
			}
			e := podEvent{at: time.Now(), typ: ev.Type, name: pod.Name, uid: pod.UID, deleting: pod.DeletionTimestamp != nil}
			for _, cs := range pod.Status.ContainerStatuses {
				e.restarts += cs.RestartCount
			}
			pw.mu.Lock()
			pw.events = append(pw.events, e)
			pw.mu.Unlock()
		}
		if ctx.Err() == nil {
			pw.mu.Lock()
			pw.ended = errors.New("the pod watch ended early")
			pw.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	return pw
}

// disturbed says what happened to the pod uid before the time before:
// its deletion (begun or done) and container restarts; and whether the
// watch was still running.
func (pw *podWatch) disturbed(uid types.UID, before time.Time) []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []string
	if pw.ended != nil {
		out = append(out, pw.ended.Error())
	}
	for _, e := range pw.events {
		if e.uid != uid || !e.at.Before(before) {
			continue
		}
		switch {
		case e.typ == watch.Deleted:
			out = append(out, fmt.Sprintf("deleted at %s", e.at.Format(time.StampMilli)))
		case e.deleting:
			out = append(out, fmt.Sprintf("being deleted at %s", e.at.Format(time.StampMilli)))
		case e.restarts > 0:
			out = append(out, fmt.Sprintf("%d container restarts at %s", e.restarts, e.at.Format(time.StampMilli)))
		}
	}
	return slices.Compact(out)
}
