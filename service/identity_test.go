package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// shippedRoles are the Roles of deploy/role.yaml, as a platform team
// applies them.
func shippedRoles(t *testing.T) []rbacv1.Role {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "deploy", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var roles []rbacv1.Role
	for {
		var r rbacv1.Role
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/role.yaml: %v", err)
		}
		if r.Kind != "Role" {
			t.Fatalf("deploy/role.yaml has a %s; want only Roles", r.Kind)
		}
		roles = append(roles, r)
	}
	if len(roles) == 0 {
		t.Fatal("deploy/role.yaml has no Role")
	}
	return roles
}

// serviceIdentity is a client for a user with nothing but deploy/role.yaml's
// Roles in ns: the service's end-to-end tests run as it, so the Role
// they pass under is the Role the manifests ship (and the one z2jh gives
// its hub, plus a Lease rule).
func serviceIdentity(t *testing.T, c *testcluster.Cluster, ns string) kubernetes.Interface {
	t.Helper()
	user := "spawnkit-service-" + ns
	for _, r := range shippedRoles(t) {
		r.Namespace = ns
		if _, err := c.Client.RbacV1().Roles(ns).Create(t.Context(), &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := c.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer's cache follows the bindings within moments: wait
	// until the user holds every verb of every rule.
	for _, r := range shippedRoles(t) {
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					waitAllowed(t, client, authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: verb, Group: rule.APIGroups[0], Resource: res})
				}
			}
		}
	}
	return client
}

// waitAllowed waits until client may do attrs.
func waitAllowed(t *testing.T, client kubernetes.Interface, attrs authorizationv1.ResourceAttributes) {
	t.Helper()
	testutil.EventuallyEvery(t, 50*time.Millisecond, 30*time.Second, fmt.Sprintf("leave to %s %s in %s", attrs.Verb, attrs.Resource, attrs.Namespace), func() error {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !review.Status.Allowed {
			return errors.New("not allowed yet")
		}
		return nil
	})
}
