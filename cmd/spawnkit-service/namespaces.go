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
	"github.com/spawnkit/spawnkit/service"
	"github.com/spawnkit/spawnkit/spawner"
)

// namespaceCheck is the probes' Namespaces: the namespaces a start may
// use (the configured one and each a profile names; not the retired ones,
// which may rightly be gone, nor any with enable_user_namespaces, where a
// start creates the user's) exist in each cluster that takes starts.
// failed: the configured namespace is missing (in every cluster, with
// several), so no start can succeed. degraded: a profile's namespace, or
// another cluster's configured one, is missing: the rest works, and the
// replica stays ready, as with a cluster that is away.
//
// It asks with a dry-run create of a Secret (the API token's), which the
// service's Role allows (secrets: create) and which persists nothing.
// Reading the Namespace would need a cluster-wide rule the service
// otherwise has no use for. With rights there (a cluster-wide binding, an
// admin's kubeconfig) the API server's namespace admission answers 404 for
// a missing namespace and 403 for one being deleted. Under a namespaced
// Role, RBAC answers first, 403 for a missing namespace (no binding can be
// there): a start there would fail the same way, so that is reported too,
// naming both causes. Any other answer (a quota, a webhook's refusal of
// the probe Secret) says nothing about the namespace and passes; no
// answer in time is service.ErrNotChecked.
func namespaceCheck(cs []kubeCluster, m *manager.Manager, named bool) func(ctx context.Context) (failed, degraded error) {
	return func(ctx context.Context) (failed, degraded error) {
		var bases, others []error
		active := 0
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
			active++
			for i, ns := range startNamespaces(f) {
				err := namespaceExists(ctx, c.client, ns)
				if err == nil {
					continue
				}
				if named {
					err = fmt.Errorf("cluster %q: %w", c.name, err)
				}
				if i == 0 && !errors.Is(err, service.ErrNotChecked) {
					bases = append(bases, err) // the configured namespace comes first
				} else {
					others = append(others, err)
				}
			}
		}
		if len(bases) > 0 && len(bases) == active {
			return errors.Join(bases...), errors.Join(others...)
		}
		return nil, errors.Join(append(bases, others...)...)
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
	case ctx.Err() != nil:
		return fmt.Errorf("namespace %q: %w: %w", ns, service.ErrNotChecked, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q does not exist: create it (kubectl create namespace %s) or change namespace in the configuration; every start there would fail", ns, ns)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "being terminated"):
		return fmt.Errorf("namespace %q is being deleted: every start there would fail", ns)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource"):
		// RBAC's refusal; a quota's or a webhook's 403 is about the probe.
		return fmt.Errorf("namespace %q: the service may not create Secrets there, so every start there would fail: the namespace does not exist, or the service's Role is not bound in it (deploy/role.yaml): %w", ns, err)
	}
	return nil
}
