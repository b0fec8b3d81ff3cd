package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
)

// TestReadyzNamesAnUnreachableLease: a standby whose Lease rule is
// revoked never stays silently unready: /readyz names the Lease error,
// and says "standing by" while the Lease is merely held by another.
func TestReadyzNamesAnUnreachableLease(t *testing.T) {
	c := testcluster.Require(t, cluster)
	e := newE2E(t)
	const lease = "readyz-lease"
	leader, _ := startElecting(t, c.Client, e.ns, lease, "leader")
	waitProbe(t, leader, http.StatusOK, "[+]leader ok")

	standby, logs := startElecting(t, e.service, e.ns, lease, "standby")
	waitProbe(t, standby, http.StatusServiceUnavailable, "[-]leader failed: standing by: another replica holds the Lease")
	// The campaign has begun (after the Manager's checks of the Lease):
	// from now on the standby only reads the Lease, and goes on running
	// when it cannot.
	testutil.EventuallyEvery(t, 100*time.Millisecond, e2eTimeout, "the standby's campaign", testutil.True(func() bool {
		return logs.has("Attempting to acquire")
	}))

	// The leader-election Role's binding (see serviceIdentity) goes: the
	// standby's next read of the Lease is forbidden.
	if err := c.Client.RbacV1().RoleBindings(e.ns).Delete(t.Context(), "spawnkit-service-leader-election", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	body := waitProbe(t, standby, http.StatusServiceUnavailable, "[-]leader failed: cannot reach the Lease since")
	for _, want := range []string{"forbidden", "leases", e.ns} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz does not name %q:\n%s", want, body)
		}
	}
}

// startElecting runs a Manager with leader election on lease in ns, as
// client, and returns its probe handler and its log; the test's cleanup
// stops it.
func startElecting(t *testing.T, client kubernetes.Interface, ns, lease, identity string) (http.Handler, *lineLog) {
	t.Helper()
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Options{Client: client, Registry: registry,
		Config: mustConfig(t, "namespace: "+ns+"\n"),
		LeaderElection: &manager.LeaderElection{Name: lease, Identity: identity,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lineLog{}
	ctx, cancel := context.WithCancel(logr.NewContext(t.Context(), funcr.New(logs.add, funcr.Options{})))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Start = %v", identity, err)
		}
		registry.Close()
	})
	probes, err := Probes(ProbeOptions{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	return probes, logs
}

// lineLog keeps a logger's lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *lineLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// waitProbe waits until /readyz answers code with a body holding want,
// and returns the body.
func waitProbe(t *testing.T, probes http.Handler, code int, want string) string {
	t.Helper()
	var body string
	testutil.EventuallyEvery(t, 100*time.Millisecond, e2eTimeout, "/readyz "+want, func() error {
		rec := httptest.NewRecorder()
		probes.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		data, _ := io.ReadAll(rec.Body)
		body = string(data)
		if rec.Code != code || !strings.Contains(body, want) {
			return fmt.Errorf("%d %s", rec.Code, body)
		}
		return nil
	})
	return body
}

func mustConfig(t *testing.T, yaml string) kubespawner.Config {
	t.Helper()
	cfg, err := kubespawner.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
