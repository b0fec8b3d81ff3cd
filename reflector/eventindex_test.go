package reflector

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

var indexBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func indexEvent(pod, name string, second int) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("ev-" + name)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod,
			UID: types.UID("uid-" + pod)},
		Reason: name, LastTimestamp: metav1.NewTime(indexBase.Add(time.Duration(second) * time.Second)),
	}
}

func reasons(evs []*corev1.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func TestEventIndexOrderAndBound(t *testing.T) {
	type put struct {
		name   string
		second int
	}
	for _, tc := range []struct {
		name string
		max  int
		puts []put
		want []string
	}{
		{"oldest first whatever the arrival order", 10,
			[]put{{"c", 3}, {"a", 1}, {"d", 4}, {"b", 2}}, []string{"a", "b", "c", "d"}},
		{"same time ordered by name", 10,
			[]put{{"b", 1}, {"a", 1}}, []string{"a", "b"}},
		{"the newest max kept", 3,
			[]put{{"c", 3}, {"a", 1}, {"e", 5}, {"b", 2}, {"d", 4}}, []string{"c", "d", "e"}},
		{"an event older than a full list is not kept", 2,
			[]put{{"b", 2}, {"c", 3}, {"a", 1}}, []string{"b", "c"}},
		{"an update keeps one slot and moves the event", 3,
			[]put{{"a", 1}, {"b", 2}, {"c", 3}, {"a", 4}, {"a", 5}}, []string{"b", "c", "a"}},
		{"no bound", -1,
			[]put{{"a", 1}, {"b", 2}, {"c", 3}}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newEventIndex(tc.max)
			for _, p := range tc.puts {
				x.put(indexEvent("p", p.name, p.second))
			}
			if got := reasons(x.forUID("uid-p")); !slices.Equal(got, tc.want) {
				t.Errorf("forUID = %v, want %v", got, tc.want)
			}
			if got := reasons(x.forPod("ns", "p")); !slices.Equal(got, tc.want) {
				t.Errorf("forPod = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEventIndexDeleteAndForget(t *testing.T) {
	x := newEventIndex(10)
	x.put(indexEvent("p", "a", 1))
	x.put(indexEvent("p", "b", 2))
	x.put(indexEvent("q", "c", 3))
	// An event without an involved uid is known by name.
	noUID := indexEvent("p", "d", 4)
	noUID.InvolvedObject.UID = ""
	x.put(noUID)
	if got := reasons(x.forPod("ns", "p")); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("forPod = %v", got)
	}
	x.remove(indexEvent("p", "a", 1))
	if got := reasons(x.forUID("uid-p")); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after the event's deletion forUID = %v", got)
	}
	x.forgetPod("uid-p", "ns", "p")
	if n := len(x.forPod("ns", "p")); n != 0 {
		t.Fatalf("a deleted pod keeps %d events", n)
	}
	// What a relist delivers again for the deleted pod stays out.
	x.put(indexEvent("p", "a", 1))
	x.put(indexEvent("p", "e", 9))
	if n := len(x.forUID("uid-p")); n != 0 {
		t.Fatalf("a relist brought back %d events of a deleted pod", n)
	}
	if got := reasons(x.forUID("uid-q")); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("another pod's events = %v", got)
	}
	if len(x.pods) != 1 || len(x.byName) != 1 {
		t.Errorf("empty entries kept: %d pods, %d names", len(x.pods), len(x.byName))
	}
}

func TestEventIndexTombstonesBounded(t *testing.T) {
	x := newEventIndex(10)
	for i := range maxTombstones + 10 {
		x.forgetPod(types.UID(fmt.Sprint(i)), "ns", fmt.Sprint(i))
	}
	if len(x.tombs) != maxTombstones || len(x.tombOrder) != maxTombstones {
		t.Fatalf("%d tombstones, want %d", len(x.tombs), maxTombstones)
	}
	if _, ok := x.tombs["0"]; ok {
		t.Error("the oldest tombstone was kept")
	}
	if _, ok := x.tombs[types.UID(fmt.Sprint(maxTombstones+9))]; !ok {
		t.Error("the newest tombstone was dropped")
	}
}

// TestEventIndexBoundedHeap feeds 50,000 events (50 pods with 1,000 each)
// through the handler and measures the heap the index keeps: with the
// default bound of 100 per pod it keeps 5,000 events, a tenth of what an
// unbounded index keeps.
func TestEventIndexBoundedHeap(t *testing.T) {
	const pods, perPod = 50, 1_000
	measure := func(max int) (int, float64) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		x := newEventIndex(max)
		for j := range perPod {
			for i := range pods {
				e := indexEvent(fmt.Sprintf("pod-%d", i), fmt.Sprintf("ev-%d-%d", i, j), j)
				e.Message = fmt.Sprintf("Back-off pulling image %q for the %dth time", "quay.io/jupyter/scipy-notebook", j)
				x.put(e)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := x.len()
		runtime.KeepAlive(x)
		return n, float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	}
	kept, bounded := measure(100)
	all, unbounded := measure(-1)
	t.Logf("50,000 events: bounded index keeps %d events in %.0f KiB (%.0f B/event); unbounded %d in %.0f KiB",
		kept, bounded/1024, bounded/float64(kept), all, unbounded/1024)
	if kept != pods*100 || all != pods*perPod {
		t.Fatalf("kept %d and %d events, want %d and %d", kept, all, pods*100, pods*perPod)
	}
	if bounded > unbounded/5 {
		t.Errorf("the bounded index keeps %.0f B, more than a fifth of the unbounded %.0f B", bounded, unbounded)
	}
}

// TestEventsNoResurrectionAfterRelist deletes a pod, then delivers every
// event the informer holds through the index's handler again, as a relist
// (or a new informer) does: the deleted pod's events, still on the
// server, stay out of the index.
func TestEventsNoResurrectionAfterRelist(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	_, events := watchNamespace(t, r, ns)
	gone := createPod(t, ns, "gone", nil)
	kept := createPod(t, ns, "kept", nil)
	for i, reason := range []string{"Scheduled", "Pulled", "Started"} {
		createEvent(t, gone, reason, time.Now().Add(time.Duration(i)*time.Second))
	}
	createEvent(t, kept, "Scheduled", time.Now())
	testutil.Eventually(t, 20*time.Second, "the events indexed", testutil.True(func() bool {
		a, _ := events.ForUID(t.Context(), gone.UID)
		b, _ := events.ForUID(t.Context(), kept.UID)
		return len(a) == 3 && len(b) == 1
	}))
	deletePod(t, ns, "gone")
	testutil.Eventually(t, 20*time.Second, "the deleted pod's events dropped", testutil.True(func() bool {
		evs, _ := events.ForPod(t.Context(), ns, "gone")
		return len(evs) == 0
	}))
	// The server still has the deleted pod's events: a relist delivers
	// them all to the store again.
	list, err := cluster.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Fatalf("the server holds %d events, want all 4", len(list.Items))
	}
	items := make([]any, len(list.Items))
	for i := range list.Items {
		items[i] = &list.Items[i]
	}
	if err := events.h.e.store.Replace(items, list.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if evs, _ := events.ForUID(t.Context(), gone.UID); len(evs) != 0 {
		t.Errorf("a relist brought back %d events of the deleted pod: %v", len(evs), reasons(evs))
	}
	if evs, _ := events.ForPod(t.Context(), ns, "kept"); len(evs) != 1 {
		t.Errorf("the live pod has %d events after the relist, want 1", len(evs))
	}
}
