package reflector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// reads calls every read of a Pods and an Events handle.
func reads(ctx context.Context, p *Pods, ev *Events) map[string]error {
	_, _, getErr := p.Get(ctx, "ns", "name")
	_, _, uidErr := p.GetByUID(ctx, "uid")
	_, listErr := p.List(ctx, "")
	_, onChangeErr := p.OnChange(func(*Pod, bool) {})
	_, observeErr := p.Observe(func(*Pod, bool) {})
	_, forPodErr := ev.ForPod(ctx, "ns", "name")
	_, forUIDErr := ev.ForUID(ctx, "uid")
	return map[string]error{
		"Pods.WaitForSync": p.WaitForSync(ctx), "Pods.Get": getErr, "Pods.GetByUID": uidErr,
		"Pods.List": listErr, "Pods.OnChange": onChangeErr, "Pods.Observe": observeErr,
		"Events.WaitForSync": ev.WaitForSync(ctx), "Events.ForPod": forPodErr, "Events.ForUID": forUIDErr,
	}
}

func TestReadsAfterReleaseAndClose(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	hold := func() (*Pods, *Events) {
		p, err := r.Pods(t.Context(), ns)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := r.Events(t.Context(), ns)
		if err != nil {
			t.Fatal(err)
		}
		return p, ev
	}
	p1, ev1 := hold()
	p2, ev2 := hold() // the same informers, held twice
	for what, err := range reads(t.Context(), p1, ev1) {
		if err != nil {
			t.Errorf("%s on a held handle: %v", what, err)
		}
	}

	// Released handles fail; another holder of the same informers reads on.
	p1.Release()
	ev1.Release()
	for what, err := range reads(t.Context(), p1, ev1) {
		if !errors.Is(err, ErrReleased) {
			t.Errorf("%s after Release = %v, want ErrReleased", what, err)
		}
	}
	for what, err := range reads(t.Context(), p2, ev2) {
		if err != nil {
			t.Errorf("%s on the other holder's handle: %v", what, err)
		}
	}

	// Close stops every informer and waits; handles still held fail.
	entries := []*entry{p2.h.e, ev2.h.e}
	r.Close()
	for _, e := range entries {
		select {
		case <-e.done:
		default:
			t.Errorf("%s still runs after Close", e.key)
		}
	}
	for what, err := range reads(t.Context(), p2, ev2) {
		if !errors.Is(err, ErrReleased) {
			t.Errorf("%s after Close = %v, want ErrReleased", what, err)
		}
	}
	p2.Release() // harmless after Close
	ev2.Release()
	if len(r.Status()) != 0 {
		t.Errorf("%d informers listed after Close", len(r.Status()))
	}
	if _, err := r.Pods(t.Context(), ns); !errors.Is(err, ErrClosed) {
		t.Errorf("Pods after Close = %v, want ErrClosed", err)
	}
	if _, err := r.Events(t.Context(), ns); !errors.Is(err, ErrClosed) {
		t.Errorf("Events after Close = %v, want ErrClosed", err)
	}
	r.Close() // harmless
}

func TestHealthCountsEachFailureOnce(t *testing.T) {
	t.Run("a failed call reported again by client-go", func(t *testing.T) {
		h := newHealth(clock.RealClock{})
		callErr := errors.New("connection reset")
		h.attempt(callList, callErr)
		h.watchError(fmt.Errorf("failed to list *v1.Pod: %w", callErr))
		if n := h.status().WatchErrors; n != 1 {
			t.Fatalf("one failure counted %d times", n)
		}
		h.watchError(errors.New("unable to sync list result"))
		if n := h.status().WatchErrors; n != 2 {
			t.Fatalf("a failure of client-go's own counted %d times, want once (2 in all)", n-1)
		}
		h.attempt(callList, nil)
		if s := h.status(); s.LastSuccess.IsZero() {
			t.Fatal("success not recorded")
		}
	})

	t.Run("failing calls of an informer", func(t *testing.T) {
		c := testcluster.Require(t, cluster)
		ns := newNamespace(t)
		const failures = 3
		var calls, failed atomic.Int32
		cfg := rest.CopyConfig(c.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if strings.HasSuffix(req.URL.Path, "/namespaces/"+ns+"/pods") && calls.Add(1) <= failures {
					failed.Add(1)
					return nil, errors.New("injected failure")
				}
				return rt.RoundTrip(req)
			})
		}
		r := newRegistry(t, Options{Config: cfg})
		defer r.Close()
		p, err := r.Pods(t.Context(), ns)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		s := p.Status()
		if int32(s.WatchErrors) != failed.Load() || s.LastError == nil || !s.Healthy() {
			t.Errorf("after %d failed list and watch calls: %d errors counted, last %v, healthy %v",
				failed.Load(), s.WatchErrors, s.LastError, s.Healthy())
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestInformersAskForUncompressedResponses: every list and watch of the
// registry's informers asks for identity encoding, so the API server
// never gzips the pod and event streams (CPU at both ends, nothing saved
// on a cluster network), and no response comes back compressed.
func TestInformersAskForUncompressedResponses(t *testing.T) {
	ns := newNamespace(t)
	var requests, compressed, asked atomic.Int64
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if !strings.HasSuffix(r.URL.Path, "/pods") && !strings.HasSuffix(r.URL.Path, "/events") {
				return rt.RoundTrip(r)
			}
			requests.Add(1)
			// Protobuf, as client-go's typed client asks for core types:
			// JSON would cost twice the CPU to decode.
			if r.Header.Get("Accept-Encoding") == "identity" && strings.HasPrefix(r.Header.Get("Accept"), "application/vnd.kubernetes.protobuf") {
				asked.Add(1)
			}
			resp, err := rt.RoundTrip(r)
			if err == nil && (resp.Uncompressed || resp.Header.Get("Content-Encoding") != "") {
				compressed.Add(1)
			}
			return resp, err
		})
	}
	r := newRegistry(t, Options{Config: cfg})
	pods, err := r.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	events, err := r.Events(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Release()
	if err := pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := events.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if requests.Load() < 2 || asked.Load() != requests.Load() || compressed.Load() != 0 {
		t.Errorf("%d informer requests, %d asking for identity and protobuf, %d answered compressed; want all identity and protobuf, none compressed",
			requests.Load(), asked.Load(), compressed.Load())
	}
}

// TestEventInformerLingers: an event informer's last Release leaves it
// running for the linger, a holder taking it meanwhile gets the same
// informer (no second list), and once the linger has passed with no
// holder it stops, its events given back; Close stops a lingering one.
func TestEventInformerLingers(t *testing.T) {
	ns := newNamespace(t)
	r := newRegistry(t, Options{})
	r.linger = 500 * time.Millisecond
	take := func() *Events {
		ev, err := r.Events(t.Context(), ns)
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	running := func(e *entry) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.entries[e.key] == e
	}
	first := take()
	e := first.h.e
	first.Release()
	if !running(e) {
		t.Fatal("the event informer stopped at its last Release; want it to linger")
	}
	second := take()
	if second.h.e != e {
		t.Fatal("a holder during the linger got a new informer; want the lingering one")
	}
	// Held past the linger: the stop timer was cancelled.
	time.Sleep(3 * r.linger)
	if !running(e) {
		t.Fatal("the event informer stopped while held")
	}
	second.Release()
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the event informer still runs 30 s after its linger")
	}
	if running(e) {
		t.Error("a stopped informer is still listed")
	}
	third := take()
	if third.h.e == e {
		t.Error("a holder after the stop got the stopped informer")
	}
	third.Release()
	r.Close() // stops the lingering one and waits
	select {
	case <-third.h.e.done:
	default:
		t.Error("Close left a lingering event informer running")
	}

	// Pod informers do not linger.
	r2 := newRegistry(t, Options{})
	p, err := r2.Pods(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	pe := p.h.e
	p.Release()
	select {
	case <-pe.done:
	default:
		t.Error("a pod informer still runs after its last Release")
	}
}
