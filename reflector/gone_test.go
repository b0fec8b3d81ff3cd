package reflector

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

// TestGoneWatchIsUnhealthyUntilRelisted: a watch that ends with a 410
// Gone error event (the resourceVersion compacted away; a real API
// server sends it only after a compaction outruns its watch cache, so a
// fake watch delivers it here) makes the informer unhealthy until its
// relist succeeds; client-go would relist after a backoff without
// telling the error handler. Events pass through in order, and Stop ends
// the watch's goroutine even when nobody reads (goleak checks).
func TestGoneWatchIsUnhealthyUntilRelisted(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	h := newHealth(fc)
	h.attempt(callList, nil)
	h.s.Synced = true
	fc.Step(time.Millisecond) // the watch's error comes after the list
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
	fc.Step(time.Millisecond)
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
	// Once the goroutine has taken the event from the fake's buffer, it
	// waits to pass it on.
	testutil.Eventually(t, 10*time.Second, "the event taken from the fake watch", testutil.True(func() bool { return len(fake2.ResultChan()) == 0 }))
	w2.Stop()
	for range w2.ResultChan() {
	}
}
