package leader_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

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
	testutil.EventuallyEvery(t, 50*time.Millisecond, 20*time.Second, fmt.Sprintf("%s's %s on leases in %s to be allowed=%t", user, verb, ns, allowed), func() error {
		review, err := cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != allowed {
			return fmt.Errorf("allowed=%t", review.Status.Allowed)
		}
		return nil
	})
}
