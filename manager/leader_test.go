package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// A LeaderElection New cannot use is an error from New, naming the field.
func TestNewChecksLeaderElection(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name string
		le   LeaderElection
		want string
	}{
		{"no name", LeaderElection{}, "Name"},
		{"renew deadline beyond the lease", LeaderElection{Name: "l", LeaseDuration: 2 * time.Second, RenewDeadline: 3 * time.Second}, "RenewDeadline"},
		{"negative retry period", LeaderElection{Name: "l", RetryPeriod: -time.Second}, "RetryPeriod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			le := tc.le
			_, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns), LeaderElection: &le})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want an error naming %s", err, tc.want)
			}
		})
	}
}

// A Lease the Manager cannot use is an error from Start, never an
// eternal standby: in a namespace that does not exist, and for an
// identity without a rule for leases.
func TestStartWithAnUnusableLease(t *testing.T) {
	ns := newNamespace(t)
	user, err := cluster.UserConfig("manager-no-leases", "spawnkit-tenants")
	if err != nil {
		t.Fatal(err)
	}
	// The user may read pods (the Manager's informer) but not leases.
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := cluster.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pods"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "manager-no-leases"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		client   kubernetes.Interface
		leaseNS  string
		wantText []string
	}{
		{"namespace that does not exist", cluster.Client, "no-such-namespace", []string{"create", "leases", `"no-such-namespace"`}},
		{"no rule for leases", kubernetes.NewForConfigOrDie(user), ns, []string{"get", "leases", `"` + ns + `"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := reflector.New(reflector.Options{Client: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Close()
			m, err := New(Options{Client: tc.client, Registry: reg, Config: baseConfig(ns),
				LeaderElection: &LeaderElection{Namespace: tc.leaseNS, Name: "spawnkit-test", Identity: "a"}})
			if err != nil {
				t.Fatal(err)
			}
			// A hub waits for the Lease while Start fails: it learns why,
			// whichever of the two returns first.
			waited := make(chan error, 1)
			go func() { waited <- m.WaitLeading(ctx) }()
			done := make(chan error, 1)
			go func() { done <- m.Start(ctx) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Start returned nil")
				}
				for _, w := range tc.wantText {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Start's error %q does not name %s", err, w)
					}
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Start is still running (a standby forever) 30s later")
			}
			if _, _, err := m.Spawn(ctx, naming.Server{Username: "x"}, SpawnOptions{}); !errors.Is(err, ErrNotRunning) {
				t.Errorf("Spawn after Start failed = %v; want ErrNotRunning", err)
			}
			for when, err := range map[string]error{"during": <-waited, "after": m.WaitLeading(ctx)} {
				if !errors.Is(err, ErrNotRunning) {
					t.Errorf("WaitLeading %s Start's failure = %v; want ErrNotRunning", when, err)
				}
				for _, w := range tc.wantText {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("WaitLeading %s Start's failure = %v; want Start's error, naming %s", when, err, w)
					}
				}
			}
		})
	}
}

// A term's end stops the Manager taking work, cancels its starts with
// ErrShutdown (detached), and returns, so that the Lease is released,
// only once every operation of the term has ended: a stop in flight may
// finish.
func TestTermEndsAfterItsOperations(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	m, _, _ := unstarted(t, ctx, ns)

	term, endTerm := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() {
		defer close(led)
		m.lead(term, time.Hour)
	}()
	testutil.Eventually(t, 10*time.Second, "leading", testutil.True(m.Leading))
	start, stop := &entry{key: serverKey{user: "starting"}}, &entry{key: serverKey{user: "stopping"}}
	start.mu.Lock()
	startOp, startCtx := m.beginOpLocked(ctx, start, opStart)
	start.mu.Unlock()
	stop.mu.Lock()
	stopOp, stopCtx := m.beginOpLocked(ctx, stop, opStop)
	stop.mu.Unlock()
	if startOp == nil || stopOp == nil {
		t.Fatal("no operation began while leading")
	}
	endTerm()
	<-startCtx.Done()
	if cause := context.Cause(startCtx); !errors.Is(cause, ErrShutdown) || !errors.Is(cause, spawner.ErrDetach) {
		t.Errorf("the start's cause = %v; want ErrShutdown (detached)", cause)
	}
	m.endOp(startOp)
	testutil.Eventually(t, 10*time.Second, "no longer leading", testutil.True(func() bool { return !m.Leading() }))
	e := &entry{key: serverKey{user: "late"}}
	e.mu.Lock()
	if op, _ := m.beginOpLocked(ctx, e, opStart); op != nil {
		t.Error("an operation began after the term ended")
	}
	e.mu.Unlock()
	select {
	case <-led:
		t.Fatal("the term ended while a stop was in flight")
	default:
	}
	if stopCtx.Err() != nil {
		t.Error("the stop in flight was cancelled within its grace")
	}
	m.endOp(stopOp)
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end after its last operation")
	}
}

// A stop that outlasts the grace after its term is cancelled, and the
// term then ends.
func TestTermCancelsAStopAfterItsGrace(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)
	m, _, _ := unstarted(t, ctx, ns)
	term, endTerm := context.WithCancel(ctx)
	led := make(chan struct{})
	go func() {
		defer close(led)
		m.lead(term, 200*time.Millisecond)
	}()
	testutil.Eventually(t, 10*time.Second, "leading", testutil.True(m.Leading))
	e := &entry{key: serverKey{user: "stopping"}}
	e.mu.Lock()
	op, opCtx := m.beginOpLocked(ctx, e, opStop)
	e.mu.Unlock()
	endTerm()
	select {
	case <-opCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stop was never cancelled")
	}
	if !errors.Is(context.Cause(opCtx), ErrShutdown) {
		t.Errorf("the stop's cause = %v; want ErrShutdown", context.Cause(opCtx))
	}
	m.endOp(op)
	<-led
}

// WaitLeading is what a hub waits on before it serves: with
// LeaderElection, Spawn right after WaitReady is ErrNotLeader until the
// Lease is won (the first README snippet's bug), and right after
// WaitLeading it starts. A standby's WaitLeading ends with ErrNotLeader
// when its ctx does, and returns once the leader has gone; a Manager
// that stops while waiting is ErrNotRunning.
func TestWaitLeading(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 90*time.Second)
	le := func(id string) *LeaderElection {
		return &LeaderElection{Name: "spawnkit-wait", Identity: id, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	}
	a, stopA := runManager(t, Options{Config: baseConfig(ns), LeaderElection: le("a")})
	if err := a.WaitLeading(ctx); err != nil {
		t.Fatalf("WaitLeading on the only replica = %v", err)
	}
	if !a.Leading() {
		t.Fatal("WaitLeading returned but the replica does not lead")
	}
	if _, _, err := a.Spawn(ctx, naming.Server{Username: "wait-a"}, SpawnOptions{}); err != nil {
		t.Fatalf("Spawn right after WaitLeading = %v", err)
	}

	reg2, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg2.Close)
	b, stopB := runManager(t, Options{Config: baseConfig(ns), Registry: reg2, LeaderElection: le("b")})
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = b.WaitLeading(short)
	cancel()
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitLeading on the standby, ctx ended = %v; want ErrNotLeader with the deadline", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- b.WaitLeading(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitLeading on the standby returned %v while the leader runs", err)
	case <-time.After(300 * time.Millisecond):
	}
	stopA()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitLeading on the standby after the leader went = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the standby's WaitLeading did not return after the leader went")
	}
	if _, _, err := b.Spawn(ctx, naming.Server{Username: "wait-b"}, SpawnOptions{}); err != nil {
		t.Errorf("Spawn on the new leader after WaitLeading = %v", err)
	}

	// A Manager that stops while a WaitLeading waits ends the wait.
	reg3, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg3.Close)
	c, stopC := runManager(t, Options{Config: baseConfig(ns), Registry: reg3, LeaderElection: le("c")})
	go func() { waited <- c.WaitLeading(ctx) }()
	// c runs as a standby: its WaitLeading waits past WaitReady.
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	stopC()
	select {
	case err := <-waited:
		if !errors.Is(err, ErrNotRunning) {
			t.Errorf("WaitLeading of a Manager that stopped = %v; want ErrNotRunning", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitLeading did not return when its Manager stopped")
	}
	stopB()
}
