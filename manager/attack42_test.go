package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
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
	cfg.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) {
		return []kubespawner.Profile{
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
	ctx := ctxTimeout(t, 240*time.Second)
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
	// A loaded CI machine takes a while to bring the API server and the
	// informers back: the start's API calls may retry for 120 s.
	after.K8sAPIRequestRetryTimeout = 120
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
	// An outage of ten seconds: its length is the point, no signal ends it.
	time.Sleep(10*time.Second - time.Since(outage))
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	var got Status
	testutil.Eventually(t, 120*time.Second, "alice running or failed after the outage", testutil.True(func() bool {
		got, _ = m2.Status(alice)
		return got.Phase == PhaseRunning || got.Phase == PhaseFailed
	}))
	if got.Phase != PhaseRunning || got.State.PodName != "jupyter-o42-alice" {
		t.Fatalf("alice's start across the outage: %s at %q (%s: %s); want running under today's name", got.Phase, got.State.PodName, got.Reason, got.Message)
	}
	testutil.Eventually(t, 30*time.Second, "alice's earlier pod gone", testutil.True(func() bool {
		p := serverPods(t, cluster.Client, hub, alice.Username)
		return len(p) == 1 && p[0].Name == "jupyter-o42-alice"
	}))
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
	testutil.Eventually(t, 20*time.Second, "alice's claim terminating", testutil.True(func() bool {
		c, err := claims.Get(ctx, was.State.PVCName, metav1.GetOptions{})
		return err == nil && c.DeletionTimestamp != nil
	}))
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

// plant42 creates in ns, under name, the pod spawnkit would make for
// srv under cfg, with a state record that names the pod itself (name,
// namespace and start id: what recordsItself accepts) and sends the user
// to the attacker, and waits until it runs.
func plant42(t *testing.T, ctx context.Context, cfg kubespawner.Config, srv naming.Server, ns, name string) *corev1.Pod {
	t.Helper()
	o, err := newSpawner(t, srv, cfg).Plan(ctx, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Pod.DeepCopy()
	pod.Namespace, pod.Name = ns, name
	st := o.State
	st.PodName, st.Namespace, st.StartID = name, ns, "planted-start"
	st.ConnectHost = attackerHost
	st.URL = "http://" + attackerHost + ":8888"
	pod.Annotations[naming.AnnotationStartID] = "planted-start"
	pod.Annotations[naming.AnnotationState] = st.String()
	return createRunning(t, ctx, pod)
}

// TestAttack42RetiredTemplateOverlapsAnotherUsersNamespace: the most
// common user-namespace change, from z2jh's default template
// "{hubnamespace}-{username}" (listed as retired) to one with a prefix,
// "{hubnamespace}-user-{username}". User "x"'s own namespace under
// today's template, <hub>-user-x, is what the retired template renders
// for user "user-x". A pod planted in x's own namespace claiming user
// "user-x" (spawnkit's labels, the victim's owner annotations, a state
// record naming itself) must not become user-x's server: A's trusted
// namespaces are A's own, never another user's.
func TestAttack42RetiredTemplateOverlapsAnotherUsersNamespace(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.EnableUserNamespaces = true
	cfg.UserNamespaceTemplate = "{hubnamespace}-user-{username}"
	cfg.RetiredNamespaces = []string{"{hubnamespace}-{username}"}
	attacker := naming.Server{Username: "a42x"}
	victim := naming.Server{Username: "user-a42x"}
	attackerNS := newSpawner(t, attacker, cfg).State().Namespace
	if attackerNS != hub+"-user-a42x" {
		t.Fatalf("the attacker's own namespace is %q, want %q", attackerNS, hub+"-user-a42x")
	}
	if victimNS := newSpawner(t, victim, cfg).State().Namespace; victimNS == attackerNS {
		t.Fatalf("the victim's own namespace is the attacker's (%q): not the case under test", victimNS)
	}
	plant42(t, ctx, cfg, victim, attackerNS, "innocent-looking")

	logs := newLogLines()
	m := startManager(t, logs.ctx(ctx), Options{Config: cfg})
	settle(t, m)
	if st, err := m.Status(victim); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a pod planted in user %q's own namespace %s was adopted as user %q's server: phase %s, URL %s (%v)",
			attacker.Username, attackerNS, victim.Username, st.Phase, st.URL, err)
	}
}

// TestAttack42SeedNamesAPodThatAppearsLater: a hub's state for carol
// names the pod name bob's server gets (bob has no pod yet, so Seed
// cannot see whose it is and takes it). Bob starts. Nothing carol's
// hub does may touch bob's pod: not carol's Stop, not carol's Spawn
// (which replaces "carol's earlier pod"); and carol must still be able
// to start (a stale state must not wedge her server).
func TestAttack42SeedNamesAPodThatAppearsLater(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	m, _ := runManager(t, Options{Config: cfg, Registry: newRegistry(t)})
	carol, bob := naming.Server{Username: "s42-carol"}, naming.Server{Username: "s42-bob"}
	bobPod := newSpawner(t, bob, cfg).State().PodName

	st, err := m.Seed(ctx, Seed{Server: carol, State: spawner.State{Namespace: hub, PodName: bobPod, StartID: "old"}})
	if err != nil {
		t.Fatalf("Seed of carol naming a pod that does not exist: %v", err)
	}
	t.Logf("carol seeded: %s at %s/%s", st.Phase, st.State.Namespace, st.State.PodName)
	if _, _, err := m.Spawn(ctx, bob, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	bobSt := waitStatus(t, m, bob, "running", phaseIs(PhaseRunning))
	pods := serverPods(t, cluster.Client, hub, bob.Username)
	if len(pods) != 1 || pods[0].Name != bobPod {
		t.Fatalf("bob's pods: %v", podNames(pods))
	}
	bobUID := pods[0].UID

	stopSt, stopErr := m.Stop(ctx, carol, spawner.StopOptions{})
	t.Logf("Stop(carol): %s (%s: %s), %v", stopSt.Phase, stopSt.Reason, stopSt.Message, stopErr)
	if p, err := cluster.Client.CoreV1().Pods(hub).Get(ctx, bobPod, metav1.GetOptions{}); err != nil || p.UID != bobUID || p.DeletionTimestamp != nil {
		t.Fatalf("carol's Stop touched bob's pod (%v)", err)
	}
	if stopErr != nil {
		t.Errorf("Stop of carol, stopped with a stale state: %v; want success (stopping a stopped server is success), bob's pod untouched", stopErr)
	}

	for i := range 2 {
		_, started, err := m.Spawn(ctx, carol, SpawnOptions{Env: hubStart().Env})
		if err != nil || !started {
			t.Fatalf("Spawn %d of carol: started %v, %v", i, started, err)
		}
		got := waitStatus(t, m, carol, "running or failed", func(s Status) bool { return s.Phase == PhaseRunning || s.Phase == PhaseFailed })
		t.Logf("carol's start %d: %s (%s: %s)", i, got.Phase, got.Reason, got.Message)
		if p, err := cluster.Client.CoreV1().Pods(hub).Get(ctx, bobPod, metav1.GetOptions{}); err != nil || p.UID != bobUID || p.DeletionTimestamp != nil {
			t.Fatalf("carol's Spawn touched bob's pod (%v)", err)
		}
		if got.Phase == PhaseRunning {
			break
		}
		if !strings.Contains(got.Message, bob.Username) {
			t.Errorf("carol's failed start does not name bob, whose pod it met: %q", got.Message)
		}
		if i == 1 {
			t.Errorf("carol can never start while bob runs: a stale state wedges her server (%s)", got.Message)
		}
	}
	if st, _ := m.Status(bob); st.Phase != PhaseRunning || st.URL != bobSt.URL {
		t.Errorf("bob after carol's calls: %+v", st)
	}
}

// managerWithUnseenB runs a Manager of cluster a and a retired cluster b
// whose API server never answers (never seen since Start).
func managerWithUnseenB(t *testing.T, hub string) *Manager {
	t.Helper()
	client, reg := unreachableCluster(t)
	m, _ := runManager(t, Options{Config: baseConfig(hub), Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: newRegistry(t)},
		{Name: "b", Client: client, Registry: reg, Retired: true},
	}})
	return m
}

// TestAttack42SeededInUnseenCluster: with cluster b not seen since the
// Manager started (its API server does not answer), a server the hub's
// state puts in b is "unknown" (it may run there). A Spawn of it must
// not start a second copy elsewhere, whatever b's standing (here
// retired, so placement would pick a).
func TestAttack42SeededInUnseenRetiredCluster(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	m := managerWithUnseenB(t, hub)
	bob := naming.Server{Username: "u42-bob"}
	st, err := m.Seed(ctx, Seed{Server: bob, State: spawner.State{Cluster: "b", Namespace: hub, PodName: "jupyter-u42-bob", StartID: "s"}})
	if err != nil || st.Phase != PhaseUnknown || st.ExitCode != nil {
		t.Fatalf("bob seeded in unseen b: %s (%s), exit %v, %v; want unknown", st.Phase, st.Reason, st.ExitCode, err)
	}
	st, started, err := m.Spawn(ctx, bob, SpawnOptions{Env: hubStart().Env})
	if started {
		t.Errorf("Spawn of bob, whom the hub's state puts in unseen cluster b (status unknown): started in %q (%v); want refused, cluster b unavailable: a second copy if bob runs in b", st.Cluster, err)
	}
}

// TestAttack42SeedWithoutClusterWhileAClusterIsUnseen: a state saved
// before the hub ran several clusters names no cluster. With cluster b
// not seen since the Manager started, the server may run in b: its
// status must not be "stopped" (the hub's poll would end it).
func TestAttack42SeedWithoutClusterWhileAClusterIsUnseen(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	m := managerWithUnseenB(t, hub)
	carol := naming.Server{Username: "u42-carol"}
	if _, err := m.Status(carol); !errors.Is(err, ErrClusterUnavailable) {
		t.Fatalf("carol unknown while b is unseen: %v, want ErrClusterUnavailable", err)
	}
	st, err := m.Seed(ctx, Seed{Server: carol, State: spawner.State{Namespace: hub, PodName: "jupyter-u42-carol", StartID: "s"}})
	if err == nil && (st.Phase == PhaseStopped || st.Phase == PhaseFailed) {
		t.Errorf("carol, seeded with a state naming no cluster while b is unseen: %s (%s); want unknown (she may run in b), as before the state", st.Phase, st.Reason)
	}
	if st, err := m.Poll(ctx, carol); err == nil && st.Phase == PhaseStopped {
		t.Errorf("Poll(carol) = %s, exit %v; a hub records her stopped", st.Phase, st.ExitCode)
	}
}

// TestAttack42TemplateChangeReusesAnotherUsersOldName: no hostile state:
// pod_name_template changes from "jupyter-{username}" to "{username}".
// Alice's server, recovered under its old name jupyter-alice, is stopped;
// user "jupyter-<alice>" then starts, and today's template gives that
// user exactly alice's old pod name. Alice's next start replaces "her
// earlier pod" at her old name, which is now the other user's: it must
// leave it alone and start alice (her earlier pod is gone), not fail
// every time while the other user runs.
func TestAttack42TemplateChangeReusesAnotherUsersOldName(t *testing.T) {
	ctx := ctxTimeout(t, 150*time.Second)
	hub := newNamespace(t)
	alice := naming.Server{Username: "r42-alice"}
	other := naming.Server{Username: "jupyter-r42-alice"}
	m1, stop1 := runManager(t, Options{Config: baseConfig(hub), Registry: newRegistry(t)})
	if _, _, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	was := waitStatus(t, m1, alice, "running", phaseIs(PhaseRunning))
	stop1()

	after := baseConfig(hub)
	after.PodNameTemplate = "{username}"
	m2, _ := runManager(t, Options{Config: after, Registry: newRegistry(t)})
	if st, err := m2.Status(alice); err != nil || st.Phase != PhaseRunning || st.State.PodName != was.State.PodName {
		t.Fatalf("alice after the change: %+v, %v", st, err)
	}
	if _, err := m2.Stop(ctx, alice, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m2.Spawn(ctx, other, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	ost := waitStatus(t, m2, other, "running", phaseIs(PhaseRunning))
	if ost.State.PodName != was.State.PodName {
		t.Fatalf("the other user's pod is %q, want alice's old name %q (the case under test)", ost.State.PodName, was.State.PodName)
	}
	otherUID := serverPods(t, cluster.Client, hub, other.Username)[0].UID

	if st, err := m2.Stop(ctx, alice, spawner.StopOptions{}); err != nil {
		t.Errorf("Stop of stopped alice: %s (%s), %v; want success", st.Phase, st.Reason, err)
	}
	if _, _, err := m2.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	var got Status
	testutil.Eventually(t, 120*time.Second, "alice running or failed after the outage", testutil.True(func() bool {
		got, _ = m2.Status(alice)
		return got.Phase == PhaseRunning || got.Phase == PhaseFailed
	}))
	if got.Phase != PhaseRunning {
		t.Errorf("alice's start after the change: %s (%s: %s); want running under today's name", got.Phase, got.Reason, got.Message)
	}
	if p := serverPods(t, cluster.Client, hub, other.Username); len(p) != 1 || p[0].UID != otherUID || p[0].DeletionTimestamp != nil {
		t.Errorf("the other user's pod was touched: %v", podNames(p))
	}
}
