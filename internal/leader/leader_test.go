package leader_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/internal/testcluster"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.APIServer}, &cluster)
}

// fast are durations that client-go accepts and that keep a test short:
// a lost lease is noticed within 1.5s, an abandoned one taken over after
// 2s.
func fast(client kubernetes.Interface, ns, name, identity string) leader.Config {
	return leader.Config{
		Client: client, Namespace: ns, Name: name, Identity: identity,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond,
	}
}

// TestHandOverWaitsForLead: two replicas on one Lease. The leader's ctx
// ends while its lead is still working (500ms past its ctx); the other
// replica must not lead before that lead has returned, and must lead soon
// after, well before LeaseDuration: the Lease was given back.
func TestHandOverWaitsForLead(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	j := newJournal()
	var active atomic.Int32
	lead := func(who string) func(context.Context) {
		return func(ctx context.Context) {
			if n := active.Add(1); n != 1 {
				t.Errorf("%s leads while %d other leads run", who, n-1)
			}
			defer active.Add(-1)
			j.record(who, "start")
			<-ctx.Done()
			j.record(who, "ctx done")
			// An operation in flight when the term ended, reaching its
			// safe point; it does not look at ctx.
			time.Sleep(500 * time.Millisecond)
			j.record(who, "end")
		}
	}
	// A long Lease, so that a standby that waited for it to expire (no
	// release) would take about 4s, against a fraction of a second (its
	// next try) when it is given back.
	const leaseDuration = 4 * time.Second
	long := func(client kubernetes.Interface, id string) leader.Config {
		cfg := fast(client, ns, "handover", id)
		cfg.LeaseDuration, cfg.RenewDeadline = leaseDuration, 3*time.Second
		return cfg
	}

	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	a := startRun(t, ctxA, long(cluster.Client, "a"), lead("a"))
	j.waitFor(t, "a to lead", 20*time.Second, has("a", "start"))

	// b campaigns: its second GET of the Lease (after Check's) is the
	// elector's first try, which finds a's Lease valid.
	campaigned := make(chan struct{})
	var gets atomic.Int32
	clientB := wrapClient(t, cluster.Config, func(r *http.Request) error {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/leases/") && gets.Add(1) == 2 {
			close(campaigned)
		}
		return nil
	})
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	b := startRun(t, ctxB, long(clientB, "b"), lead("b"))
	receive(t, "b to campaign", campaigned, 20*time.Second)

	cancelA()
	entries := j.waitFor(t, "b to lead", 20*time.Second, has("b", "start"))
	aEnd, bStart := j.find("a", "end"), j.find("b", "start")
	if aEnd < 0 || aEnd > bStart {
		t.Fatalf("b led before a's lead returned: %v", entries)
	}
	gap := entries[bStart].at.Sub(entries[aEnd].at)
	t.Logf("b led %s after a's lead returned", gap)
	if limit := leaseDuration / 2; gap > limit {
		t.Errorf("b led %s after a's lead returned, want under %s: the Lease was not given back", gap, limit)
	}
	if err := a.wait(t); err != nil {
		t.Errorf("a's Run: %v", err)
	}
	cancelB()
	if err := b.wait(t); err != nil {
		t.Errorf("b's Run: %v", err)
	}
	if want := []string{"a start", "a ctx done", "a end", "b start", "b ctx done", "b end"}; fmt.Sprint(j.whats()) != fmt.Sprint(want) {
		t.Errorf("leads ran as %v, want %v", j.whats(), want)
	}
}

// TestLosingTheLeaseCancelsLead: another holder takes the Lease ("thief"
// overwrites it); the leader cannot renew, its lead's ctx ends, and Run
// campaigns again and leads once the thief's Lease has expired.
func TestLosingTheLeaseCancelsLead(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	j := newJournal()
	var terms atomic.Int32
	startRun(t, t.Context(), fast(cluster.Client, ns, "lose", "a"), func(ctx context.Context) {
		n := terms.Add(1)
		j.record("a", fmt.Sprint("start ", n))
		<-ctx.Done()
		j.record("a", fmt.Sprint("ctx done ", n))
	})
	j.waitFor(t, "a to lead", 20*time.Second, has("a", "start 1"))

	// The thief writes the Lease as its own, for 3s from when a sees it.
	leases := cluster.Client.CoordinationV1().Leases(ns)
	stolen := time.Now()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(t.Context(), "lose", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("thief"), LeaseDurationSeconds: ptr.To[int32](3),
			AcquireTime: &now, RenewTime: &now}
		_, err = leases.Update(t.Context(), lease, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	entries := j.waitFor(t, "a's lead to be cancelled", 20*time.Second, has("a", "ctx done 1"))
	t.Logf("lead cancelled %s after the Lease was taken", entries[len(entries)-1].at.Sub(stolen))

	entries = j.waitFor(t, "a to lead again", 20*time.Second, has("a", "start 2"))
	if want := []string{"a start 1", "a ctx done 1", "a start 2"}; fmt.Sprint(j.whats()) != fmt.Sprint(want) {
		t.Errorf("leads ran as %v, want %v", j.whats(), want)
	}
	if d := entries[len(entries)-1].at.Sub(stolen); d < 3*time.Second {
		t.Errorf("a led again %s after the thief took the Lease, before the thief's 3s were up", d)
	}
	lease, err := leases.Get(t.Context(), "lose", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "a" {
		t.Errorf("holder while a leads again = %q", h)
	}
}

// TestReleaseUsesClock: the release is timestamped by Config.Clock and
// leaves the Lease without a holder, for a second.
func TestReleaseUsesClock(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	t0 := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := fast(cluster.Client, ns, "clock", "a")
	cfg.Clock = clocktesting.NewFakeClock(t0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	led := make(chan struct{})
	r := startRun(t, ctx, cfg, func(ctx context.Context) {
		close(led)
		<-ctx.Done()
	})
	receive(t, "a to lead", led, 20*time.Second)
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	lease, err := cluster.Client.CoordinationV1().Leases(ns).Get(t.Context(), "clock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := lease.Spec
	if h := ptr.Deref(s.HolderIdentity, ""); h != "" {
		t.Errorf("holder = %q, want none", h)
	}
	if d := ptr.Deref(s.LeaseDurationSeconds, 0); d != 1 {
		t.Errorf("leaseDurationSeconds = %d, want 1", d)
	}
	if s.RenewTime == nil || !s.RenewTime.Time.Equal(t0) || s.AcquireTime == nil || !s.AcquireTime.Time.Equal(t0) {
		t.Errorf("renewTime %v, acquireTime %v, want both %v (the Config's clock)", s.RenewTime, s.AcquireTime, t0)
	}
}

// TestLeadReturningEarlyKeepsTheLease: a lead that returns before its ctx
// ends is not called again in that term, and the Lease goes on being
// renewed.
func TestLeadReturningEarlyKeepsTheLease(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	var calls atomic.Int32
	led := make(chan struct{})
	startRun(t, t.Context(), fast(cluster.Client, ns, "early", "a"), func(context.Context) {
		if calls.Add(1) == 1 {
			close(led)
		}
	})
	receive(t, "a to lead", led, 20*time.Second)
	leases := cluster.Client.CoordinationV1().Leases(ns)
	lease, err := leases.Get(t.Context(), "early", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := leases.Watch(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", "early").String(), ResourceVersion: lease.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Two renewals by a after its lead returned (each RetryPeriod): a Run
	// that began a new term would have called lead again by then.
	timeout := time.After(20 * time.Second)
	for renewals := 0; renewals < 2; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended")
			}
			if l, isLease := ev.Object.(*coordinationv1.Lease); isLease && ptr.Deref(l.Spec.HolderIdentity, "") == "a" {
				renewals++
			}
		case <-timeout:
			t.Fatal("timed out waiting for a to renew the Lease")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("lead called %d times, want once", n)
	}
}

// TestLaterErrorsAreLogged: errors after Check (RBAC revoked) do not end
// Run; they reach the logger in ctx, both while standing by and when the
// Lease cannot be given back on shutdown.
func TestLaterErrorsAreLogged(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	leases := cluster.Client.CoordinationV1().Leases(ns)
	rbac := cluster.Client.RbacV1().RoleBindings(ns)

	t.Run("standing by", func(t *testing.T) {
		grant(t, ns, "standby", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "leader-standby"}, "get", "create", "update")
		waitAccess(t, ns, "leader-standby", nil, "update", true)
		now := metav1.NewMicroTime(time.Now())
		if _, err := leases.Create(t.Context(), &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "taken"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		logs := newJournal()
		ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), logs.logger()))
		defer cancel()
		cfg := fast(userClient(t, "leader-standby"), ns, "taken", "a")
		// Observe sees each call's outcome: answers first, then the
		// forbidden reads once the rule is gone.
		cfg.Observe = func(err error) {
			if err != nil {
				logs.record("observe", "error "+err.Error())
			} else {
				logs.record("observe", "ok")
			}
		}
		r := startRun(t, ctx, cfg, func(context.Context) { t.Error("lead called") })
		logs.waitFor(t, "the campaign to begin", 20*time.Second, logged(1, "Attempting to acquire"))
		logs.waitFor(t, "Observe to see the Lease read", 20*time.Second, func(es []entry) bool {
			for _, e := range es {
				if e.who == "observe" && e.what == "ok" {
					return true
				}
			}
			return false
		})
		if err := rbac.Delete(t.Context(), "standby", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAccess(t, ns, "leader-standby", nil, "get", false)
		// Twice: Run goes on campaigning after the first.
		logs.waitFor(t, "the forbidden gets to be logged", 20*time.Second, logged(2, "Error retrieving lease lock", "forbidden"))
		logs.waitFor(t, "Observe to see the forbidden gets", time.Second, func(es []entry) bool {
			for _, e := range es {
				if e.who == "observe" && strings.Contains(e.what, "forbidden") {
					return true
				}
			}
			return false
		})
		cancel()
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	t.Run("releasing", func(t *testing.T) {
		grant(t, ns, "release", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "leader-release"}, "get", "create", "update")
		waitAccess(t, ns, "leader-release", nil, "update", true)
		logs := newJournal()
		ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), logs.logger()))
		defer cancel()
		// Long enough that the lease is not lost (and no release is
		// due) in the moment between revoking and shutting down.
		cfg := fast(userClient(t, "leader-release"), ns, "mine", "a")
		cfg.LeaseDuration, cfg.RenewDeadline = 20*time.Second, 15*time.Second
		led := make(chan struct{})
		r := startRun(t, ctx, cfg, func(ctx context.Context) {
			close(led)
			<-ctx.Done()
		})
		receive(t, "a to lead", led, 20*time.Second)
		if err := rbac.Delete(t.Context(), "release", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAccess(t, ns, "leader-release", nil, "get", false)
		cancel()
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
		logs.waitFor(t, "the failed release to be logged", time.Second, logged(1, "could not give the Lease back", "forbidden"))
	})
}
