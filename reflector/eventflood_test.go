package reflector

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

// floodEvent is one event of a flood, with strings of its own, as a
// watch decodes each event.
func floodEvent(ns, pod string, uid types.UID, i int, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", pod, 0x17a0000000+i), UID: types.UID(fmt.Sprintf("ev-%s-%d", uid, i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: metav1.NewTime(at)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: uid, APIVersion: "v1", FieldPath: "spec.containers{notebook}"},
		Reason:         "BackOff",
		Message:        fmt.Sprintf("Back-off pulling image %q (attempt %d)", "quay.io/jupyter/scipy-notebook:2024-01-01", i),
		Type:           corev1.EventTypeWarning, Count: int32(i), Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
	}
}

// TestEventFloodMemoryBounded: 50,000 events in a watched namespace (KubeSpawner
// #913: a hub out of memory at 35,000), half about 5 of the Registry's pods
// (5,000 each) and half about 2,500 other pods (10 each), delivered to the
// event store as the reflector delivers a watch's events. The heap it keeps
// is at most 16 MiB (a client-go store of the same trimmed events keeps
// them all, measured beside it); each server pod keeps its newest 100, so
// progress for it is right; another pod's events are only held, bounded,
// until their pod appears, and reach the index when it does.
func TestEventFloodMemoryBounded(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	defer r.Close()
	pods, events := watchNamespace(t, r, ns)
	if err := events.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	var managed []*corev1.Pod
	for i := range 5 {
		managed = append(managed, createPod(t, ns, fmt.Sprintf("server-%d", i), nil))
	}
	testutil.Eventually(t, 20*time.Second, "the server pods cached", testutil.True(func() bool {
		for _, p := range managed {
			if _, ok, _ := pods.GetByUID(t.Context(), p.UID); !ok {
				return false
			}
		}
		return true
	}))
	store := events.h.e.store
	const perServer, others, perOther = 5_000, 2_500, 10
	base := time.Now().Add(-time.Hour)
	feed := func(add func(*corev1.Event)) {
		n := 0
		for j := range perServer {
			for _, p := range managed {
				add(floodEvent(ns, p.Name, p.UID, j, base.Add(time.Duration(j)*time.Millisecond)))
				n++
			}
			if j < perOther {
				for o := range others {
					add(floodEvent(ns, fmt.Sprintf("other-%d", o), types.UID(fmt.Sprintf("other-uid-%d", o)), j, base.Add(time.Duration(j)*time.Millisecond)))
					n++
				}
			}
		}
		if n != 50_000 {
			t.Fatalf("fed %d events, want 50,000", n)
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	before := heap()
	feed(func(e *corev1.Event) { _ = store.Add(e) })
	ours := float64(int64(heap())-int64(before)) / (1 << 20)

	before = heap()
	raw := cache.NewStore(cache.MetaNamespaceKeyFunc)
	feed(func(e *corev1.Event) { t, _ := TransformEvent(e); _ = raw.Add(t) })
	plain := float64(int64(heap())-int64(before)) / (1 << 20)
	if n := len(raw.ListKeys()); n != 50_000 {
		t.Fatalf("the client-go store holds %d events", n)
	}
	runtime.KeepAlive(raw)
	t.Logf("50,000 events: the event store keeps %.1f MiB (%d indexed, %d held for unknown pods); a client-go store of the same trimmed events %.1f MiB",
		ours, events.h.e.events.len(), store.pendingLen(), plain)
	if ours > 16 {
		t.Errorf("the event store keeps %.1f MiB for 50,000 events, want at most 16", ours)
	}
	if got := events.h.e.events.len(); got != 5*100 {
		t.Errorf("the index holds %d events, want the newest 100 of each of the 5 servers", got)
	}
	if n := store.pendingLen(); n > maxPendingEvents {
		t.Errorf("%d events held for unknown pods, over the bound %d", n, maxPendingEvents)
	}
	evs, err := events.ForUID(t.Context(), managed[0].UID)
	if err != nil || len(evs) != 100 || evs[99].Count != perServer-1 || evs[0].Count != perServer-100 {
		t.Fatalf("server-0's events: %d (%v), want its newest 100, oldest first", len(evs), err)
	}
	if st := events.Status(); st.Objects != 500 {
		t.Errorf("Status().Objects = %d, want the 500 indexed", st.Objects)
	}

	// An event that comes before its pod is held, and indexed (and its
	// subscribers woken) once a pod informer has the pod.
	late := floodEvent(ns, "late", "late-uid", 1, time.Now())
	_ = store.Add(late)
	if evs, _ := events.ForUID(t.Context(), "late-uid"); len(evs) != 0 {
		t.Fatalf("an unknown pod's event was indexed")
	}
	r.adoptEvents("late-uid", ns)
	if evs, _ := events.ForUID(t.Context(), "late-uid"); len(evs) != 1 {
		t.Errorf("the held event of a pod that appeared: %d indexed, want 1", len(evs))
	}
	// An event about something else than a pod costs nothing.
	node := floodEvent(ns, "node-1", "node-uid", 1, time.Now())
	node.InvolvedObject.Kind = "Node"
	held := store.pendingLen()
	_ = store.Add(node)
	if store.pendingLen() != held {
		t.Error("an event about a node was held")
	}
}
