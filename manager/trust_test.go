package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// attackerHost is where a planted pod's state record sends the user.
const attackerHost = "127.0.0.99"

// plantPod creates, in namespace ns under name (empty: the name
// spawnkit gives the server), the pod spawnkit would make for srv under
// cfg, its state record pointing at the attacker's host, and waits until
// it runs.
func plantPod(t *testing.T, ctx context.Context, cfg kubespawner.Config, srv naming.Server, ns, name string) *corev1.Pod {
	t.Helper()
	o, err := newSpawner(t, srv, cfg).Plan(ctx, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Pod.DeepCopy()
	pod.Namespace = ns
	if name != "" {
		pod.Name = name
	}
	st := o.State
	st.ConnectHost = attackerHost
	st.URL = "http://" + attackerHost + ":8888"
	pod.Annotations[naming.AnnotationState] = st.String()
	return createRunning(t, ctx, pod)
}

// createRunning creates pod and waits until the simulated kubelet runs it.
func createRunning(t *testing.T, ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cluster.WaitForPod(ctx, pod.Namespace, pod.Name, func(p *corev1.Pod) (bool, error) {
		return p != nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("planted pod %s/%s never ran: %v", pod.Namespace, pod.Name, err)
	}
	return p
}

// logLines collects the lines a Manager logs.
type logLines struct {
	ch chan string
}

func newLogLines() *logLines { return &logLines{ch: make(chan string, 1000)} }

func (l *logLines) ctx(parent context.Context) context.Context {
	return logr.NewContext(parent, funcr.New(func(prefix, args string) {
		select {
		case l.ch <- prefix + " " + args:
		default:
		}
	}, funcr.Options{}))
}

// waitLine waits for a logged line containing every one of parts.
func (l *logLines) waitLine(t *testing.T, d time.Duration, parts ...string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case line := <-l.ch:
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return
			}
		case <-deadline:
			t.Fatalf("no log line with %q within %s", parts, d)
		}
	}
}

// startManager runs a Manager with ctx's logger until the test ends.
func startManager(t *testing.T, ctx context.Context, opts Options) *Manager {
	t.Helper()
	opts.Client, opts.Registry = cluster.Client, sharedRegistry(t)
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// untrustedCount reads spawnkit_manager_untrusted_pods_total.
func untrustedCount(m *Manager) float64 {
	var out dto.Metric
	if err := m.metrics.untrusted.Write(&out); err != nil {
		return -1
	}
	return out.GetCounter().GetValue()
}

// expectIgnored checks that srv is unknown to m (never adopted) after
// its planted pod ran and was logged, also after every pod went through
// the Manager again (a resync), which counts no pod twice. (Other tests'
// planted pods may be counted too: with user namespaces the Manager
// sees the whole cluster.)
func expectIgnored(t *testing.T, m *Manager, srv naming.Server) {
	t.Helper()
	before := untrustedCount(m)
	if before < 1 {
		t.Fatalf("untrusted pods counted %v times, want at least the planted one", before)
	}
	settle(t, m)
	if st, err := m.Status(srv); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a planted pod was adopted as %v's server: %+v (%v)", srv, st, err)
	}
	if got := untrustedCount(m); got != before {
		t.Errorf("untrusted pods counted %v times after a resync, %v before: a pod counted twice", got, before)
	}
}

// TestPlantedPodInAnotherNamespaceIsNotAdopted: with
// enable_user_namespaces (the Manager watches every namespace), a pod in
// a namespace that is not the user's, carrying spawnkit's labels, the
// user's owner annotations and a state record sending the user to the
// attacker, is never adopted: neither found at recovery nor later, it is
// logged naming the pod and counted once; the user's own Spawn then
// starts a pod in the user's namespace and returns its URL.
func TestPlantedPodInAnotherNamespaceIsNotAdopted(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.EnableUserNamespaces = true
	tenant := newNamespace(t) // any tenant's namespace
	alice := naming.Server{Username: "alice-planted"}
	bob := naming.Server{Username: "bob-planted"}

	plantPod(t, ctx, cfg, alice, tenant, "") // before the Manager starts: recovery
	logs := newLogLines()
	m := startManager(t, logs.ctx(ctx), Options{Config: cfg})
	logs.waitLine(t, 20*time.Second, "ignoring a pod that claims a server", tenant+"/", alice.Username)
	expectIgnored(t, m, alice)

	plantPod(t, ctx, cfg, bob, tenant, "") // while it runs: the informer's event
	logs.waitLine(t, 20*time.Second, "ignoring a pod that claims a server", tenant+"/", bob.Username)
	expectIgnored(t, m, bob)

	st, _, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env})
	if err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	if st.State.Namespace == tenant || strings.Contains(st.URL, attackerHost) {
		t.Fatalf("alice's server is the planted pod: %+v", st)
	}
	if want := newSpawner(t, alice, cfg).State().Namespace; st.State.Namespace != want {
		t.Errorf("alice's server is in %q, want her namespace %q", st.State.Namespace, want)
	}
}

// TestPlantedKubeSpawnerPodInAnotherNamespaceIsNotAdopted: the same
// attack with KubeSpawner's labels under AdoptKubeSpawner. The same pod
// in the user's own namespace is adopted (the control: the mode works).
func TestPlantedKubeSpawnerPodInAnotherNamespaceIsNotAdopted(t *testing.T) {
	c := vectorCase(t, "defaults_default_server")
	var pod corev1.Pod
	if err := json.Unmarshal(c.Expected.Pod, &pod); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.EnableUserNamespaces = true
	srv := naming.Server{Username: c.User.Name, Servername: c.ServerName}
	own := newSpawner(t, srv, cfg).State()
	if own.PodName != pod.Name {
		t.Fatalf("the vector's pod is %q, spawnkit names it %q: the control below would prove nothing", pod.Name, own.PodName)
	}

	planted := pod.DeepCopy()
	planted.Namespace = newNamespace(t)
	createRunning(t, ctx, planted)
	logs := newLogLines()
	m := startManager(t, logs.ctx(ctx), Options{Config: cfg, AdoptKubeSpawner: true})
	logs.waitLine(t, 20*time.Second, "ignoring a pod that claims a server", planted.Namespace+"/"+planted.Name)
	expectIgnored(t, m, srv)

	real := pod.DeepCopy()
	real.Namespace = own.Namespace
	ran := createRunning(t, ctx, real)
	st := waitStatus(t, m, srv, "running", phaseIs(PhaseRunning))
	if want := "http://" + ran.Status.PodIP + ":8888"; st.URL != want || st.State.Namespace != own.Namespace {
		t.Errorf("the KubeSpawner pod in the user's namespace: URL %q in %q, want %q in %q", st.URL, st.State.Namespace, want, own.Namespace)
	}
}

// TestPlantedPodInTheHubNamespaceIsNotAdopted: without user namespaces,
// a pod in the hub's own namespace under a name that is not the server's
// (with spawnkit's labels, the user's annotations and a foreign state
// record) is not the server either.
func TestPlantedPodInTheHubNamespaceIsNotAdopted(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	alice := naming.Server{Username: "alice-hubns"}
	plantPod(t, ctx, cfg, alice, hub, "innocent-looking")
	logs := newLogLines()
	m := startManager(t, logs.ctx(ctx), Options{Config: cfg})
	logs.waitLine(t, 20*time.Second, "ignoring a pod that claims a server", hub+"/innocent-looking")
	expectIgnored(t, m, alice)
	if _, _, err := m.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	if st.State.PodName == "innocent-looking" || strings.Contains(st.URL, attackerHost) {
		t.Fatalf("alice's server is the planted pod: %+v", st)
	}
}

// TestProfileNamespaceAcrossRestart: a server a profile puts in another
// namespace is recovered by a new Manager (which watches the profile's
// namespace too), with the same URL, and is stopped by it.
func TestProfileNamespaceAcrossRestart(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub, other := newNamespace(t), newNamespace(t)
	cfg := baseConfig(hub)
	cfg.ProfileList = []kubespawner.Profile{
		{DisplayName: "Here", Slug: "here", Default: true},
		{DisplayName: "Elsewhere", Slug: "elsewhere", KubeSpawnerOverride: map[string]any{"namespace": other}},
	}
	alice := naming.Server{Username: "alice-elsewhere"}

	first, stopFirst := runManager(t, Options{Config: cfg})
	if err := first.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, UserOptions: map[string]string{"profile": "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	was := waitStatus(t, first, alice, "running", phaseIs(PhaseRunning))
	if was.State.Namespace != other {
		t.Fatalf("the profile's server is in %q, want %q", was.State.Namespace, other)
	}
	stopFirst()

	second, stopSecond := runManager(t, Options{Config: cfg})
	defer stopSecond()
	st := waitStatus(t, second, alice, "running", phaseIs(PhaseRunning))
	if st.URL != was.URL || st.State.Namespace != other {
		t.Errorf("recovered as %q in %q, want %q in %q", st.URL, st.State.Namespace, was.URL, other)
	}
	if _, err := second.Stop(ctx, alice, spawner.StopOptions{Now: true}); err != nil {
		t.Fatalf("Stop after the restart: %v", err)
	}
	if _, err := cluster.Client.CoreV1().Pods(other).Get(ctx, was.State.PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after Stop the pod in the profile's namespace is still there (err %v)", err)
	}
}

// TestNamespacesAManagerCannotList: a configuration whose unlisted
// choice lets the user type the namespace is refused by New, naming the
// option; a ProfileListFunc's profile that puts a server in a namespace
// Config.ProfileNamespaces does not declare is refused at Spawn, while a
// declared one works.
func TestNamespacesAManagerCannotList(t *testing.T) {
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	cfg.ProfileList = []kubespawner.Profile{{DisplayName: "Any", Slug: "any", ProfileOptions: kubespawner.OrderedOptions{{Name: "where",
		ProfileOption: kubespawner.ProfileOption{DisplayName: "Where", UnlistedChoice: &kubespawner.UnlistedChoice{Enabled: true,
			KubeSpawnerOverride: map[string]any{"namespace": "team-{value}"}}}}}}}
	_, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err == nil || !strings.Contains(err.Error(), `profile "any", option "where"`) {
		t.Fatalf("New = %v, want a refusal naming the unlisted choice", err)
	}

	// Misspelt: an empty declared namespace would widen the watch to
	// every namespace; refused naming it.
	empty := baseConfig(hub)
	empty.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) { return nil, nil }
	empty.ProfileNamespaces = []string{"team-a", ""}
	if _, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: empty}); err == nil || !strings.Contains(err.Error(), "ProfileNamespaces[1]") {
		t.Errorf("New with an empty ProfileNamespaces entry = %v, want a refusal naming it", err)
	}

	ctx := ctxTimeout(t, 60*time.Second)
	// A profile naming a namespace no namespace can be called is never
	// watched (its starts are refused): the Manager becomes ready.
	badName := baseConfig(hub)
	badName.ProfileList = []kubespawner.Profile{{DisplayName: "Bad", Slug: "bad", KubeSpawnerOverride: map[string]any{"namespace": "Team A"}}}
	bm, stopBad := runManager(t, Options{Config: badName})
	if err := bm.WaitReady(ctx); err != nil {
		t.Fatalf("a profile with an invalid namespace name kept the Manager from becoming ready: %v", err)
	}
	stopBad()

	declared := newNamespace(t)
	cfg = baseConfig(hub)
	cfg.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) {
		return []kubespawner.Profile{
			{DisplayName: "Declared", Slug: "declared", Default: true, KubeSpawnerOverride: map[string]any{"namespace": declared}},
			{DisplayName: "Undeclared", Slug: "undeclared", KubeSpawnerOverride: map[string]any{"namespace": "kube-system"}},
		}, nil
	}
	cfg.ProfileNamespaces = []string{declared}
	m, stop := runManager(t, Options{Config: cfg})
	defer stop()
	_, _, err = m.Spawn(ctx, naming.Server{Username: "carol"}, SpawnOptions{UserOptions: map[string]string{"profile": "undeclared"}})
	var pe *kubespawner.ProfileError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), `"kube-system"`) {
		t.Fatalf("Spawn with an undeclared profile namespace = %v, want a *kubespawner.ProfileError naming it", err)
	}
	if _, _, err := m.Spawn(ctx, naming.Server{Username: "dave"}, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, m, naming.Server{Username: "dave"}, "running", phaseIs(PhaseRunning)); st.State.Namespace != declared {
		t.Errorf("dave's server is in %q, want the declared %q", st.State.Namespace, declared)
	}
}

// TestDeleteForeverForgetsAndWaitsForTheClaim: across a restart (the
// server is in a profile's namespace), Stop then DeleteForever: once
// DeleteForever returns the server is forgotten (Status is ErrNotFound)
// and its claim is gone, not terminating: a finalizer that holds the
// claim for a while holds DeleteForever as long.
func TestDeleteForeverForgetsAndWaitsForTheClaim(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub, other := newNamespace(t), newNamespace(t)
	cfg := baseConfig(hub)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	cfg.ProfileList = []kubespawner.Profile{
		{DisplayName: "Here", Slug: "here", Default: true},
		{DisplayName: "Elsewhere", Slug: "elsewhere", KubeSpawnerOverride: map[string]any{"namespace": other}},
	}
	alice := naming.Server{Username: "alice-deleted"}
	first, stopFirst := runManager(t, Options{Config: cfg})
	if err := first.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env, UserOptions: map[string]string{"profile": "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, first, alice, "running", phaseIs(PhaseRunning))
	stopFirst()

	m, stop := runManager(t, Options{Config: cfg})
	defer stop()
	waitStatus(t, m, alice, "running", phaseIs(PhaseRunning))
	st, err := m.Stop(ctx, alice, spawner.StopOptions{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	claims := cluster.Client.CoreV1().PersistentVolumeClaims(other)
	if st.State.PVCName == "" || st.State.Namespace != other {
		t.Fatalf("state after Stop = %+v, want a claim in %s", st.State, other)
	}
	const hold = "test.spawnkit.dev/hold"
	claim, err := claims.Get(ctx, st.State.PVCName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Finalizers = append(claim.Finalizers, hold)
	if _, err := claims.Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		// Released only once DeleteForever has asked the claim to go: it
		// must then wait for the finalizer.
		_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			c, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			return err != nil || c.DeletionTimestamp != nil, nil
		})
		for range 20 {
			c, err := claims.Get(context.Background(), claim.Name, metav1.GetOptions{})
			if err != nil {
				break
			}
			c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == hold })
			if _, err := claims.Update(context.Background(), c, metav1.UpdateOptions{}); err == nil {
				break
			}
		}
		released <- time.Now()
	}()
	if err := m.DeleteForever(ctx, alice); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	if r := <-released; returned.Before(r) {
		t.Errorf("DeleteForever returned %s before the finalizer was removed", r.Sub(returned))
	}
	if _, err := claims.Get(ctx, claim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claim after DeleteForever returned: %v, want NotFound", err)
	}
	if st, err := m.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status after DeleteForever = %+v, %v; want ErrNotFound", st, err)
	}
}

// TestFailedStatusAlwaysHasAReason: a start the API server refuses (a
// ResourceQuota of the hub's namespace, not spawnkit's, allows no pod)
// fails with reason APIError and the server's message; DeleteForever of
// the running server says it is running, not "stopping".
func TestFailedStatusAlwaysHasAReason(t *testing.T) {
	ctx := ctxTimeout(t, 90*time.Second)
	ns := newNamespace(t)
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if _, err := cluster.Client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m, stop := runManager(t, Options{Config: baseConfig(ns)})
	defer stop()
	eve := naming.Server{Username: "eve-refused"}
	// The quota controller takes a moment to fill in the quota's usage;
	// until then the API server refuses every pod anyway.
	_, _, err := m.Spawn(ctx, eve, SpawnOptions{Env: hubStart().Env})
	st := waitStatus(t, m, eve, "failed", phaseIs(PhaseFailed))
	if st.Reason != spawner.ReasonAPIError || !strings.Contains(st.Message, "exceeded quota") {
		t.Errorf("failed status = reason %q, message %q (Spawn: %v); want APIError with the API server's message", st.Reason, st.Message, err)
	}
	if err := cluster.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "a start once the quota is gone", testutil.True(func() bool {
		_, _, err := m.Spawn(ctx, eve, SpawnOptions{Env: hubStart().Env})
		if err != nil {
			return false
		}
		st, _ := m.Status(eve)
		return st.Phase != PhaseFailed
	}))
	waitStatus(t, m, eve, "running", phaseIs(PhaseRunning))
	err = m.DeleteForever(ctx, eve)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "is running") || strings.Contains(err.Error(), "stopping") {
		t.Errorf("DeleteForever of a running server = %v; want ErrBusy saying it is running", err)
	}
}

// TestCompactionAndAPIServerRestart: etcd's history is compacted, then the
// API server restarts while the Manager's informers watch: their watches
// come back from resourceVersions the new API server no longer has (410
// Gone) and relist. Running servers stay running with the same URL, no
// failed or stopped status is reported for them, the relist is bounded
// (the Manager is healthy again within 60 s) and a new start works.
func TestCompactionAndAPIServerRestart(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns), ResyncInterval: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 240*time.Second)
	servers := []naming.Server{{Username: "compact-a"}, {Username: "compact-b"}}
	urls := map[string]string{}
	for _, s := range servers {
		if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
		urls[s.Username] = waitStatus(t, m, s, "running", phaseIs(PhaseRunning)).URL
	}
	watches := map[string]*advWatch{}
	for _, s := range servers {
		watches[s.Username] = watchServer(ctx, m, s)
	}
	// Changes the old API server's watch cache saw and the new one will
	// not have: other pods come and go.
	for i := range 5 {
		p := createRunning(t, ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("churn-%d", i),
			Labels: map[string]string{naming.LabelComponent: naming.DefaultComponent}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}})
		if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := c.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = c.StartAPIServer()
		}
	})
	testutil.Eventually(t, 30*time.Second, "the Manager's pod informer to see the outage", testutil.True(func() bool {
		return !m.Health().Pods.Healthy()
	}))
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	t.Logf("etcd compacted at revision %d; the API server restarted", rev)
	testutil.Eventually(t, 60*time.Second, "the Manager healthy after the restart", testutil.True(func() bool {
		return m.Health().Pods.Healthy()
	}))
	h := m.Health().Pods
	t.Logf("the Manager's pod informer healthy %s after the API server came back (watch errors %d, the last: %v)", time.Since(back).Round(100*time.Millisecond), h.WatchErrors, h.LastError)
	settle(t, m)
	// settle proves the Manager has nothing left to do, but Watch relays
	// statuses in goroutines of its own: one published just before
	// settle returned may still be on its way to w, and nothing marks the
	// end of that relay, so give it time.
	time.Sleep(2 * time.Second)
	for _, s := range servers {
		phases, _ := watches[s.Username].snapshot()
		for _, p := range phases {
			if p != PhaseRunning {
				t.Errorf("%s: phase %s reported across the compaction and restart (all: %v)", s.Username, p, phases)
			}
		}
		st, err := m.Status(s)
		if err != nil || st.Phase != PhaseRunning || st.URL != urls[s.Username] {
			t.Errorf("%s after the restart: %+v, %v; want running at %s", s.Username, st, err, urls[s.Username])
		}
	}
	// The simulated cluster's own components recover at their own pace:
	// in one whole-package run on Kubernetes 1.32 the kube-scheduler
	// relisted about 70 s after the restart (7 s when this test runs
	// alone), longer than waitStatus allows. Wait for the cluster to run a
	// plain pod first, so that what is timed below is the Manager's start,
	// not the scheduler's recovery.
	probeCtx, cancelProbe := context.WithTimeout(ctx, 150*time.Second)
	createRunning(t, probeCtx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-after-restart"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}})
	cancelProbe()
	t.Logf("the simulated cluster ran a pod again %s after the restart", time.Since(back).Round(100*time.Millisecond))
	late := naming.Server{Username: "compact-late"}
	if _, _, err := m.Spawn(ctx, late, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, late, "running", phaseIs(PhaseRunning))
}

// Start refuses a server older than spawnkit supports before it watches
// anything, with an error naming the version, and Ready does not hang.
func TestStartRefusesOldServer(t *testing.T) {
	client := fake.NewClientset()
	client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "31", GitVersion: "v1.31.14"}
	reg, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	m, err := New(Options{Client: client, Registry: reg, Config: baseConfig("hub")})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(t.Context())
	if !errors.Is(err, spawner.ErrServerTooOld) || !strings.Contains(err.Error(), "v1.31.14") {
		t.Fatalf("Start on a 1.31 server = %v, want ErrServerTooOld naming v1.31.14", err)
	}
	if err := m.WaitReady(t.Context()); err == nil {
		t.Error("WaitReady succeeded on a Manager that refused to start")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			t.Errorf("Start %s %s before refusing the server", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// Health is read by readiness probes while Start shuts down: reading it
// in a loop across the end of Start is race-free (go test -race) and ends
// unsynced, never with a stale healthy cache. The service's failover test
// first caught this as a race between podSet.Release and Status.
func TestHealthDuringShutdown(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	reg, err := reflector.New(reflector.Options{Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	m, err := New(Options{Client: c.Client, Registry: reg, Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	if err := m.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var n atomic.Int64
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for {
			select {
			case <-stop:
				return
			default:
				_ = m.Health()
				n.Add(1)
			}
		}
	}()
	// The reads are under way before the shutdown begins.
	testutil.Eventually(t, 10*time.Second, "a hundred reads of Health", testutil.True(func() bool { return n.Load() >= 100 }))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-reading
	if n.Load() == 0 {
		t.Fatal("Health was never read")
	}
	if h := m.Health(); h.Running || h.Pods.Synced {
		t.Errorf("Health after Start returned: %+v; want not running and no synced cache", h)
	}
}
