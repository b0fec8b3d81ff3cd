package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// A start's own configuration (SpawnOptions.Config: a hub's KubeSpawner
// configuration, as the spawner-service passes it), the caller's
// admission of a start's objects (SpawnOptions.Admit), and the hub that
// starts a server (SpawnOptions.Hub).

// hubConfig is base with options set over it as a hub's configuration
// sets them (kubespawner.Config.WithOptions), each value written as JSON.
func hubConfig(t *testing.T, base kubespawner.Config, options map[string]any) *kubespawner.Config {
	t.Helper()
	raw := map[string]json.RawMessage{}
	for k, v := range options {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		raw[k] = b
	}
	cfg, err := base.WithOptions(raw)
	if err != nil {
		t.Fatalf("WithOptions %v: %v", options, err)
	}
	return &cfg
}

// serverClaims are the names of the claims in ns of one cluster that
// name user in their owner annotation, read from the API server.
func serverClaims(t *testing.T, client kubernetes.Interface, ns, user string) []string {
	t.Helper()
	list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctxTimeout(t, 30*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Items {
		if c.Annotations[naming.AnnotationUsername] == user {
			out = append(out, c.Name)
		}
	}
	slices.Sort(out)
	return out
}

// apiPod reads a pod from the API server.
func apiPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctxTimeout(t, 30*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// recordedState is the State a pod records (naming.AnnotationState).
func recordedState(t *testing.T, pod *corev1.Pod) spawner.State {
	t.Helper()
	st, ok := spawner.StateFromPod(reflector.NewPod(pod))
	if !ok {
		t.Fatalf("pod %s/%s records no state", pod.Namespace, pod.Name)
	}
	return st
}

// configuredFactories is a copy of the Factories the Manager's first
// cluster keeps for start Configs.
func configuredFactories(m *Manager) map[*kubespawner.Config]*spawner.Factory {
	c := m.cells[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.configured)
}

// entryFactory is the Factory of the Spawner the Manager runs s with.
func entryFactory(t *testing.T, m *Manager, s naming.Server) *spawner.Factory {
	t.Helper()
	e := m.lookup(s)
	if e == nil {
		t.Fatalf("%+v is not known", s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sp.Factory()
}

// refusedAtPlan says what is wrong with err as the refusal of a start
// before anything is made: a *spawner.StartError at step plan, reason
// invalid, whose message names each of want ("" when it is one).
func refusedAtPlan(err error, want ...string) string {
	var se *spawner.StartError
	if !errors.As(err, &se) || se.Step != spawner.StepPlan || se.Reason != spawner.ReasonInvalid {
		return fmt.Sprintf("want a *spawner.StartError at step %s, reason %s", spawner.StepPlan, spawner.ReasonInvalid)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return fmt.Sprintf("want its message to name %s", w)
		}
	}
	return ""
}

// TestSpawnWithConfig: a start with a Config of its own makes its pod
// from it (the pod's name and image); placement resolves that Config's
// profiles, including one the Manager's configuration lacks; Status,
// Poll and Stop follow the pod under the Config's names; the starts of
// one *Config share one Factory, and an equal Config at another address
// is another Factory.
func TestSpawnWithConfig(t *testing.T) {
	ns := newNamespace(t)
	base := baseConfig(ns)
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 120*time.Second)
	hub := hubConfig(t, base, map[string]any{
		"pod_name_template": "hubpod-{user_server}",
		"image":             "example.test/hub-image:1",
		"profile_list": []map[string]any{
			{"display_name": "Default", "slug": "default", "default": true},
			{"display_name": "Special", "slug": "special", "kubespawner_override": map[string]any{"image": "example.test/special:2"}},
		},
	})
	env := hubStart().Env

	alice := naming.Server{Username: "sc-alice"}
	st, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: hub})
	if err != nil || !started {
		t.Fatalf("Spawn with a Config: started %v, %v", started, err)
	}
	if st.State.PodName != "hubpod-sc-alice" || st.State.Namespace != ns {
		t.Errorf("Spawn's status names pod %s/%s, want %s/hubpod-sc-alice (the Config's template)", st.State.Namespace, st.State.PodName, ns)
	}
	if img := apiPod(t, ns, "hubpod-sc-alice").Spec.Containers[0].Image; img != "example.test/hub-image:1" {
		t.Errorf("the pod's image is %q, want the Config's example.test/hub-image:1", img)
	}
	st = waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	if st.State.PodName != "hubpod-sc-alice" || st.URL == "" {
		t.Errorf("running: pod %q at %q, want hubpod-sc-alice with a URL", st.State.PodName, st.URL)
	}
	if polled, err := m.Poll(ctx, alice); err != nil || polled.Phase != PhaseRunning || polled.ExitCode != nil || polled.State.PodName != "hubpod-sc-alice" {
		t.Errorf("Poll = %s, exit %v, pod %q, %v; want running, no exit code, hubpod-sc-alice", polled.Phase, polled.ExitCode, polled.State.PodName, err)
	}
	stopServer(t, m, alice)
	if st, err := m.Status(alice); err != nil || st.Phase != PhaseStopped {
		t.Errorf("after Stop alice is %s (%v), want stopped", st.Phase, err)
	}
	if pods := serverPods(t, cluster.Client, ns, alice.Username); len(pods) != 0 {
		t.Errorf("after Stop alice has pods %v", podNames(pods))
	}

	// A profile only the start's Config has: refused without it (the
	// Manager's configuration has no profiles), started with it.
	bob := naming.Server{Username: "sc-bob"}
	special := map[string]string{"profile": "special"}
	if _, started, err := m.Spawn(ctx, bob, SpawnOptions{Env: env, UserOptions: special}); started || err == nil {
		t.Errorf("profile special without the Config: started %v, %v; want it refused", started, err)
	}
	if _, started, err := m.Spawn(ctx, bob, SpawnOptions{Env: env, UserOptions: special, Config: hub}); err != nil || !started {
		t.Fatalf("profile special with the Config: started %v, %v", started, err)
	}
	st = waitStatus(t, m, bob, "running", phaseIs(PhaseRunning))
	if img := apiPod(t, ns, st.State.PodName).Spec.Containers[0].Image; st.State.PodName != "hubpod-sc-bob" || img != "example.test/special:2" {
		t.Errorf("bob's pod %q has image %q, want hubpod-sc-bob with the profile's example.test/special:2", st.State.PodName, img)
	}

	// One Factory for the *Config, used by both servers; alice's next
	// start under it keeps her Spawner's.
	fs := configuredFactories(m)
	if len(fs) != 1 || fs[hub] == nil {
		t.Fatalf("the cluster keeps %d Factories of start Configs (the Config's: %v), want 1, the Config's", len(fs), fs[hub] != nil)
	}
	if f := entryFactory(t, m, bob); f != fs[hub] {
		t.Errorf("bob runs with another Factory than the Config's")
	}
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: hub}); err != nil || !started {
		t.Fatalf("alice's second start with the Config: started %v, %v", started, err)
	}
	if st := waitStatus(t, m, alice, "running again", phaseIs(PhaseRunning)); st.State.PodName != "hubpod-sc-alice" {
		t.Errorf("alice's second start made pod %q, want hubpod-sc-alice", st.State.PodName)
	}
	if f := entryFactory(t, m, alice); f != fs[hub] {
		t.Errorf("alice's second start runs with another Factory than the Config's")
	}
	if fs := configuredFactories(m); len(fs) != 1 {
		t.Errorf("after a second start with the same *Config the cluster keeps %d Factories, want 1", len(fs))
	}

	// The cache is by address: an equal Config elsewhere is another one.
	same := *hub
	carol := naming.Server{Username: "sc-carol"}
	if _, started, err := m.Spawn(ctx, carol, SpawnOptions{Env: env, Config: &same}); err != nil || !started {
		t.Fatalf("carol with a copy of the Config: started %v, %v", started, err)
	}
	waitStatus(t, m, carol, "running", phaseIs(PhaseRunning))
	if fs := configuredFactories(m); len(fs) != 2 || fs[&same] == nil || fs[&same] == fs[hub] {
		t.Errorf("after a start with a copy of the Config the cluster keeps %d Factories, want 2 (one each)", len(fs))
	}
}

// TestSpawnWithConfigKeepsTheClaim: a server's claim follows it across
// starts under Configs with other pod and claim templates, and back to
// the Manager's configuration: each start's pod mounts the claim the
// server had, no claim under the new templates is made, and the server
// has one pod, the pod left by an exit under the earlier names removed.
func TestSpawnWithConfigKeepsTheClaim(t *testing.T) {
	ns := newNamespace(t)
	base := withStorage(baseConfig(ns), "claim-{user_server}")
	base.DeleteStoppedPods = ptr.To(false) // an exited pod stays, under its names
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 180*time.Second)
	cfgA := hubConfig(t, base, map[string]any{"pod_name_template": "a-{user_server}", "pvc_name_template": "a-claim-{user_server}"})
	cfgB := hubConfig(t, base, map[string]any{"pod_name_template": "b-{user_server}", "pvc_name_template": "b-claim-{user_server}"})
	alice := naming.Server{Username: "kc-alice"}
	const claim = "a-claim-kc-alice"

	spawn := func(step string, cfg *kubespawner.Config) {
		t.Helper()
		if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Config: cfg}); err != nil || !started {
			t.Fatalf("%s: started %v, %v", step, started, err)
		}
	}
	// only checks that the server runs pod, its only pod, which mounts
	// the claim, its only claim.
	only := func(step, pod string) {
		t.Helper()
		st := waitStatus(t, m, alice, step+": running", phaseIs(PhaseRunning))
		if st.State.PodName != pod || st.State.PVCName != claim {
			t.Errorf("%s: running pod %q with claim %q, want pod %q with the server's claim %q", step, st.State.PodName, st.State.PVCName, pod, claim)
		}
		var pods []corev1.Pod
		testutil.Eventually(t, 30*time.Second, step+": one pod", testutil.True(func() bool {
			pods = serverPods(t, cluster.Client, ns, alice.Username)
			return len(pods) == 1
		}))
		if pods[0].Name != pod || !slices.Equal(podClaims(&pods[0]), []string{claim}) {
			t.Errorf("%s: the pod is %s mounting %q, want %s mounting %q", step, pods[0].Name, podClaims(&pods[0]), pod, claim)
		}
		if claims := serverClaims(t, cluster.Client, ns, alice.Username); !slices.Equal(claims, []string{claim}) {
			t.Errorf("%s: the server's claims are %q, want only %q", step, claims, claim)
		}
	}

	spawn("under A", cfgA)
	only("under A", "a-kc-alice")
	stopServer(t, m, alice)

	spawn("under B after a stop", cfgB)
	only("under B after a stop", "b-kc-alice")
	setPodStatus(t, ctx, ns, "b-kc-alice", exitWith(1, "Error"))
	waitStatus(t, m, alice, "failed", phaseIs(PhaseFailed))
	if pods := serverPods(t, cluster.Client, ns, alice.Username); len(pods) != 1 || pods[0].Name != "b-kc-alice" {
		t.Fatalf("after the exit alice has pods %v, want her exited b-kc-alice (delete_stopped_pods off)", podNames(pods))
	}

	spawn("under the Manager's configuration after an exit", nil)
	only("under the Manager's configuration after an exit", "jupyter-kc-alice")
}

// TestSpawnWithConfigInAnUntrustedNamespace: a start whose Config (or
// its chosen profile) puts the server in a namespace the Manager's
// configuration does not trust for it is refused at step plan, naming
// the namespace, with nothing made and the server unknown (or, when it
// was known, as it was); the same Config's profile in the Manager's
// namespace starts, and a Manager that trusts the namespace
// (retired_namespaces) takes the Config.
func TestSpawnWithConfigInAnUntrustedNamespace(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	base := withStorage(baseConfig(ns), "claim-{user_server}")
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 120*time.Second)
	env := hubStart().Env
	elsewhere := hubConfig(t, base, map[string]any{"namespace": other})
	profiles := hubConfig(t, base, map[string]any{"profile_list": []map[string]any{
		{"display_name": "Here", "slug": "here", "default": true},
		{"display_name": "Elsewhere", "slug": "elsewhere", "kubespawner_override": map[string]any{"namespace": other}},
	}})
	alice := naming.Server{Username: "ut-alice"}
	nothingMade := func(step string) {
		t.Helper()
		for _, n := range []string{ns, other} {
			if pods := serverPods(t, cluster.Client, n, alice.Username); len(pods) != 0 {
				t.Errorf("%s: pods made in %s: %v", step, n, podNames(pods))
			}
		}
		if claims := serverClaims(t, cluster.Client, other, alice.Username); len(claims) != 0 {
			t.Errorf("%s: claims made in %s: %q", step, other, claims)
		}
	}
	refused := func(step string, opts SpawnOptions) {
		t.Helper()
		opts.Env = env
		st, started, err := m.Spawn(ctx, alice, opts)
		if started || err == nil {
			t.Fatalf("%s: started %v (%s), %v; want it refused", step, started, st.Phase, err)
		}
		if why := refusedAtPlan(err, fmt.Sprintf("%q", other)); why != "" {
			t.Errorf("%s: Spawn = %v; %s", step, err, why)
		}
	}

	refused("the Config's namespace", SpawnOptions{Config: elsewhere})
	refused("a profile's namespace", SpawnOptions{Config: profiles, UserOptions: map[string]string{"profile": "elsewhere"}})
	if _, err := m.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the refused starts alice is known: %v", err)
	}
	if claims := serverClaims(t, cluster.Client, ns, alice.Username); len(claims) != 0 {
		t.Errorf("after the refused starts alice has claims %q in %s", claims, ns)
	}
	nothingMade("refused while unknown")

	// The Config's other profile, in the Manager's namespace, starts.
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: profiles, UserOptions: map[string]string{"profile": "here"}}); err != nil || !started {
		t.Fatalf("profile here: started %v, %v", started, err)
	}
	if st := waitStatus(t, m, alice, "running", phaseIs(PhaseRunning)); st.State.Namespace != ns {
		t.Errorf("profile here runs in %q, want %q", st.State.Namespace, ns)
	}
	stopServer(t, m, alice)
	before, err := m.Status(alice)
	if err != nil {
		t.Fatal(err)
	}

	// A known server's refused start leaves it as it was.
	refused("the Config's namespace, the server known", SpawnOptions{Config: elsewhere})
	after, err := m.Status(alice)
	if err != nil || after.Phase != PhaseStopped || after.State.Namespace != ns || after.State.PodName != before.State.PodName || after.State.PVCName != before.State.PVCName {
		t.Errorf("after a refused start alice is %s in %s/%s with claim %q (%v); want stopped, as before, in %s/%s with claim %q",
			after.Phase, after.State.Namespace, after.State.PodName, after.State.PVCName, err, before.State.Namespace, before.State.PodName, before.State.PVCName)
	}
	nothingMade("refused while known")

	// A Manager whose configuration trusts the namespace takes the Config.
	trusting := base
	trusting.RetiredNamespaces = []string{other}
	m2, _ := runManager(t, Options{Config: trusting, Registry: newRegistry(t)})
	bob := naming.Server{Username: "ut-bob"}
	if _, started, err := m2.Spawn(ctx, bob, SpawnOptions{Env: env, Config: elsewhere}); err != nil || !started {
		t.Fatalf("a Manager trusting %s: started %v, %v", other, started, err)
	}
	if st := waitStatus(t, m2, bob, "running", phaseIs(PhaseRunning)); st.State.Namespace != other {
		t.Errorf("bob runs in %q, want the Config's %q", st.State.Namespace, other)
	}
}

// TestSpawnAdmit: Admit sees the start's objects, rendered from the
// start's Config, before anything is made; its error refuses the start
// at step plan, wrapped, with nothing made and the server unknown (or,
// when it was known, as it was); the objects it accepts are the ones
// created.
func TestSpawnAdmit(t *testing.T) {
	ns := newNamespace(t)
	base := withStorage(baseConfig(ns), "claim-{user_server}")
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 120*time.Second)
	env := hubStart().Env
	hub := hubConfig(t, base, map[string]any{"pod_name_template": "adm-{user_server}", "image": "example.test/admitted:3"})
	errPolicy := errors.New("the hub's policy refuses this start")
	var seen []*spawner.Objects // Spawn calls Admit before it returns
	refuse := func(o *spawner.Objects) error {
		seen = append(seen, o)
		return errPolicy
	}
	alice := naming.Server{Username: "ad-alice"}
	nothingMade := func(step string) {
		t.Helper()
		if pods := serverPods(t, cluster.Client, ns, alice.Username); len(pods) != 0 {
			t.Errorf("%s: pods made: %v", step, podNames(pods))
		}
	}

	_, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: hub, Admit: refuse})
	if started || !errors.Is(err, errPolicy) {
		t.Fatalf("Spawn with a refusing Admit: started %v, %v; want the policy's error", started, err)
	}
	if why := refusedAtPlan(err); why != "" {
		t.Errorf("Spawn = %v; %s", err, why)
	}
	if len(seen) != 1 || seen[0].Pod == nil || seen[0].PVC == nil {
		t.Fatalf("Admit saw %d plans (with pod and claim: %v), want one", len(seen), len(seen) == 1 && seen[0].Pod != nil && seen[0].PVC != nil)
	}
	if p := seen[0].Pod; p.Name != "adm-ad-alice" || p.Namespace != ns || p.Spec.Containers[0].Image != "example.test/admitted:3" {
		t.Errorf("Admit saw pod %s/%s with image %q, want %s/adm-ad-alice with the Config's example.test/admitted:3", p.Namespace, p.Name, p.Spec.Containers[0].Image, ns)
	}
	if _, err := m.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the refused start alice is known: %v", err)
	}
	if claims := serverClaims(t, cluster.Client, ns, alice.Username); len(claims) != 0 {
		t.Errorf("after the refused start alice has claims %q", claims)
	}
	nothingMade("refused while unknown")

	// check compares what Admit accepted with what the start made.
	check := func(step string, admitted *spawner.Objects) {
		t.Helper()
		if admitted == nil {
			t.Fatalf("%s: Admit was not called", step)
		}
		st := waitStatus(t, m, alice, step+": running", phaseIs(PhaseRunning))
		pod := apiPod(t, ns, st.State.PodName)
		if pod.Name != admitted.Pod.Name || pod.Spec.Containers[0].Image != admitted.Pod.Spec.Containers[0].Image {
			t.Errorf("%s: made pod %s with image %q; Admit accepted %s with %q", step, pod.Name, pod.Spec.Containers[0].Image, admitted.Pod.Name, admitted.Pod.Spec.Containers[0].Image)
		}
		if got, want := podClaims(pod), podClaims(admitted.Pod); !slices.Equal(got, want) {
			t.Errorf("%s: the pod made mounts claims %q; Admit accepted a pod mounting %q", step, got, want)
		}
		if claims := serverClaims(t, cluster.Client, ns, alice.Username); !slices.Equal(claims, []string{admitted.PVC.Name}) {
			t.Errorf("%s: the server's claims are %q; Admit accepted claim %q", step, claims, admitted.PVC.Name)
		}
	}
	var admitted *spawner.Objects
	accept := func(o *spawner.Objects) error {
		admitted = o
		return nil
	}
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: hub, Admit: accept}); err != nil || !started {
		t.Fatalf("Spawn with an accepting Admit: started %v, %v", started, err)
	}
	check("accepted", admitted)
	stopServer(t, m, alice)

	// A known server's refused start leaves it as it was.
	seen = nil
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: env, Config: hub, Admit: refuse}); started || !errors.Is(err, errPolicy) || len(seen) != 1 {
		t.Errorf("a refused start of the stopped server: started %v, %v, Admit called %d times; want the policy's error, once", started, err, len(seen))
	}
	if st, err := m.Status(alice); err != nil || st.Phase != PhaseStopped || st.State.PodName != "adm-ad-alice" {
		t.Errorf("after a refused start alice is %s at %q (%v), want stopped at adm-ad-alice", st.Phase, st.State.PodName, err)
	}
	nothingMade("refused while known")
}

// TestSpawnWithConfigInAClusterWithItsOwn: a start with a Config placed
// in a cluster that has a configuration of its own (Cluster.Config) is
// refused at step plan, naming the cluster, with nothing made in either
// cluster; the same Config starts in a cluster without one.
func TestSpawnWithConfigInAClusterWithItsOwn(t *testing.T) {
	tc := startSecondCluster(t)
	m, _ := runManager(t, tc.options())
	ctx := ctxTimeout(t, 120*time.Second)
	hub := hubConfig(t, tc.base, map[string]any{"image": "example.test/hub-image:1"})
	alice := naming.Server{Username: "oc-alice"}

	opts := spawnWith("gpu") // kubernetes_cluster: b
	opts.Config = hub
	if st, started, err := m.Spawn(ctx, alice, opts); started || err == nil {
		t.Fatalf("a Config placed in b: started %v (%s in %q), %v; want it refused", started, st.Phase, st.Cluster, err)
	} else if why := refusedAtPlan(err, `cluster "b"`, "Cluster.Config"); why != "" {
		t.Errorf("a Config placed in b: Spawn = %v; %s", err, why)
	}
	if _, err := m.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the refused start alice is known: %v", err)
	}
	for name, client := range map[string]kubernetes.Interface{"a": cluster.Client, "b": tc.b.Client} {
		if pods := serverPods(t, client, tc.ns, alice.Username); len(pods) != 0 {
			t.Errorf("after the refused start alice has pods in %s: %v", name, podNames(pods))
		}
		if claims := serverClaims(t, client, tc.ns, alice.Username); len(claims) != 0 {
			t.Errorf("after the refused start alice has claims in %s: %q", name, claims)
		}
	}

	opts = spawnWith("cpu") // kubernetes_cluster: a
	opts.Config = hub
	if _, started, err := m.Spawn(ctx, alice, opts); err != nil || !started {
		t.Fatalf("the Config placed in a: started %v, %v", started, err)
	}
	st := waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	if st.Cluster != "a" {
		t.Errorf("alice runs in cluster %q, want a", st.Cluster)
	}
	if img := apiPod(t, tc.ns, st.State.PodName).Spec.Containers[0].Image; img != "example.test/hub-image:1" {
		t.Errorf("alice's pod in a has image %q, want the Config's example.test/hub-image:1", img)
	}
}

// TestSpawnHub: the hub a start names is Status.State.Hub from the
// status Spawn returns, in every status a watcher sees of the start,
// once it runs, and on the pod; a new Manager recovers it from the pod
// (made under the hub's Config) and stops that pod; another hub's start
// names that hub from the status Spawn returns.
func TestSpawnHub(t *testing.T) {
	ns := newNamespace(t)
	base := baseConfig(ns)
	ctx := ctxTimeout(t, 150*time.Second)
	m1, stop1 := runManager(t, Options{Config: base, Registry: newRegistry(t)})
	watched := collectStatuses(ctx, m1)
	hub := hubConfig(t, base, map[string]any{"pod_name_template": "hubpod-{user_server}"})
	alice := naming.Server{Username: "hb-alice"}
	const pod = "hubpod-hb-alice"

	st, started, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Config: hub, Hub: "hub-a"})
	if err != nil || !started {
		t.Fatalf("Spawn: started %v, %v", started, err)
	}
	if st.State.Hub != "hub-a" {
		t.Errorf("Spawn's status names hub %q, want hub-a", st.State.Hub)
	}
	if st = waitStatus(t, m1, alice, "running", phaseIs(PhaseRunning)); st.State.Hub != "hub-a" || st.State.PodName != pod {
		t.Errorf("running: hub %q, pod %q; want hub-a, %s", st.State.Hub, st.State.PodName, pod)
	}
	if rec := recordedState(t, apiPod(t, ns, pod)); rec.Hub != "hub-a" {
		t.Errorf("the pod records hub %q, want hub-a", rec.Hub)
	}
	testutil.Eventually(t, 10*time.Second, "the watcher to see alice running", testutil.True(func() bool {
		all := watched.of(alice.Username)
		return len(all) > 0 && all[len(all)-1].Phase == PhaseRunning
	}))
	starting := 0
	for _, s := range watched.of(alice.Username) {
		if s.Phase == PhaseStarting {
			starting++
		}
		if s.State.Hub != "hub-a" {
			t.Errorf("a watcher saw alice %s with hub %q, want hub-a", s.Phase, s.State.Hub)
		}
	}
	if starting == 0 {
		t.Errorf("the watcher never saw alice starting")
	}
	stop1() // a graceful shutdown: the pod stays

	// A new Manager, with its own configuration only, recovers the hub
	// from the pod's record.
	m2, _ := runManager(t, Options{Config: base, Registry: newRegistry(t)})
	if st, err := m2.Status(alice); err != nil || st.Phase != PhaseRunning || st.State.Hub != "hub-a" || st.State.PodName != pod {
		t.Fatalf("recovered: %s, hub %q, pod %q (%v); want running, hub-a, %s", st.Phase, st.State.Hub, st.State.PodName, err, pod)
	}
	if st, err := m2.Poll(ctx, alice); err != nil || st.State.Hub != "hub-a" || st.ExitCode != nil {
		t.Errorf("recovered, Poll: hub %q, exit %v (%v); want hub-a, no exit", st.State.Hub, st.ExitCode, err)
	}
	stopServer(t, m2, alice)
	if pods := serverPods(t, cluster.Client, ns, alice.Username); len(pods) != 0 {
		t.Errorf("after the recovered server's Stop alice has pods %v", podNames(pods))
	}

	// Another hub's start names it from the status Spawn returns.
	st, started, err = m2.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Hub: "hub-b"})
	if err != nil || !started {
		t.Fatalf("hub-b's Spawn: started %v, %v", started, err)
	}
	if st.State.Hub != "hub-b" {
		t.Errorf("hub-b's Spawn returns a status naming hub %q, want hub-b", st.State.Hub)
	}
	if st = waitStatus(t, m2, alice, "running for hub-b", phaseIs(PhaseRunning)); st.State.Hub != "hub-b" {
		t.Errorf("running for hub-b: hub %q", st.State.Hub)
	}
	if rec := recordedState(t, apiPod(t, ns, st.State.PodName)); rec.Hub != "hub-b" {
		t.Errorf("hub-b's pod records hub %q", rec.Hub)
	}
}

// TestSpawnWithTwoConfigsAtOnce: two Spawns of one server at once, with
// Configs that name its pod differently, start it once and make one
// pod, whether the server was unknown or stopped under another Config.
func TestSpawnWithTwoConfigsAtOnce(t *testing.T) {
	ns := newNamespace(t)
	base := baseConfig(ns)
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 240*time.Second)
	cfgs := []*kubespawner.Config{
		hubConfig(t, base, map[string]any{"pod_name_template": "x-{user_server}"}),
		hubConfig(t, base, map[string]any{"pod_name_template": "y-{user_server}"}),
	}
	race := func(s naming.Server, step string) {
		t.Helper()
		var started atomic.Int32
		errs := make([]error, len(cfgs))
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, cfg := range cfgs {
			wg.Go(func() {
				<-gate
				_, ok, err := m.Spawn(ctx, s, SpawnOptions{Env: hubStart().Env, Config: cfg})
				if ok {
					started.Add(1)
				}
				errs[i] = err
			})
		}
		close(gate)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s %s: %v", s.Username, step, err)
		}
		if n := started.Load(); n != 1 {
			t.Errorf("%s %s: %d Spawns started it, want 1", s.Username, step, n)
		}
		st := waitStatus(t, m, s, step+": running", phaseIs(PhaseRunning))
		if pods := serverPods(t, cluster.Client, ns, s.Username); len(pods) != 1 || pods[0].Name != st.State.PodName {
			t.Errorf("%s %s: pods %v, want its one pod %s", s.Username, step, podNames(pods), st.State.PodName)
		}
	}
	for i := range 5 {
		s := naming.Server{Username: fmt.Sprintf("rc-%d", i)}
		race(s, "unknown")
		stopServer(t, m, s)
		race(s, "stopped")
	}
}

// TestSpawnAdmitUnderAnotherConfig: when a start takes over from a
// Spawner of another Factory (the server stopped under another Config),
// the objects Admit accepts are the ones created: the pod mounts the
// server's claim, which Admit saw.
func TestSpawnAdmitUnderAnotherConfig(t *testing.T) {
	ns := newNamespace(t)
	base := withStorage(baseConfig(ns), "claim-{user_server}")
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 120*time.Second)
	alice := naming.Server{Username: "ao-alice"}
	first := hubConfig(t, base, map[string]any{"pod_name_template": "first-{user_server}"})
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Config: first}); err != nil || !started {
		t.Fatalf("the first start: started %v, %v", started, err)
	}
	waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	stopServer(t, m, alice)

	other := hubConfig(t, base, map[string]any{"pod_name_template": "other-{user_server}", "pvc_name_template": "other-claim-{user_server}"})
	var admitted *spawner.Objects
	accept := func(o *spawner.Objects) error {
		admitted = o
		return nil
	}
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Config: other, Admit: accept}); err != nil || !started || admitted == nil {
		t.Fatalf("the start under another Config: started %v, %v, Admit called %v", started, err, admitted != nil)
	}
	st := waitStatus(t, m, alice, "running under the other Config", phaseIs(PhaseRunning))
	pod := apiPod(t, ns, st.State.PodName)
	if pod.Name != admitted.Pod.Name {
		t.Errorf("made pod %s; Admit accepted %s", pod.Name, admitted.Pod.Name)
	}
	if got, want := podClaims(pod), podClaims(admitted.Pod); !slices.Equal(got, want) || !slices.Equal(got, []string{"claim-ao-alice"}) {
		t.Errorf("the pod made mounts claims %q; Admit accepted a pod mounting %q; want both the server's claim-ao-alice", got, want)
	}
	if admitted.PVC != nil && admitted.PVC.Name != "claim-ao-alice" {
		t.Errorf("Admit accepted claim %q, want the server's claim-ao-alice (or none: it exists)", admitted.PVC.Name)
	}
}

// TestSpawnHubNoneAfterAHub: a start that names no hub, of a server
// another hub started before, says no hub from the status Spawn returns
// (as its pod records), not the earlier one's.
func TestSpawnHubNoneAfterAHub(t *testing.T) {
	ns := newNamespace(t)
	base := baseConfig(ns)
	base.ProfileList = []kubespawner.Profile{
		{DisplayName: "Default", Slug: "default", Default: true},
		{DisplayName: "Slow", Slug: "slow", KubeSpawnerOverride: map[string]any{"extra_annotations": map[string]any{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady}}},
	}
	m, _ := runManager(t, Options{Config: base})
	ctx := ctxTimeout(t, 60*time.Second)
	alice := naming.Server{Username: "hn-alice"}
	if _, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, Hub: "hub-a"}); err != nil || !started {
		t.Fatalf("hub-a's start: started %v, %v", started, err)
	}
	waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	stopServer(t, m, alice)

	// The slow profile keeps the start starting: its state is the one
	// Spawn accepted.
	st, started, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, UserOptions: map[string]string{"profile": "slow"}})
	if err != nil || !started {
		t.Fatalf("the hub-less start: started %v, %v", started, err)
	}
	if st.State.Hub != "" {
		t.Errorf("the hub-less start's Spawn returns a status naming hub %q, want none", st.State.Hub)
	}
	if st, err := m.Status(alice); err != nil || st.Phase != PhaseStarting || st.State.Hub != "" {
		t.Errorf("while the hub-less start starts: %s, hub %q (%v); want starting, no hub", st.Phase, st.State.Hub, err)
	}
	pods := serverPods(t, cluster.Client, ns, alice.Username)
	if len(pods) != 1 {
		t.Fatalf("alice has pods %v, want one", podNames(pods))
	}
	if rec := recordedState(t, &pods[0]); rec.Hub != "" {
		t.Errorf("the hub-less start's pod records hub %q, want none", rec.Hub)
	}
}
