package reflector

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// A SubscribeIf subscription is woken by the pod's deletion and its
// events, and by an add or an update only when its wake function says so;
// the function gets the version before (nil for an add) and after. Seen
// reports the pods of the name the cache has had, woken or not.
func TestSubscribeIfWakesOnChosenUpdates(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	pods, events := watchNamespace(t, r, ns)
	if err := pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := events.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	type update struct{ oldStep, newStep string }
	updates := make(chan update, 20) // written under the Registry's subscription lock
	sub := r.SubscribeIf(ns, "watched", func(old, new *Pod) bool {
		oldStep := "<added>"
		if old != nil {
			oldStep = old.Labels.Get("step")
		}
		updates <- update{oldStep, new.Labels.Get("step")}
		return new.Labels.Get("step") == "wake"
	})
	defer sub.Close()
	all := r.Subscribe(ns, "watched") // every change: the control
	defer all.Close()

	woken := func(s *Subscription, what string) {
		t.Helper()
		select {
		case <-s.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up after %s", what)
		}
	}
	// The control is notified in the same pass as sub, after or before
	// it: once the control has seen a change and the wake function has
	// been asked about it, sub's fate for that change is sealed.
	notWoken := func(what string, want update) {
		t.Helper()
		woken(all, what)
		select {
		case got := <-updates:
			if got != want {
				t.Errorf("after %s the wake function got %+v, want %+v", what, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the wake function was not asked after %s", what)
		}
		r.subsMu.Lock() // the notifying pass has ended
		r.subsMu.Unlock()
		select {
		case <-sub.C():
			t.Errorf("woken after %s, which the wake function declined", what)
		default:
		}
	}
	nextUpdate := func() update {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(10 * time.Second):
			t.Fatal("the wake function was not asked")
			return update{}
		}
	}
	setStep := func(step string) {
		t.Helper()
		p, err := c.Client.CoreV1().Pods(ns).Get(t.Context(), "watched", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["step"] = step
		if _, err := c.Client.CoreV1().Pods(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	pod := createPod(t, ns, "watched", map[string]string{"component": "singleuser-server", "step": "created"})
	if sub.Seen(pods, "no-such-uid") {
		t.Error("Seen a uid no pod had")
	}
	notWoken("the pod was created", update{"<added>", "created"})
	if !sub.Seen(pods, pod.UID) {
		t.Errorf("Seen(%s) = false after its add", pod.UID)
	}
	setStep("quiet")
	notWoken("a label update the function declines", update{"created", "quiet"})
	setStep("wake")
	woken(sub, "an update the function accepted")
	woken(all, "an update the function accepted")
	if got := nextUpdate(); got != (update{"quiet", "wake"}) {
		t.Errorf("the wake function got %+v, want quiet -> wake", got)
	}
	createEvent(t, pod, "Scheduled", time.Now())
	woken(sub, "an event of the pod")

	// OnEvent sees each event of the pod first and decides whether it
	// wakes the holder; OnEvent(nil) lets every event wake it again.
	reasons := make(chan string, 4) // written under the subscription lock
	var wakeOnEvent atomic.Bool
	sub.OnEvent(func(ev *corev1.Event) bool {
		reasons <- ev.Reason
		return wakeOnEvent.Load()
	})
	asked := func(want string) {
		t.Helper()
		select {
		case got := <-reasons:
			if got != want {
				t.Errorf("OnEvent got %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("OnEvent was not called for %s", want)
		}
	}
	createEvent(t, pod, "Pulled", time.Now())
	asked("Pulled")
	sub.evMu.Lock() // the function has returned
	sub.evMu.Unlock()
	select {
	case <-sub.C():
		t.Error("woken by an event OnEvent declined")
	default:
	}
	wakeOnEvent.Store(true)
	createEvent(t, pod, "Started", time.Now())
	asked("Started")
	woken(sub, "an event OnEvent accepted")
	sub.OnEvent(nil)
	createEvent(t, pod, "Killing", time.Now())
	woken(sub, "an event with OnEvent removed")
	select {
	case got := <-reasons:
		t.Errorf("a removed OnEvent was called for %s", got)
	default:
	}
	// The deletion's notification ends before Observe functions run.
	deleted := make(chan struct{}, 1)
	remove, err := pods.Observe(func(p *Pod, del bool) {
		if del && p.Name == "watched" {
			deleted <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	deletePod(t, ns, "watched")
	woken(sub, "the pod was deleted")
	select {
	case <-deleted:
	case <-time.After(10 * time.Second):
		t.Fatal("the deletion was not observed")
	}
	// The updates the deletion made (its deletionTimestamp) asked the
	// function, and may have left a wake-up; the deletion itself woke sub
	// without asking.
	for len(updates) > 0 {
		<-updates
	}
	select {
	case <-sub.C():
	default:
	}
	again := createPod(t, ns, "watched", map[string]string{"component": "singleuser-server", "step": "wake"})
	woken(sub, "an add the function accepted")
	if got := nextUpdate(); got != (update{"<added>", "wake"}) {
		t.Errorf("the wake function got %+v, want an add of step wake", got)
	}
	if !sub.Seen(pods, pod.UID) || !sub.Seen(pods, again.UID) {
		t.Errorf("Seen: first pod %v, second %v; want both", sub.Seen(pods, pod.UID), sub.Seen(pods, again.UID))
	}
}

// Seen keeps the latest uids of the name only, each once, and answers
// for one informer: another informer of the Registry may be ahead.
func TestSubscriptionSeenIsBounded(t *testing.T) {
	s := &Subscription{r: &Registry{}}
	informer, other := &entry{}, &entry{}
	pods := &Pods{h: handle{e: informer}}
	uid := func(i int) types.UID { return types.UID(fmt.Sprintf("uid-%d", i)) }
	for i := range maxSeen + 3 {
		s.sawLocked(informer, uid(i))
		s.sawLocked(informer, uid(i)) // again: kept once
	}
	s.sawLocked(informer, uid(5)) // seen again: now the latest
	s.sawLocked(informer, "")     // a pod without a uid is not recorded
	if len(s.seen) != maxSeen {
		t.Fatalf("%d uids kept, want %d: %v", len(s.seen), maxSeen, s.seen)
	}
	for i := range maxSeen + 3 {
		if want := i >= 3; s.Seen(pods, uid(i)) != want {
			t.Errorf("Seen(%s) = %v, want %v", uid(i), !want, want)
		}
	}
	if s.seen[len(s.seen)-1].uid != uid(5) {
		t.Errorf("latest uid %s, want uid-5", s.seen[len(s.seen)-1].uid)
	}
	s.sawLocked(informer, uid(0)) // a new one drops the oldest
	if s.Seen(pods, uid(3)) || !s.Seen(pods, uid(0)) {
		t.Errorf("after a new uid: Seen(uid-3) %v (want false), Seen(uid-0) %v (want true)", s.Seen(pods, uid(3)), s.Seen(pods, uid(0)))
	}
	s.sawLocked(other, "uid-elsewhere")
	if s.Seen(pods, "uid-elsewhere") {
		t.Error("Seen reports a pod only another informer has had")
	}
	if !s.Seen(&Pods{h: handle{e: other}}, "uid-elsewhere") {
		t.Error("Seen through the other informer = false")
	}
}
