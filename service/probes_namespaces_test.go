package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
)

// TestReadyzNamespaces: ProbeOptions.Namespaces fails /readyz with its
// error on a line of its own; a failure is asked again after PingTimeout
// (so a namespace created to mend it counts at once), a success is reused
// for NamespacesEvery (probes need no token: they must not drive API
// calls).
func TestReadyzNamespaces(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "probes-ns-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(t.Context()), ns.Name, metav1.DeleteOptions{})
	})
	registry, err := reflector.New(reflector.Options{Client: c.Client})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Options{Client: c.Client, Registry: registry, Config: mustConfig(t, "namespace: "+ns.Name+"\n")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.Start(ctx); err != nil {
			t.Errorf("Start = %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		registry.Close()
	})

	var calls atomic.Int32
	var mu sync.Mutex
	failed := errors.New(`namespace "x" does not exist`)
	var degraded error
	const retry = 300 * time.Millisecond
	probes, err := Probes(ProbeOptions{Manager: m, PingTimeout: retry, NamespacesEvery: time.Hour, Namespaces: func(context.Context) (error, error) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return failed, degraded
	}})
	if err != nil {
		t.Fatal(err)
	}
	set := func(f, d error) {
		mu.Lock()
		failed, degraded = f, d
		mu.Unlock()
		// The answer before is reused for PingTimeout: the probes have no
		// clock to step, so that time passes.
		time.Sleep(retry + 50*time.Millisecond)
	}
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		probes.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	waitProbe(t, probes, http.StatusServiceUnavailable, `[-]namespaces failed: namespace "x" does not exist`)
	before := calls.Load()
	for range 5 {
		probe()
	}
	if got := calls.Load(); got != before {
		t.Errorf("5 probes at once asked %d more times, want the failure reused for PingTimeout", got-before)
	}

	// A profile's namespace: shown, the replica stays ready.
	set(nil, errors.New(`namespace "gpu" does not exist`))
	if code, body := probe(); code != http.StatusOK || !strings.Contains(body, `[!]namespaces degraded: namespace "gpu" does not exist`) {
		t.Errorf("/readyz with a degraded namespace = %d %q, want 200 naming it", code, body)
	}

	// No answer in time: shown, asked again at the next probe.
	set(nil, fmt.Errorf(`namespace "x": %w: context deadline exceeded`, ErrNotChecked))
	probe()
	n := calls.Load()
	if code, body := probe(); code != http.StatusOK || !strings.Contains(body, "[!]namespaces degraded") || calls.Load() != n+1 {
		t.Errorf("/readyz when not checked = %d %q, %d calls; want 200, degraded, asked every probe", code, body, calls.Load()-n)
	}

	set(nil, nil)
	if code, _ := probe(); code != http.StatusOK {
		t.Errorf("/readyz = %d after the namespaces were mended and PingTimeout passed, want 200", code)
	}
	after := calls.Load()
	// Past PingTimeout (when a failure would be asked again), a success
	// is still reused: only wall time shows it, the probes have no clock.
	time.Sleep(retry + 50*time.Millisecond)
	for range 5 {
		probe()
	}
	if got := calls.Load(); got != after {
		t.Errorf("probes asked %d more times within NamespacesEvery of a success, want 0", got-after)
	}
}
