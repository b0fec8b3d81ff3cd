package reflector

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// TestGoneWatchIsUnhealthyUntilRelisted: a watch that ends with a 410
// Gone error event (the resourceVersion compacted away; a real API
// server sends it only after a compaction outruns its watch cache, so a
// fake watch delivers it here) makes the informer unhealthy until its
// relist succeeds; client-go would relist after a backoff without
// telling the error handler. Events pass through in order, and Stop ends
// the watch's goroutine even when nobody reads (goleak checks).
func TestGoneWatchIsUnhealthyUntilRelisted(t *testing.T) {
	h := newHealth(clock.RealClock{})
	h.attempt(callList, nil)
	h.s.Synced = true
	fake := watch.NewFake()
	w := watchWithHealth(fake, h)
	go func() {
		fake.Add(&metav1.Status{})
		fake.Error(&apierrors.NewResourceExpired("too old resource version: 5 (10)").ErrStatus)
	}()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %v, want the Added passed on", ev.Type)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Error {
		t.Fatalf("second event %v, want the error passed on", ev.Type)
	}
	st := h.status()
	st.Synced = true
	if st.Healthy() || !apierrors.IsResourceExpired(st.LastError) {
		t.Fatalf("after 410 Gone: healthy %v, last error %v; want unhealthy with the expiry", st.Healthy(), st.LastError)
	}
	time.Sleep(time.Millisecond)
	h.attempt(callList, nil) // the relist
	st = h.status()
	st.Synced = true
	if !st.Healthy() {
		t.Errorf("after the relist: unhealthy (%v)", st.LastError)
	}

	w.Stop() // as the reflector stops every watch it ends
	for range w.ResultChan() {
	}

	// Stop while an event waits to be read: the goroutine ends.
	fake2 := watch.NewRaceFreeFake()
	w2 := watchWithHealth(fake2, h)
	fake2.Add(&metav1.Status{})
	time.Sleep(10 * time.Millisecond) // the goroutine now waits to pass it on
	w2.Stop()
	for range w2.ResultChan() {
	}
}
