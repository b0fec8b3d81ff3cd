package spawner

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// A start's pod that the cache adds (not waking the start: it is
// pending) and then drops with no update in between fails the start at
// the deletion: the subscription's Seen tells the start that the cache
// had its pod. Without it the start would take the missing pod for one
// not yet seen, and its API check after 5 s would find the pod still in
// the fake's tracker: it would wait until start_timeout.
//
// A real API server always sends an update with the deletion timestamp
// first, which wakes the start; a watch that skips it (a relist after the
// watch broke, or both changes read at once by a loaded hub) cannot be
// had on demand, so the pod watch here is driven by hand.
func TestStartSeesItsPodDeletedWithoutAnUpdate(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	f := newHandDriven(t, ctx, "gone")
	podWatch, pods := f.pods, f.podCache

	// The add comes well after the start's first look at the cache, as a
	// loaded informer's would; the pod is pending, so the add does not
	// wake the start.
	pod, started := f.start(t, ctx, hubStart())
	for {
		if _, ok, err := pods.Get(ctx, "ns", pod.Name); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case err := <-started:
			t.Fatalf("Start ended before the cache had its pod: %v", err)
		}
	}
	deleted := time.Now()
	podWatch.Delete(pod)
	select {
	case err := <-started:
		if !errors.Is(err, ErrPodGone) {
			t.Fatalf("Start = %v; want ErrPodGone", err)
		}
		if d := time.Since(deleted); d > time.Second {
			t.Errorf("the start saw its pod's deletion after %s; want at once", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the start did not see its pod's deletion within 3 s")
	}
}

// A Manager's start (inlineProgress) gets its pod's events into its
// progress stream from the event informer's handler, without being woken
// for them; a Spawner's start with an OnProgress of its own is woken and
// forwards them itself, from its goroutine as OnProgress promises. The
// pod and event watches are driven by hand so that nothing else wakes
// the start: the pod stays pending.
func TestStreamStartForwardsEventsWithoutWaking(t *testing.T) {
	for _, inline := range []bool{true, false} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			f := newHandDriven(t, ctx, "progress")
			podWatch, eventWatch, s := f.pods, f.events, f.s
			var wakes atomic.Int32
			s.b.woken = func() { wakes.Add(1) }
			stream := NewStream()
			opts := hubStart()
			// inline: the stream alone (StartOptions.Progress), whose
			// events come from the handler; else OnProgress as well, whose
			// calls come from the start's goroutine.
			opts.Progress = stream
			if !inline {
				opts.OnProgress = func(ProgressEvent) {}
			}
			// The start waits for its pod by now: an event before that
			// would be left for its first look, which wakes it once.
			pod, started := f.start(t, ctx, opts)
			now := metav1.Now()
			eventWatch.Add(&corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + ".1", Namespace: "ns", UID: "event-1", ResourceVersion: "2"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod.Name, UID: pod.UID},
				Reason:         "Scheduled", Message: "Successfully assigned", Type: corev1.EventTypeNormal, Count: 1,
				FirstTimestamp: now, LastTimestamp: now,
			})
			for e := range stream.Events(ctx, 0) {
				if e.Event != nil {
					if e.Event.UID != "event-1" {
						t.Errorf("progress has event %s, want event-1", e.Event.UID)
					}
					break
				}
			}
			if inline && wakes.Load() != 0 {
				t.Errorf("the start was woken %d times; its event came without waking it", wakes.Load())
			}
			if !inline && wakes.Load() == 0 {
				t.Error("a start that forwards events itself was not woken for one")
			}
			podWatch.Delete(pod)
			if err := <-started; !errors.Is(err, ErrPodGone) {
				t.Errorf("Start = %v; want ErrPodGone", err)
			}
		})
	}
}

// handDriven is a Spawner on a fake clientset whose pod and event watches
// the test drives by hand; the pods it creates get a uid and are sent to
// created. Its Registry's pod and event informers are held (podCache) and
// synced on empty lists, so pods and events arrive by the watches only.
type handDriven struct {
	pods, events *watch.FakeWatcher
	// clock is the Spawner's: the start's wait sets its first timers on
	// it just before its first look at the cache.
	clock    *clocktesting.FakeClock
	created  chan *corev1.Pod
	registry *reflector.Registry
	podCache *reflector.Pods
	s        *Spawner
}

func newHandDriven(t *testing.T, ctx context.Context, user string) *handDriven {
	t.Helper()
	f := &handDriven{pods: watch.NewFake(), events: watch.NewFake(), created: make(chan *corev1.Pod, 1), clock: clocktesting.NewFakeClock(time.Now())}
	client := fake.NewClientset()
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) { return true, f.pods, nil })
	client.PrependWatchReactor("events", func(k8stesting.Action) (bool, watch.Interface, error) { return true, f.events, nil })
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.UID = types.UID("uid-" + pod.Name) // the tracker makes none
		f.created <- pod.DeepCopy()
		return false, nil, nil // the tracker stores it
	})
	var err error
	if f.registry, err = reflector.New(reflector.Options{Client: client}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.registry.Close)
	if f.s, err = New(naming.Server{Username: user}, Options{Client: client, Registry: f.registry, Config: baseConfig("ns"), Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.s.Close)
	if f.podCache, err = f.registry.Pods(ctx, "ns"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.podCache.Release)
	events, err := f.registry.Events(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(events.Release)
	if err := f.podCache.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := events.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// start runs f.s.Start(ctx, opts) in the background and, once its pod is
// created and the start waits for it (its first look at the cache comes
// with its first timers), sends the pod's add, pending, by the pod watch.
// started receives Start's error.
func (f *handDriven) start(t *testing.T, ctx context.Context, opts StartOptions) (*corev1.Pod, <-chan error) {
	t.Helper()
	started := make(chan error, 1)
	go func() { _, err := f.s.Start(ctx, opts); started <- err }()
	var pod *corev1.Pod
	select {
	case pod = <-f.created:
	case err := <-started:
		t.Fatalf("Start ended before creating its pod: %v", err)
	}
	// The start's wait sets its timers and looks at the cache at once,
	// without blocking in between.
	testutil.EventuallyEvery(t, time.Millisecond, 10*time.Second, "the start's wait to set its timers", testutil.True(f.clock.HasWaiters))
	pod.ResourceVersion = "1"
	f.pods.Add(pod)
	return pod, started
}
