package orphan

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSweeperHandover: two sweepers under real leader election. The
// leader loses its Lease mid-run (its Lease requests fail), the other
// takes over; then the new leader shuts down and hands back. At no moment
// do two sweeps run.
func TestSweeperHandover(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)

	var active, peak atomic.Int32
	onSweep := func(d int) {
		n := active.Add(int32(d))
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
	}
	// A slow hub that does not honour cancellation: a sweep outlives the
	// context it was started with by up to 150ms.
	known := func(context.Context) (*Known, error) {
		time.Sleep(150 * time.Millisecond) // the slow hub itself, not a wait
		k := NewKnown(1)
		k.Add("alice", "", true)
		return k, nil
	}
	var cut atomic.Bool
	var leaseReqs atomic.Int32 // a's Lease requests that went through
	cfgA := rest.CopyConfig(cluster.Config)
	cfgA.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if cut.Load() && strings.Contains(r.URL.Path, "/leases") {
				return nil, errors.New("test: lease access cut")
			}
			if strings.Contains(r.URL.Path, "/leases") {
				leaseReqs.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	clientA, err := kubernetes.NewForConfig(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	newSweeper := func(id string, client kubernetes.Interface) *Sweeper {
		s, err := NewSweeper(SweeperOptions{
			Client: client, Known: known, Interval: 20 * time.Millisecond,
			List:    Options{Namespaces: []string{ns}},
			Cleanup: CleanupOptions{MinAge: NoMinAge},
			LeaderElection: &LeaderElection{Namespace: ns, Name: "handover", Identity: id,
				// The margin between a leader giving up (RenewDeadline) and
				// another taking over (LeaseDuration) is 2s.
				LeaseDuration: 3 * time.Second, RenewDeadline: 1 * time.Second, RetryPeriod: 100 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		s.onSweep = onSweep
		return s
	}
	a, b := newSweeper("a", clientA), newSweeper("b", cluster.Client)
	ctxA, cancelA := context.WithCancel(t.Context())
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelA()
	defer cancelB()
	var wg sync.WaitGroup
	start := func(s *Sweeper, ctx context.Context) {
		wg.Go(func() {
			if err := s.Start(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testutil.EventuallyEvery(t, 10*time.Millisecond, 20*time.Second, what, testutil.True(cond))
	}

	start(a, ctxA)
	waitFor("a to sweep", func() bool { return a.Sweeps() > 0 })
	start(b, ctxB)
	// b campaigns while a goes on leading for three more sweeps.
	aLeading := a.Sweeps()
	waitFor("a to sweep three more times", func() bool { return a.Sweeps() >= aLeading+3 })
	if n := b.Sweeps(); n != 0 {
		// Only if a could not renew in time on a loaded machine; the
		// invariant below (one sweep at a time) still holds.
		t.Logf("b swept %d times before the cut: a lost its Lease early", n)
	}

	// a loses its Lease mid-run; b takes over.
	cut.Store(true)
	waitFor("b to take over", func() bool { return b.Sweeps() > 0 })
	aAfter := a.Sweeps()
	// Two more sweeps by b are two intervals in which a, had it gone on
	// sweeping, would have swept too.
	bLeading := b.Sweeps()
	waitFor("b to sweep two more times", func() bool { return b.Sweeps() >= bLeading+2 })
	if a.Sweeps() != aAfter {
		t.Errorf("a kept sweeping after losing its Lease: %d -> %d", aAfter, a.Sweeps())
	}

	// a can reach the Lease again and campaigns; b shuts down and hands
	// over as soon as its sweep has stopped.
	reached := leaseReqs.Load()
	cut.Store(false)
	waitFor("a to reach its Lease again", func() bool { return leaseReqs.Load() > reached })
	aBefore := a.Sweeps()
	cancelB()
	waitFor("a to take over again", func() bool { return a.Sweeps() > aBefore })
	cancelA()
	wg.Wait()
	if p := peak.Load(); p != 1 {
		t.Errorf("at most %d sweeps ran at once, want 1", p)
	}
	if n := active.Load(); n != 0 {
		t.Errorf("%d sweeps still running after Start returned", n)
	}
	t.Logf("sweeps: a %d, b %d", a.Sweeps(), b.Sweeps())
}

// TestSweeperLeaseNamespaceMissing: a Sweeper whose Lease cannot be used
// (its namespace does not exist) returns an error from Start, naming the
// namespace, instead of standing by, and sweeps nothing.
func TestSweeperLeaseNamespaceMissing(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)
	known := func(context.Context) (*Known, error) {
		k := NewKnown(1)
		k.Add("alice", "", true)
		return k, nil
	}
	s, err := NewSweeper(SweeperOptions{
		Client: cluster.Client, Known: known, Interval: 20 * time.Millisecond,
		List:    Options{Namespaces: []string{ns}},
		Cleanup: CleanupOptions{MinAge: NoMinAge},
		LeaderElection: &LeaderElection{Namespace: "orphan-no-such-namespace", Name: "sweeper", Identity: "a",
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A Start that stood by instead would return nil when this ends.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = s.Start(ctx)
	if err == nil {
		t.Fatal("Start returned nil, want an error about the Lease's namespace")
	}
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `"orphan-no-such-namespace"`) {
		t.Errorf("Start: %v, want a NotFound error naming the namespace", err)
	}
	if n := s.Sweeps(); n != 0 {
		t.Errorf("%d sweeps ran without the Lease", n)
	}
}

// TestRefusesToGuess: options that cannot be meant fail, and nothing is
// deleted.
func TestRefusesToGuess(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)
	createPod(t, ns, meta("jupyter-stray", "stray", "", true))
	empty := func(context.Context) (*Known, error) { return NewKnown(0), nil }
	nilKnown := func(context.Context) (*Known, error) { return nil, nil }
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"negative MinAge", func() error {
			orphans, err := List(ctx, NewKnown(0), Options{Client: cluster.Client, Namespaces: []string{ns}})
			if err != nil {
				return err
			}
			_, err = Cleanup(ctx, orphans, CleanupOptions{Client: cluster.Client, MinAge: -time.Second})
			return err
		}, ErrInvalidOptions},
		{"unknown cleanup kind", func() error {
			_, err := Cleanup(ctx, nil, CleanupOptions{Client: cluster.Client, Kinds: []Kind{"Pods"}})
			return err
		}, ErrInvalidOptions},
		{"unknown list kind", func() error {
			_, err := List(ctx, NewKnown(0), Options{Client: cluster.Client, Kinds: []Kind{"pod"}})
			return err
		}, ErrInvalidOptions},
		{"nil known", func() error {
			_, err := List(ctx, nil, Options{Client: cluster.Client})
			return err
		}, ErrInvalidOptions},
		{"sweeper with negative MinAge", func() error {
			_, err := NewSweeper(SweeperOptions{Client: cluster.Client, Known: empty, Cleanup: CleanupOptions{MinAge: -2}})
			return err
		}, ErrInvalidOptions},
		{"sweeper with empty known", func() error {
			s, err := NewSweeper(SweeperOptions{Client: cluster.Client, Known: empty, List: Options{Namespaces: []string{ns}}, Cleanup: CleanupOptions{MinAge: NoMinAge}})
			if err != nil {
				return err
			}
			_, err = s.SweepOnce(ctx)
			return err
		}, ErrEmptyKnown},
		{"sweeper of several clusters with empty known", func() error {
			s, err := NewSweeper(SweeperOptions{Clusters: []SweeperCluster{{Name: "a", Client: cluster.Client}, {Name: "b", Client: cluster.Client}},
				Known: empty, List: Options{Namespaces: []string{ns}}, Cleanup: CleanupOptions{MinAge: NoMinAge}})
			if err != nil {
				return err
			}
			_, err = s.SweepOnce(ctx)
			return err
		}, ErrEmptyKnown},
		{"sweeper cluster without a name", func() error {
			_, err := NewSweeper(SweeperOptions{Clusters: []SweeperCluster{{Client: cluster.Client}}, Known: empty})
			return err
		}, ErrInvalidOptions},
		{"sweeper cluster named twice", func() error {
			_, err := NewSweeper(SweeperOptions{Clusters: []SweeperCluster{{Name: "a", Client: cluster.Client}, {Name: "a", Client: cluster.Client}}, Known: empty})
			return err
		}, ErrInvalidOptions},
		{"sweeper cluster without a client", func() error {
			_, err := NewSweeper(SweeperOptions{Clusters: []SweeperCluster{{Name: "a"}}, Known: empty})
			return err
		}, ErrInvalidOptions},
		{"sweeper clusters with List.Cluster", func() error {
			_, err := NewSweeper(SweeperOptions{Clusters: []SweeperCluster{{Name: "a", Client: cluster.Client}}, Known: empty, List: Options{Cluster: "a"}})
			return err
		}, ErrInvalidOptions},
		{"sweeper with nil known", func() error {
			s, err := NewSweeper(SweeperOptions{Client: cluster.Client, Known: nilKnown, List: Options{Namespaces: []string{ns}}, Cleanup: CleanupOptions{MinAge: NoMinAge}})
			if err != nil {
				return err
			}
			_, err = s.SweepOnce(ctx)
			return err
		}, ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := podNames(t, ns)
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if after := podNames(t, ns); after != before {
				t.Errorf("pods %s before, %s after", before, after)
			}
		})
	}
	for _, s := range []string{"Pod", "pvc", "namespaces"} {
		if _, err := ParseKind(s); err != nil {
			t.Errorf("ParseKind(%q): %v", s, err)
		}
	}
	if _, err := ParseKind("Podd"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("ParseKind(Podd) = %v", err)
	}
}

func podNames(t *testing.T, ns string) string {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(list.Items))
	for i, p := range list.Items {
		names[i] = p.Name
	}
	return fmt.Sprint(names)
}
