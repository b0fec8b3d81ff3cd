package reflector

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// TestDeniedSurvivesListsBetweenRefusedWatches: under a Role with list
// but not watch, the informers sync (client-go lists when the streamed
// list is refused) and keep syncing by relisting, so Synced and Healthy
// flip back to true between refusals; Denied names the refused verb,
// resource and namespace throughout.
func TestDeniedSurvivesListsBetweenRefusedWatches(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	user := "list-only-" + ns
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "list-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"list"}}},
	}
	if _, err := c.Client.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "list-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "list-only"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding through its own informer.
	testutil.EventuallyEvery(t, 50*time.Millisecond, 30*time.Second, "the binding to take effect", func() error {
		review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "list", Resource: "events"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !review.Status.Allowed {
			return errors.New("not allowed yet")
		}
		return nil
	})
	cfg, err := c.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, Options{Config: cfg})
	defer r.Close()
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
	if !events.Synced() {
		t.Error("Events.Synced is false after WaitForSync")
	}
	for what, denied := range map[string]func() error{
		"pods":   func() error { return pods.Status().Denied },
		"events": events.Denied,
	} {
		want := fmt.Sprintf("cannot watch resource %q in API group \"\" in the namespace %q", what, ns)
		testutil.EventuallyEvery(t, 50*time.Millisecond, 30*time.Second, what+" informer's Denied to name the refused watch", func() error {
			if err := denied(); err == nil || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("Denied = %v, want an error containing %s", err, want)
			}
			return nil
		})
	}
	// A list between refused watches succeeds: Denied must survive it.
	s := pods.Status()
	if !s.Synced || s.Denied == nil {
		t.Errorf("pods: Synced %v, Denied %v; want synced and still denied", s.Synced, s.Denied)
	}
}

func TestDeniedClearedBySuccessOfItsKind(t *testing.T) {
	forbidden := func(verb string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(verb+" refused"))
	}
	h := newHealth(clock.RealClock{})
	h.attempt(callList, errors.New("connection refused"))
	if d := h.status().Denied; d != nil {
		t.Errorf("a network error counted as a refusal: %v", d)
	}
	h.attempt(callWatch, forbidden("watch"))
	h.attempt(callList, nil)
	if d := h.status().Denied; d == nil || !strings.Contains(d.Error(), "watch refused") {
		t.Errorf("a list's success cleared a watch's refusal: Denied = %v", d)
	}
	h.attempt(callWatch, nil)
	if d := h.status().Denied; d != nil {
		t.Errorf("after a watch succeeded: Denied = %v", d)
	}
	h.attempt(callList, forbidden("list"))
	if d := h.status().Denied; d == nil || !strings.Contains(d.Error(), "list refused") {
		t.Errorf("a refused list: Denied = %v", d)
	}
	h.attempt(callWatch, nil) // a streamed list is a watch
	if d := h.status().Denied; d != nil {
		t.Errorf("a watch's success left a list's refusal: Denied = %v", d)
	}
}
