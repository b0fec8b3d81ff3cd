package main

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// clusterWait bounds each wait on the cluster.
const clusterWait = 60 * time.Second

// suffix is a random lower-case suffix for names in the shared cluster.
func suffix() string { return strings.ToLower(rand.Text())[:8] }

// TestNamespaceExistsUnderARole: under a namespaced Role (deploy/'s) a
// missing namespace is refused by RBAC before admission; the check still
// fails, naming both causes. A namespace being deleted is named as such.
func TestNamespaceExistsUnderARole(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "nscheck-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	user := "nscheck-" + suffix()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "secrets"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}}}}
	if _, err := c.Client.RbacV1().Roles(ns.Name).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "secrets"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "secrets"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user, APIGroup: "rbac.authorization.k8s.io"}}}
	if _, err := c.Client.RbacV1().RoleBindings(ns.Name).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.UserConfig(user, "spawnkit-test-users")
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	testutil.Eventually(t, clusterWait, "the Role to apply", func() error {
		return namespaceExists(ctx, client, ns.Name)
	})
	missing := "absent-" + suffix()
	err = namespaceExists(ctx, client, missing)
	if err == nil || !strings.Contains(err.Error(), `namespace "`+missing+`"`) || !strings.Contains(err.Error(), "does not exist, or the service's Role is not bound in it") {
		t.Errorf("namespaceExists(%s) under a Role = %v, want both causes named", missing, err)
	}

	// Held in Terminating by a finalizer on an object inside it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hold", Finalizers: []string{"spawnkit.test/hold"}}}
	if _, err := c.Client.CoreV1().ConfigMaps(ns.Name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.Client.CoreV1().ConfigMaps(ns.Name).Patch(context.WithoutCancel(ctx), "hold", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, clusterWait, "the terminating namespace named", func() error {
		err := namespaceExists(ctx, c.Client, ns.Name)
		if err == nil {
			return errors.New("the check passed")
		}
		if !strings.Contains(err.Error(), "is being deleted") {
			return err
		}
		return nil
	})
}
