package spawner

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// A start's pod that the cache adds (not waking the start: it is
// pending) and then drops with no update in between fails the start at
// the deletion: the subscription's Seen tells the start that the cache
// had its pod. Without it the start would take the missing pod for one
// not yet seen and find out only from the API check it makes after 5 s.
//
// A real API server always sends an update with the deletion timestamp
// first, which wakes the start; a watch that skips it (a relist after the
// watch broke, or both changes read at once by a loaded hub) cannot be
// had on demand, so the pod watch here is driven by hand.
func TestStartSeesItsPodDeletedWithoutAnUpdate(t *testing.T) {
	client := fake.NewClientset()
	podWatch := watch.NewFake()
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, podWatch, nil
	})
	created := make(chan *corev1.Pod, 1)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.UID = types.UID("uid-" + pod.Name) // the tracker makes none
		created <- pod.DeepCopy()
		return false, nil, nil // the tracker stores it
	})
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer registry.Close()
	s, err := New(naming.Server{Username: "gone"}, Options{Client: client, Registry: registry, Config: baseConfig("ns")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pods, err := registry.Pods(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	if err := pods.WaitForSync(ctx); err != nil { // the list is empty: the pod comes by the watch
		t.Fatal(err)
	}

	started := make(chan error, 1)
	go func() { _, err := s.Start(ctx, hubStart()); started <- err }()
	var pod *corev1.Pod
	select {
	case pod = <-created:
	case err := <-started:
		t.Fatalf("Start ended before creating its pod: %v", err)
	}
	// The add comes well after the start's first look at the cache (the
	// fake answers its remaining calls at once), as a loaded informer's
	// would; the pod is pending, so the add does not wake the start.
	time.Sleep(300 * time.Millisecond)
	pod.ResourceVersion = "1"
	podWatch.Add(pod)
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
