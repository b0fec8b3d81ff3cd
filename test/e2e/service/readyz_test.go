package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// TestBinaryReadyzNamesAMissingNamespace: a configured namespace that does
// not exist makes /readyz fail naming it, and names a profile's missing
// namespace too (the pod informers of such namespaces sync, empty, so
// nothing else would show it); with the configured namespace created the
// replica is ready, the profile's still named as degraded; with both, ok.
func TestBinaryReadyzNamesAMissingNamespace(t *testing.T) {
	c := testcluster.Require(t, cluster)
	e := newBinEnv(t, c, "ns-token")
	suffix := randomHex(t)[:8]
	base, other := "absent-"+suffix, "absent-gpu-"+suffix
	writeTestFile(t, e.config, fmt.Sprintf(`namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
profile_list:
  - display_name: CPU
    default: true
  - display_name: GPU
    kubespawner_override: {namespace: %s}
`, base, other))
	s := e.start(t, "spawnkit-service missing namespace")
	var body string
	testutil.EventuallyEvery(t, poll, binTimeout, "/readyz 503 naming both namespaces", func() error {
		s.mustRun(t)
		var code int
		code, body = s.readyz(t)
		return pending(code == http.StatusServiceUnavailable && strings.Contains(body, "[-]namespaces failed"), fmt.Sprintf("%d %q", code, body))
	})
	for _, want := range []string{`namespace "` + base + `" does not exist`, `namespace "` + other + `" does not exist`, "kubectl create namespace " + base, "[+]informers ok", "[+]manager ok"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz lacks %q:\n%s", want, body)
		}
	}
	create := func(ns string) {
		if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), ns, metav1.DeleteOptions{})
		})
	}
	// The configured namespace there, a profile's missing: ready, the
	// profile's namespace named as degraded (its starts fail, the rest
	// works).
	create(base)
	testutil.EventuallyEvery(t, poll, binTimeout, "/readyz 200 with the profile's namespace degraded", func() error {
		s.mustRun(t)
		code, body := s.readyz(t)
		return pending(code == http.StatusOK && strings.Contains(body, `[!]namespaces degraded: namespace "`+other+`" does not exist`), fmt.Sprintf("%d %q", code, body))
	})
	create(other)
	testutil.EventuallyEvery(t, poll, binTimeout, "/readyz 200, namespaces ok", func() error {
		s.mustRun(t)
		code, body := s.readyz(t)
		return pending(code == http.StatusOK && strings.Contains(body, "[+]namespaces ok"), fmt.Sprintf("%d %q", code, body))
	})
	// The dry run left nothing behind.
	for _, ns := range []string{base, other} {
		secrets, err := c.Client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets.Items {
			if strings.HasPrefix(sec.Name, "spawnkit-readyz-") {
				t.Errorf("the namespace check left Secret %s/%s", ns, sec.Name)
			}
		}
	}
}
