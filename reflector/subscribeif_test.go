package reflector

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// A SubscribeIf subscription is woken by the pod's add, its deletion and
// its events, and by an update only when its wake function says so; the
// function gets the version before and after the update.
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
		updates <- update{old.Labels.Get("step"), new.Labels.Get("step")}
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
	woken(sub, "the pod was created")
	woken(all, "the pod was created")
	setStep("quiet")
	notWoken("a label update the function declines", update{"created", "quiet"})
	setStep("wake")
	woken(sub, "an update the function accepted")
	woken(all, "an update the function accepted")
	if got := <-updates; got != (update{"quiet", "wake"}) {
		t.Errorf("the wake function got %+v, want quiet -> wake", got)
	}
	createEvent(t, pod, "Scheduled", time.Now())
	woken(sub, "an event of the pod")
	deletePod(t, ns, "watched")
	woken(sub, "the pod was deleted")
}
