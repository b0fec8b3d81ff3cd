package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// unreachableCluster is a cluster whose API server never answers
// (connection refused): its informers never sync.
func unreachableCluster(t *testing.T) (kubernetes.Interface, *reflector.Registry) {
	t.Helper()
	cfg := &rest.Config{Host: "http://127.0.0.1:1", Timeout: 2 * time.Second}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := reflector.New(reflector.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return client, reg
}

// TestAttack42SeedHostileStates: hostile or broken states through Seed
// (what PUT .../state and a start's "state" reach): a namespace the
// configuration does not trust (kube-system), a cluster the Manager
// does not run, a state without names, are refused or ignored, leaving
// the server unknown; a state naming a namespace that no longer exists
// (retired) seeds a stopped server whose next start works.
func TestAttack42SeedHostileStates(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	gone := hub + "-gone" // retired, never created
	cfg := baseConfig(hub)
	cfg.RetiredNamespaces = []string{gone}
	m, _ := runManager(t, Options{Config: cfg, Registry: newRegistry(t)})
	eve := naming.Server{Username: "s42-eve"}

	for _, c := range []struct {
		name    string
		st      spawner.State
		refused bool
	}{
		{"kube-system", spawner.State{Namespace: "kube-system", PodName: "coredns"}, true},
		{"default namespace", spawner.State{Namespace: "default", PodName: "jupyter-s42-eve"}, true},
		{"unknown cluster", spawner.State{Cluster: "nowhere", Namespace: hub, PodName: "jupyter-s42-eve"}, true},
		{"no namespace", spawner.State{PodName: "jupyter-s42-eve"}, false},
		{"no pod name", spawner.State{Namespace: hub}, false},
	} {
		_, err := m.Seed(ctx, Seed{Server: eve, State: c.st})
		if c.refused != errors.Is(err, ErrStateRefused) {
			t.Errorf("%s: Seed = %v, want refused %v", c.name, err, c.refused)
		}
		if !c.refused && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: Seed = %v, want ErrNotFound (a state naming nothing, of an unknown server)", c.name, err)
		}
		if _, err := m.Status(eve); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: eve after the state: %v, want still unknown", c.name, err)
		}
	}

	// A retired namespace that no longer exists.
	st, err := m.Seed(ctx, Seed{Server: eve, State: spawner.State{Namespace: gone, PodName: "old-eve", StartID: "x"}})
	if err != nil || st.Phase != PhaseStopped {
		t.Fatalf("a state in a retired namespace that is gone: %+v, %v; want stopped", st, err)
	}
	if _, _, err := m.Spawn(ctx, eve, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, m, eve, "running", phaseIs(PhaseRunning))
	if st.State.Namespace != hub {
		t.Errorf("eve's start after a state in a gone namespace runs in %q, want %q", st.State.Namespace, hub)
	}
}

// TestAttack42RetiredClusterPlacement: a Placement naming a retired
// cluster, and a ProfileListFunc profile naming one, are refused at the
// start, naming it; the start goes nowhere.
func TestAttack42RetiredClusterPlacement(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	client, reg := unreachableCluster(t)
	cfg := baseConfig(hub)
	cfg.ProfileListFunc = func(context.Context) ([]spawner.Profile, error) {
		return []spawner.Profile{
			{DisplayName: "Here", Slug: "here", Default: true},
			{DisplayName: "Retired", Slug: "retired", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "b"}},
		}, nil
	}
	placed := naming.Server{Username: "p42-placed"}
	m, _ := runManager(t, Options{Config: cfg, ConcurrentSpawnLimit: 1,
		Placement: func(_ context.Context, req PlacementRequest) ([]string, error) {
			if req.Server == placed {
				return []string{"b"}, nil
			}
			if len(req.Profile) > 0 {
				return req.Profile, nil
			}
			return []string{"a"}, nil
		},
		Clusters: []Cluster{
			{Name: "a", Client: cluster.Client, Registry: newRegistry(t)},
			{Name: "b", Client: client, Registry: reg, Retired: true},
		}})
	_, started, err := m.Spawn(ctx, placed, SpawnOptions{Env: hubStart().Env})
	if started || err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("Placement naming retired b: started %v, %v; want refused naming it retired", started, err)
	}
	prof := naming.Server{Username: "p42-profile"}
	_, started, err = m.Spawn(ctx, prof, SpawnOptions{Env: hubStart().Env, UserOptions: map[string]string{"profile": "retired"}})
	if started || err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("a ProfileListFunc profile naming retired b: started %v, %v; want refused naming it retired", started, err)
	}
	if pods := serverPods(t, cluster.Client, hub, placed.Username); len(pods) != 0 {
		t.Errorf("a refused start made pods %v", podNames(pods))
	}
	// A start that takes the one slot of a works.
	ok := naming.Server{Username: "p42-ok"}
	if _, _, err := m.Spawn(ctx, ok, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, m, ok, "running", phaseIs(PhaseRunning)); st.Cluster != "a" {
		t.Errorf("ok runs in %q, want a", st.Cluster)
	}
}

// TestAttack42RemoveEarlierAcrossAnAPIServerOutage: alice's server
// failed under an earlier pod_name_template, its pod kept
// (delete_stopped_pods off); under the new template her start must first
// delete that pod, and the API server is down for 10 s right then: the
// start waits it out, and ends with one pod, under today's name.
func TestAttack42RemoveEarlierAcrossAnAPIServerOutage(t *testing.T) {
	c := cluster
	ctx := ctxTimeout(t, 150*time.Second)
	hub := newNamespace(t)
	keep := false
	before := baseConfig(hub)
	before.PodNameTemplate = "old-{user_server}"
	before.DeleteStoppedPods = &keep
	alice := naming.Server{Username: "o42-alice"}
	m1, stop1 := runManager(t, Options{Config: before, Registry: newRegistry(t)})
	if _, _, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	was := waitStatus(t, m1, alice, "running", phaseIs(PhaseRunning))
	stop1()
	setPodStatus(t, ctx, hub, was.State.PodName, exitWith(1, "Error"))

	after := baseConfig(hub)
	after.DeleteStoppedPods = &keep
	m2, _ := runManager(t, Options{Config: after, Registry: newRegistry(t)})
	st := waitStatus(t, m2, alice, "stopped or failed", func(s Status) bool { return s.Phase == PhaseStopped || s.Phase == PhaseFailed })
	if st.State.PodName != was.State.PodName {
		t.Fatalf("alice after the change: %+v; want her exited pod's names", st)
	}
	if p := serverPods(t, cluster.Client, hub, alice.Username); len(p) != 1 {
		t.Fatalf("alice's exited pod: %v", podNames(p))
	}

	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = c.StartAPIServer()
		}
	})
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	outage := time.Now()
	if _, _, err := m2.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Errorf("Spawn during the outage: %v", err)
	}
	time.Sleep(10*time.Second - time.Since(outage))
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	got := waitStatus(t, m2, alice, "running or failed", func(s Status) bool { return s.Phase == PhaseRunning || s.Phase == PhaseFailed })
	if got.Phase != PhaseRunning || got.State.PodName != "jupyter-o42-alice" {
		t.Fatalf("alice's start across the outage: %s at %q (%s: %s); want running under today's name", got.Phase, got.State.PodName, got.Reason, got.Message)
	}
	eventually(t, 30*time.Second, "alice's earlier pod gone", func() bool {
		p := serverPods(t, cluster.Client, hub, alice.Username)
		return len(p) == 1 && p[0].Name == "jupyter-o42-alice"
	})
}

// TestAttack42SeedDuringStopAndDeleteForever: a hub's state arriving
// while the server stops (its pod held by a finalizer), and while
// DeleteForever waits for its claim, changes nothing: the stop ends with
// the server stopped at its own names, the deletion forgets it, and a
// state naming another pod never leads anything to that pod.
func TestAttack42SeedDuringStopAndDeleteForever(t *testing.T) {
	ctx := ctxTimeout(t, 150*time.Second)
	hub := newNamespace(t)
	cfg := withStorage(baseConfig(hub), "claim-{user_server}")
	m, _ := runManager(t, Options{Config: cfg, Registry: newRegistry(t)})
	alice, bob := naming.Server{Username: "d42-alice"}, naming.Server{Username: "d42-bob"}
	for _, s := range []naming.Server{alice, bob} {
		if _, _, err := m.Spawn(ctx, s, SpawnOptions{Env: hubStart().Env}); err != nil {
			t.Fatal(err)
		}
	}
	was := waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	bobSt := waitStatus(t, m, bob, "running", phaseIs(PhaseRunning))
	const hold = "test.spawnkit.dev/hold"
	pods := cluster.Client.CoreV1().Pods(hub)
	holdPod := func(fin []string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := pods.Get(ctx, was.State.PodName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Finalizers = fin
			_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	holdPod([]string{hold})
	stopped := make(chan error, 1)
	go func() {
		_, err := m.Stop(ctx, alice, spawner.StopOptions{Now: true})
		stopped <- err
	}()
	waitStatus(t, m, alice, "stopping", phaseIs(PhaseStopping))
	hostile := spawner.State{Namespace: hub, PodName: bobSt.State.PodName, PVCName: bobSt.State.PVCName, StartID: "x"}
	if st, err := m.Seed(ctx, Seed{Server: alice, State: hostile}); err != nil || st.State.PodName != was.State.PodName {
		t.Errorf("Seed while stopping: %+v, %v; want alice's own names kept", st.State, err)
	}
	holdPod(nil)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	st, _ := m.Status(alice)
	if st.Phase != PhaseStopped || st.State.PodName != was.State.PodName || st.State.PVCName != was.State.PVCName {
		t.Errorf("alice after the stop: %s at %q, claim %q; want stopped at her own names", st.Phase, st.State.PodName, st.State.PVCName)
	}

	// DeleteForever, its claim held; a Seed meanwhile.
	claims := cluster.Client.CoreV1().PersistentVolumeClaims(hub)
	holdClaim := func(add bool) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c, err := claims.Get(ctx, was.State.PVCName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if add {
				c.Finalizers = append(c.Finalizers, hold)
			} else {
				c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == hold })
			}
			_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	holdClaim(true)
	deleted := make(chan error, 1)
	go func() { deleted <- m.DeleteForever(ctx, alice) }()
	eventually(t, 20*time.Second, "alice's claim terminating", func() bool {
		c, err := claims.Get(ctx, was.State.PVCName, metav1.GetOptions{})
		return err == nil && c.DeletionTimestamp != nil
	})
	if _, err := m.Seed(ctx, Seed{Server: alice, State: hostile}); err != nil && !errors.Is(err, ErrStateRefused) && !errors.Is(err, ErrNotFound) {
		t.Errorf("Seed during DeleteForever: %v", err)
	}
	holdClaim(false)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	// Bob's pod and claim are untouched.
	if p := serverPods(t, cluster.Client, hub, bob.Username); len(p) != 1 || p[0].DeletionTimestamp != nil {
		t.Errorf("bob's pods: %v", podNames(p))
	}
	if c, err := claims.Get(ctx, bobSt.State.PVCName, metav1.GetOptions{}); err != nil || c.DeletionTimestamp != nil {
		t.Errorf("bob's claim touched (%v)", err)
	}
	if st, err := m.Status(bob); err != nil || st.Phase != PhaseRunning {
		t.Errorf("bob: %+v, %v", st, err)
	}
}
