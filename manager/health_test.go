package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// TestHealthFollowsStart: a Manager is not ready before Start, naming
// why; ready once Start has recovered the namespace; and not ready again
// once Start has returned. Live holds throughout: a Manager that is not
// running is not wedged.
func TestHealthFollowsStart(t *testing.T) {
	ns := newNamespace(t)
	m, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Health()
	if h.Running || h.Leading || h.Electing || h.Pods.Synced {
		t.Errorf("Health before Start = %+v, want nothing running, leading or synced", h)
	}
	err = h.Ready()
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "has not recovered") || !strings.Contains(err.Error(), "pod informer has not synced") {
		t.Errorf("Ready before Start = %v, want ErrNotRunning naming the recovery and the pod informer", err)
	}
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live before Start = %v, want nil", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	if err := m.waitReady(ctxTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	h = m.Health()
	if err := h.Ready(); err != nil || !h.Running || !h.Leading || !h.Pods.Synced {
		t.Errorf("Health after recovery = %+v, Ready %v; want running, leading, synced and ready", h, err)
	}
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live of a running Manager = %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start = %v", err)
	}
	if err := m.Health().Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready after Start returned = %v, want ErrNotRunning", err)
	}
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live after Start returned = %v, want nil", err)
	}
}

// TestLiveReportsAHeldLock: while the Manager's lock is held (as by a
// deadlock), Live fails once its ctx ends, naming the lock and the cause;
// it recovers as the lock is released.
func TestLiveReportsAHeldLock(t *testing.T) {
	m, _ := runManager(t, Options{Config: baseConfig(newNamespace(t))})
	m.mu.Lock()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	began := time.Now()
	err := m.Live(ctx)
	took := time.Since(began)
	cancel()
	m.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "lock") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Live with the lock held = %v, want an error naming the lock, wrapping the deadline", err)
	}
	if took > 5*time.Second {
		t.Errorf("Live with the lock held returned after %s, not when its ctx ended", took)
	}
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live with the lock free = %v", err)
	}
}

// TestLiveReportsStalledWorkers wedges the one worker inside a reconcile
// (it waits for a server's lock, which the test holds) while another
// server waits in the queue: Live is nil until the worker has been
// inside that reconcile for over stallAfter on the Manager's clock, then
// names the stall, and is nil again once the worker moves on.
func TestLiveReportsStalledWorkers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	m, _ := runManager(t, Options{Config: baseConfig(newNamespace(t)), Workers: 1, Clock: clk})
	wedged, err := m.entryFor(naming.Server{Username: "h-wedged"}, m.cells[0])
	if err != nil {
		t.Fatal(err)
	}
	wedged.mu.Lock()
	locked := true
	defer func() {
		if locked {
			wedged.mu.Unlock()
		}
	}()
	m.enqueue(wedged.key)
	testutil.Eventually(t, 10*time.Second, "the worker inside the wedged reconcile", testutil.True(func() bool { return m.busy.Load() == 1 }))
	m.enqueue(serverKey{user: "h-waiting"})
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live with the worker busy for no time = %v, want nil", err)
	}
	clk.Step(stallAfter - time.Second)
	if err := m.Live(ctxTimeout(t, time.Second)); err != nil {
		t.Errorf("Live with the worker busy for just under %s = %v, want nil", stallAfter, err)
	}
	clk.Step(2 * time.Second)
	err = m.Live(ctxTimeout(t, time.Second))
	if err == nil || !strings.Contains(err.Error(), "1 servers wait to be reconciled") || !strings.Contains(err.Error(), "all 1 workers") {
		t.Errorf("Live with the worker stuck for over %s and work queued = %v, want the stall named", stallAfter, err)
	}
	wedged.mu.Unlock()
	locked = false
	testutil.Eventually(t, 10*time.Second, "Live nil once the worker moves on", testutil.True(func() bool { return m.Live(ctxTimeout(t, time.Second)) == nil }))
}

// TestDeleteForeverOfAServerNotKnown deletes servers that a Manager
// forgot after its Retention, and that another Manager never knew: the
// claim goes when delete_pvc is on (the default), and stays when it is
// off.
func TestDeleteForeverOfAServerNotKnown(t *testing.T) {
	cases := []struct {
		name      string
		deletePVC *bool
		wantGone  bool
	}{
		{"delete_pvc default", nil, true},
		{"delete_pvc false", ptr.To(false), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(t)
			cfg := baseConfig(ns)
			cfg.StoragePVCEnsure = true
			cfg.StorageCapacity = resource.MustParse("1Gi")
			cfg.DeletePVC = c.deletePVC
			ctx := ctxTimeout(t, 120*time.Second)
			forgotten, unknown := naming.Server{Username: "h-forgotten"}, naming.Server{Username: "h-unknown"}
			claims := map[naming.Server]string{}

			m1, stop1 := runManager(t, Options{Config: cfg, Retention: 200 * time.Millisecond, ResyncInterval: 100 * time.Millisecond})
			for _, s := range []naming.Server{forgotten, unknown} {
				if _, _, err := m1.Spawn(ctx, s, SpawnOptions{}); err != nil {
					t.Fatal(err)
				}
				waitStatus(t, m1, s, "running", phaseIs(PhaseRunning))
				st, err := m1.Stop(ctx, s, spawner.StopOptions{Now: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, st.State.PVCName, metav1.GetOptions{}); err != nil {
					t.Fatalf("the claim of %s after its stop: %v", s.Username, err)
				}
				claims[s] = st.State.PVCName
			}
			testutil.Eventually(t, 10*time.Second, "the stopped server forgotten", testutil.True(func() bool {
				_, err := m1.Status(forgotten)
				return errors.Is(err, ErrNotFound)
			}))
			if err := m1.DeleteForever(ctx, forgotten); err != nil {
				t.Errorf("DeleteForever of a forgotten server = %v", err)
			}
			checkClaim(t, ctx, ns, claims[forgotten], c.wantGone)
			stop1()

			m2, _ := runManager(t, Options{Config: cfg})
			if _, err := m2.Status(unknown); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a new Manager's Status of a stopped server = %v, want ErrNotFound (it never knew it)", err)
			}
			if err := m2.DeleteForever(ctx, unknown); err != nil {
				t.Errorf("DeleteForever of a server the Manager never knew = %v", err)
			}
			checkClaim(t, ctx, ns, claims[unknown], c.wantGone)
		})
	}
}

// checkClaim checks, after a DeleteForever returned, that the claim is
// going (and waits until it is gone), or that it is still there and not
// being deleted.
func checkClaim(t *testing.T, ctx context.Context, ns, name string, wantGone bool) {
	t.Helper()
	claims := cluster.Client.CoreV1().PersistentVolumeClaims(ns)
	if !wantGone {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.DeletionTimestamp != nil {
			t.Errorf("claim %s after DeleteForever with delete_pvc off: %v (deleting: %v), want it kept", name, err, err == nil && c.DeletionTimestamp != nil)
		}
		return
	}
	if c, err := claims.Get(ctx, name, metav1.GetOptions{}); err == nil && c.DeletionTimestamp == nil {
		t.Errorf("claim %s is not being deleted after DeleteForever returned", name)
	}
	testutil.Eventually(t, 30*time.Second, "claim "+name+" gone", testutil.True(func() bool {
		_, err := claims.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}))
}
