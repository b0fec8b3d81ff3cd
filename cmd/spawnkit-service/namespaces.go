package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/spawner"
)

// namespaceCheck is the probes' Namespaces: every namespace a start may
// use (the configured one and each a profile names; not the retired ones,
// which may rightly be gone, nor any with enable_user_namespaces, where a
// start creates the user's) exists in each cluster that takes starts.
//
// It asks with a dry-run create of a Secret (the API token's), which the
// service's Role allows (secrets: create) and which persists nothing.
// Reading the Namespace would need a cluster-wide rule the service
// otherwise has no use for. With rights there (a cluster-wide binding, an
// admin's kubeconfig) the API server's namespace admission answers 404 for
// a missing namespace and 403 for one being deleted. Under a namespaced
// Role, RBAC answers first, 403 for a missing namespace (no binding can be
// there): a start there would fail the same way, so that is reported too,
// naming both causes. Any other error (a webhook, an unreachable API
// server) says nothing about the namespace and is left to the other
// checks.
func namespaceCheck(cs []kubeCluster, m *manager.Manager, named bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, c := range cs {
			if c.retired {
				continue
			}
			f := m.Factory()
			if named {
				var ok bool
				if f, ok = m.ClusterFactory(c.name); !ok {
					continue
				}
			}
			for _, ns := range startNamespaces(f) {
				if err := namespaceExists(ctx, c.client, ns); err != nil {
					if named {
						err = fmt.Errorf("cluster %q: %w", c.name, err)
					}
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	}
}

// startNamespaces are the namespaces f may start servers in, as far as
// they can be listed.
func startNamespaces(f *spawner.Factory) []string {
	cfg := f.Config()
	if cfg.EnableUserNamespaces {
		return nil
	}
	all, _, _ := f.Namespaces()
	return slices.DeleteFunc(slices.Clone(all), func(ns string) bool {
		return ns != cfg.Namespace && slices.Contains(cfg.RetiredNamespaces, ns) || strings.Contains(ns, "{")
	})
}

func namespaceExists(ctx context.Context, client kubernetes.Interface, ns string) error {
	probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "spawnkit-readyz-"}}
	_, err := client.CoreV1().Secrets(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q does not exist: create it (kubectl create namespace %s) or change namespace in the configuration; every start there would fail", ns, ns)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "being terminated"):
		return fmt.Errorf("namespace %q is being deleted: every start there would fail", ns)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("namespace %q: the service may not create Secrets there, so every start there would fail: the namespace does not exist, or the service's Role is not bound in it (deploy/role.yaml): %w", ns, err)
	}
	return nil
}
