package leader_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// TestLosingTheLeaseCancelsLead: another holder takes the Lease (it is
// deleted and recreated for "thief"); the leader cannot renew, its lead's
// ctx ends, and Run campaigns again and leads once the thief's Lease has
// expired.
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

// TestUnusableLease: a Lease that cannot be used is an error from Check
// and from Run (not a standby), naming the verb, the Lease and what to
// do; a user granted exactly get, create and update leads.
func TestUnusableLease(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	grant(t, ns, "lease-get", rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "lease-readers"}, "get")
	grant(t, ns, "lease-elect", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "leader-elector"}, "get", "create", "update")
	waitAccess(t, ns, "leader-reader", []string{"lease-readers"}, "get", true)
	for _, verb := range []string{"get", "create", "update"} {
		waitAccess(t, ns, "leader-elector", nil, verb, true)
	}
	now := metav1.NewMicroTime(time.Now())
	if _, err := cluster.Client.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody := userClient(t, "leader-nobody", "tenants")
	reader := userClient(t, "leader-reader", "tenants", "lease-readers")
	elector := userClient(t, "leader-elector", "tenants")

	for _, tc := range []struct {
		name      string
		client    kubernetes.Interface
		ns, lease string
		verb      string
		hint      string
		is        func(error) bool
	}{
		{"namespace does not exist", cluster.Client, "leader-no-such-namespace", "l", "create", `create namespace "leader-no-such-namespace"`, apierrors.IsNotFound},
		{"nothing granted", nobody, ns, "fresh", "get", "grant this replica's user get, create and update", apierrors.IsForbidden},
		{"get only, no Lease", reader, ns, "fresh", "create", "grant this replica's user get, create and update", apierrors.IsForbidden},
		{"get only, Lease exists", reader, ns, "held", "update", "grant this replica's user get, create and update", apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fast(tc.client, tc.ns, tc.lease, "a")
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				for _, want := range []string{"cannot " + tc.verb + " ", "leases.coordination.k8s.io", fmt.Sprintf("%q", tc.lease), fmt.Sprintf("namespace %q", tc.ns), tc.hint} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not say %q", what, err, want)
					}
				}
				if !tc.is(err) {
					t.Errorf("%s: error %q does not wrap the API error", what, err)
				}
			}
			check("Check", leader.Check(t.Context(), cfg))
			// A Run that stood by would return nil when this ends.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			check("Run", leader.Run(ctx, cfg, func(context.Context) { t.Error("lead called") }))
		})
	}

	t.Run("get, create and update granted", func(t *testing.T) {
		cfg := fast(elector, ns, "elected", "a")
		if err := leader.Check(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		led := make(chan struct{})
		r := startRun(t, ctx, cfg, func(ctx context.Context) {
			close(led)
			<-ctx.Done()
		})
		receive(t, "the elector to lead", led, 20*time.Second)
		cancel()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		lease, err := cluster.Client.CoordinationV1().Leases(ns).Get(t.Context(), "elected", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
			t.Errorf("holder after shutdown = %q, want the Lease given back", h)
		}
	})
}

// TestInvalidConfig: a Config that cannot work is an error naming the
// field, from Check and from Run, before any API call (the client's
// server does not exist).
func TestInvalidConfig(t *testing.T) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	valid := leader.Config{Client: client, Namespace: "ns", Name: "l", Identity: "a"}
	for _, tc := range []struct {
		name   string
		change func(*leader.Config)
		want   string
	}{
		{"nil Client", func(c *leader.Config) { c.Client = nil }, "Client is required"},
		{"no Namespace", func(c *leader.Config) { c.Namespace = "" }, "Namespace is required"},
		{"no Name", func(c *leader.Config) { c.Name = "" }, "Name is required"},
		{"no Identity", func(c *leader.Config) { c.Identity = "" }, "Identity is required"},
		{"LeaseDuration not above RenewDeadline", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 2*time.Second, 2*time.Second, 250*time.Millisecond
		}, "LeaseDuration (2s) must be greater than RenewDeadline (2s)"},
		{"LeaseDuration below the default RenewDeadline", func(c *leader.Config) { c.LeaseDuration = 5 * time.Second },
			"LeaseDuration (5s) must be greater than RenewDeadline (10s)"},
		{"RenewDeadline within RetryPeriod's jitter", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 2*time.Second, time.Second, time.Second
		}, "RenewDeadline (1s) must be greater than RetryPeriod × 1.2 (1.2s)"},
		{"LeaseDuration under a second", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 900*time.Millisecond, 600*time.Millisecond, 100*time.Millisecond
		}, "LeaseDuration is 900ms, must be at least 1s"},
		{"negative RetryPeriod", func(c *leader.Config) { c.RetryPeriod = -time.Second }, "RetryPeriod is -1s, must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.change(&cfg)
			for what, err := range map[string]error{
				"Check": leader.Check(t.Context(), cfg),
				"Run":   leader.Run(t.Context(), cfg, func(context.Context) { t.Error("lead called") }),
			} {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %v, want one saying %q", what, err, tc.want)
				}
			}
		})
	}
	t.Run("nil lead", func(t *testing.T) {
		if err := leader.Run(t.Context(), valid, nil); err == nil || !strings.Contains(err.Error(), "lead function") {
			t.Errorf("error %v, want one about the lead function", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		// Valid: Check gets as far as the API call, which fails.
		err := leader.Check(t.Context(), valid)
		if err == nil || strings.Contains(err.Error(), "invalid Config") || !strings.Contains(err.Error(), "cannot get ") {
			t.Errorf("error %v, want a failed get", err)
		}
	})
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
		r := startRun(t, ctx, fast(userClient(t, "leader-standby"), ns, "taken", "a"), func(context.Context) { t.Error("lead called") })
		logs.waitFor(t, "the campaign to begin", 20*time.Second, logged(1, "Attempting to acquire"))
		if err := rbac.Delete(t.Context(), "standby", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAccess(t, ns, "leader-standby", nil, "get", false)
		// Twice: Run goes on campaigning after the first.
		logs.waitFor(t, "the forbidden gets to be logged", 20*time.Second, logged(2, "Error retrieving lease lock", "forbidden"))
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

// journal records what happened, in order, and lets a test wait for it.
type journal struct {
	mu sync.Mutex // guards entries and changed
	// entries in the order recorded.
	entries []entry
	// changed is closed, and replaced, at each record.
	changed chan struct{}
}

type entry struct {
	who, what string
	at        time.Time
}

func (e entry) String() string { return e.who + " " + e.what + " at " + e.at.Format("15:04:05.000") }

func newJournal() *journal { return &journal{changed: make(chan struct{})} }

func (j *journal) record(who, what string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, entry{who: who, what: what, at: time.Now()})
	close(j.changed)
	j.changed = make(chan struct{})
}

// logger records each log line as an entry of "log".
func (j *journal) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { j.record("log", prefix+" "+args) }, funcr.Options{})
}

// waitFor waits until cond holds for the entries, and returns them.
func (j *journal) waitFor(t *testing.T, what string, timeout time.Duration, cond func([]entry) bool) []entry {
	t.Helper()
	deadline := time.After(timeout)
	for {
		j.mu.Lock()
		entries, changed := append([]entry(nil), j.entries...), j.changed
		j.mu.Unlock()
		if cond(entries) {
			return entries
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s; journal: %v", timeout, what, entries)
		}
	}
}

// find is the index of who's first entry what, or -1.
func (j *journal) find(who, what string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, e := range j.entries {
		if e.who == who && e.what == what {
			return i
		}
	}
	return -1
}

// whats lists the entries as "who what".
func (j *journal) whats() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := make([]string, len(j.entries))
	for i, e := range j.entries {
		s[i] = e.who + " " + e.what
	}
	return s
}

func has(who, what string) func([]entry) bool {
	return func(entries []entry) bool {
		for _, e := range entries {
			if e.who == who && e.what == what {
				return true
			}
		}
		return false
	}
}

// logged holds once n log lines each contain every part.
func logged(n int, parts ...string) func([]entry) bool {
	return func(entries []entry) bool {
		found := 0
	lines:
		for _, e := range entries {
			for _, p := range parts {
				if e.who != "log" || !strings.Contains(e.what, p) {
					continue lines
				}
			}
			found++
		}
		return found >= n
	}
}

// run is one Run in its goroutine; the test's cleanup waits for it (the
// test's context, which its ctx derives from, has ended by then).
type run struct {
	done chan struct{}
	err  error // set before done is closed
}

func startRun(t *testing.T, ctx context.Context, cfg leader.Config, lead func(context.Context)) *run {
	r := &run{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = leader.Run(ctx, cfg, lead)
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// wait returns Run's error once it has returned (its ctx having ended).
func (r *run) wait(t *testing.T) error {
	t.Helper()
	receive(t, "Run to return", r.done, 30*time.Second)
	return r.err
}

func receive(t *testing.T, what string, c <-chan struct{}, timeout time.Duration) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := cluster.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "leader-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrapClient is a client whose requests are first shown to see; an
// error from it fails the request.
func wrapClient(t *testing.T, cfg *rest.Config, see func(*http.Request) error) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if err := see(r); err != nil {
				return nil, err
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func userClient(t *testing.T, name string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg, err := cluster.UserConfig(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// grant makes a Role allowing verbs on leases in ns and binds it, both
// named name, to subject.
func grant(t *testing.T, ns, name string, subject rbacv1.Subject, verbs ...string) {
	t.Helper()
	rbac := cluster.Client.RbacV1()
	if _, err := rbac.Roles(ns).Create(t.Context(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if subject.Kind != rbacv1.ServiceAccountKind {
		subject.APIGroup = rbacv1.GroupName
	}
	if _, err := rbac.RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAccess waits until the API server's authorizer, which learns of
// RBAC changes through an informer, says whether user may verb leases
// in ns.
func waitAccess(t *testing.T, ns, user string, groups []string, verb string, allowed bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		review, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed == allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may %s leases in %s: %v, want %v", user, verb, ns, review.Status.Allowed, allowed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
