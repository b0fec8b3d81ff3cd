package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// The attacks on the promises of several clusters (issue 31): one server
// in one cluster, split brain left alone, fast failures naming an
// unavailable cluster, DeleteForever across clusters, unknown (never
// failed or stopped) while a cluster is away.

// optionsWith is tc.options() with more profiles, in both clusters'
// configurations.
func (tc *twoClusters) optionsWith(t *testing.T, extra ...kubespawner.Profile) Options {
	t.Helper()
	base := tc.base
	base.ProfileList = append(slices.Clone(tc.base.ProfileList), extra...)
	cfgB, err := base.Override(map[string]any{"pod_connect_ip": "jupyter-{username}.b.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	return Options{Config: base, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra},
		{Name: "b", Client: tc.b.Client, Registry: tc.rb, Config: &cfgB},
	}}
}

// serverPods are the pods in ns of one cluster that claim user's server
// (terminating ones included), read from the API server.
func serverPods(t *testing.T, client kubernetes.Interface, ns, user string) []corev1.Pod {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations[naming.AnnotationUsername] == user {
			out = append(out, p)
		}
	}
	return out
}

// claimUID is the UID of a claim, "" when there is none.
func claimUID(t *testing.T, client kubernetes.Interface, ns, name string) types.UID {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.UID
}

// startBehindBack starts s in cluster b with a Spawner of its own, as
// another hub (or a restored database) would: the Manager did not ask.
func startBehindBack(t *testing.T, tc *twoClusters, s naming.Server) spawner.State {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	sp, err := spawner.New(s, spawner.Options{Client: tc.b.Client, Registry: tc.rb, Config: tc.cfgB, Cluster: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	opts := hubStart()
	opts.UserOptions = map[string]string{"profile": "gpu"}
	if _, err := sp.Start(ctx, opts); err != nil {
		t.Fatalf("%s behind the Manager's back in b: %v", s.Username, err)
	}
	return sp.State()
}

func stopServer(t *testing.T, m *Manager, s naming.Server) {
	t.Helper()
	if _, err := m.Stop(ctxTimeout(t, 60*time.Second), s, spawner.StopOptions{}); err != nil {
		t.Fatalf("Stop %s: %v", s.Username, err)
	}
}

func spawnWith(profile string) SpawnOptions {
	return SpawnOptions{Env: hubStart().Env, UserOptions: map[string]string{"profile": profile}}
}

// statusLog keeps every status a Manager's Watch reports.
type statusLog struct {
	mu  sync.Mutex
	all []Status
}

func collectStatuses(ctx context.Context, m *Manager) *statusLog {
	l := &statusLog{}
	w := m.Watch(ctx)
	go func() {
		for st := range w {
			l.mu.Lock()
			l.all = append(l.all, st)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *statusLog) of(user string) []Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Status
	for _, st := range l.all {
		if st.User == user {
			out = append(out, st)
		}
	}
	return out
}

func clusterHealthNamed(m *Manager, name string) (ClusterHealth, bool) {
	for _, c := range m.Health().Clusters {
		if c.Name == name {
			return c, true
		}
	}
	return ClusterHealth{}, false
}

// waitClusterDown waits until the Manager marks the cluster unavailable;
// waitClusterUp until it is available with healthy informers.
func waitClusterDown(t *testing.T, m *Manager, name string, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, "cluster "+name+" unavailable", testutil.True(func() bool {
		h, ok := clusterHealthNamed(m, name)
		return ok && h.Unavailable
	}))
}

func waitClusterUp(t *testing.T, m *Manager, name string, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, "cluster "+name+" available", func() error {
		if h, ok := clusterHealthNamed(m, name); !ok || h.Unavailable || !h.Pods.Healthy() {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
}

// apiSwitch stops and starts cluster b's API server, and starts it again
// at the end of the test if it is down then.
type apiSwitch struct {
	t    *testing.T
	b    *testcluster.Cluster
	down bool
}

func newAPISwitch(t *testing.T, b *testcluster.Cluster) *apiSwitch {
	s := &apiSwitch{t: t, b: b}
	t.Cleanup(func() {
		if s.down {
			if err := b.StartAPIServer(); err != nil {
				t.Error(err)
			}
		}
	})
	return s
}

func (s *apiSwitch) stop() {
	s.t.Helper()
	if err := s.b.StopAPIServer(); err != nil {
		s.t.Fatal(err)
	}
	s.down = true
}

func (s *apiSwitch) start() {
	s.t.Helper()
	if err := s.b.StartAPIServer(); err != nil {
		s.t.Fatal(err)
	}
	s.down = false
}

// 1. One server, one cluster: a Spawn while a pod of the server exists
// in another cluster (one stuck terminating after a Stop, one made
// behind the Manager's back, one that appears while the start waits for
// a slot) never leaves the server with pods in two clusters.
func TestAttackSpawnWhilePodInOtherCluster(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.optionsWith(t, kubespawner.Profile{DisplayName: "Slow", Slug: "slow", KubeSpawnerOverride: map[string]any{
		"kubernetes_cluster": "a",
		"extra_annotations":  map[string]any{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady},
	}})
	opts.ConcurrentSpawnLimit = 1
	m, _ := runManager(t, opts)
	ctx := ctxTimeout(t, 5*time.Minute)

	// bob runs in b; his pod there gets a finalizer nobody removes, so
	// the Stop leaves it terminating (its containers may still be
	// shutting down, its claim in use). A start of bob in a must wait
	// for it: the pod exists.
	t.Run("TerminatingPodInB", func(t *testing.T) {
		bob := naming.Server{Username: "bob"}
		sb := spawnReady(t, m, bob, "gpu")
		if _, err := tc.b.Client.CoreV1().Pods(tc.ns).Patch(ctx, sb.State.PodName, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["spawnkit.test/hold"]}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, err := tc.b.Client.CoreV1().Pods(tc.ns).Patch(context.Background(), sb.State.PodName, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		})
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := m.Stop(stopCtx, bob, spawner.StopOptions{})
		cancel()
		t.Logf("Stop of bob with his pod held by a finalizer: %s (%s), %v", st.Phase, st.Reason, err)
		pb := serverPods(t, tc.b.Client, tc.ns, "bob")
		if len(pb) != 1 || pb[0].DeletionTimestamp == nil {
			t.Fatalf("bob's pods in b after the Stop: %d (want 1, terminating)", len(pb))
		}
		_, started, err := m.Spawn(ctx, bob, spawnWith("cpu"))
		if !errors.Is(err, ErrBusy) || started {
			t.Errorf("Spawn of bob in a while his pod %s/%s is still terminating in b: started %v, err %v; want ErrBusy, nothing started",
				pb[0].Namespace, pb[0].Name, started, err)
		}
		settle(t, m)
		if pa := serverPods(t, cluster.Client, tc.ns, "bob"); len(pa) != 0 {
			st, _ := m.Status(bob)
			t.Errorf("bob has %d pod(s) in a while his pod in b still exists (terminating): one server in two clusters; Manager says %s in %q (%s)",
				len(pa), st.Phase, st.Cluster, st.Reason)
		}
	})

	// alice is stopped in a (the Manager's view) when another hub starts
	// her in b. A Spawn placed in a must not make a second pod: ErrBusy,
	// or the Manager has already adopted her in b.
	t.Run("MadeBehindTheBack", func(t *testing.T) {
		alice := naming.Server{Username: "alice"}
		if st := spawnReady(t, m, alice, ""); st.Cluster != "a" {
			t.Fatalf("alice in %q, want a", st.Cluster)
		}
		stopServer(t, m, alice)
		startBehindBack(t, tc, alice)
		st, started, err := m.Spawn(ctx, alice, spawnWith("cpu"))
		switch {
		case errors.Is(err, ErrSplitBrain):
			t.Errorf("Spawn of alice: %v; a split brain with one pod", err)
		case errors.Is(err, ErrBusy):
			t.Logf("Spawn of alice while her pod runs in b: %v", err)
		case err == nil && !started && st.Cluster == "b":
			t.Logf("Spawn of alice: already adopted in b (%s)", st.Phase)
		default:
			t.Errorf("Spawn of alice (cpu, cluster a) while her pod runs in b: %+v, started %v, err %v; want ErrBusy or her status in b", st, started, err)
		}
		settle(t, m)
		if pa := serverPods(t, cluster.Client, tc.ns, "alice"); len(pa) != 0 {
			t.Errorf("alice has %d pod(s) in a besides hers in b", len(pa))
		}
		testutil.Eventually(t, 30*time.Second, "alice adopted, running in b", testutil.True(func() bool {
			st, _ := m.Status(alice)
			return st.Phase == PhaseRunning && st.Cluster == "b"
		}))
	})

	// carol's start waits for the one start slot (slowpoke holds it, its
	// pod never ready) when another hub starts her in b. The Manager
	// sees that pod: it must neither spin on it nor, once the slot is
	// free, create carol's pod in a as well.
	t.Run("PodElsewhereWhileQueued", func(t *testing.T) {
		slow, carol := naming.Server{Username: "slowpoke"}, naming.Server{Username: "carol"}
		if _, started, err := m.Spawn(ctx, slow, spawnWith("slow")); err != nil || !started {
			t.Fatalf("Spawn slowpoke: started %v, %v", started, err)
		}
		st, started, err := m.Spawn(ctx, carol, spawnWith("cpu"))
		if err != nil || !started {
			t.Fatalf("Spawn carol: %+v, started %v, %v", st, started, err)
		}
		if pa := serverPods(t, cluster.Client, tc.ns, "carol"); len(pa) != 0 {
			t.Fatalf("carol's start did not wait for the slot: %d pods in a", len(pa))
		}
		startBehindBack(t, tc, carol)
		key := serverKey{"carol", ""}
		testutil.Eventually(t, 30*time.Second, "the Manager sees carol's pod in b", testutil.True(func() bool {
			for c := range m.claims.of(key) {
				if c.name == "b" {
					return true
				}
			}
			return false
		}))
		r0 := m.reconciles.Load()
		// The window the rate is measured over: spinning shows only as
		// many reconciles in a given time.
		time.Sleep(2 * time.Second)
		if n := m.reconciles.Load() - r0; n > 200 {
			t.Errorf("%d reconciles in 2 s while carol's start waits for a slot in a and her pod runs in b: the workers spin on her", n)
		} else {
			t.Logf("%d reconciles in 2 s while carol waits", n)
		}
		stopServer(t, m, slow) // frees the slot
		settle(t, m)
		if pa := serverPods(t, cluster.Client, tc.ns, "carol"); len(pa) != 0 {
			st, _ := m.Status(carol)
			t.Errorf("carol's queued start created %d pod(s) in a although the Manager knew her pod in b: one server in two clusters; Manager says %s in %q (%s: %.120s)",
				len(pa), st.Phase, st.Cluster, st.Reason, st.Message)
		}
	})
}

// 2. DeleteForever needs every cluster: with b down it fails naming b
// and deletes nothing anywhere; once b is back it deletes the claims of
// both.
func TestAttackDeleteForeverClusterDown(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.options()
	// A window between b's API server going away and the Manager
	// marking b unavailable, wide enough to call into for sure.
	opts.ClusterDownAfter = 8 * time.Second
	m, _ := runManager(t, opts)
	ctx := ctxTimeout(t, 8*time.Minute)
	api := newAPISwitch(t, tc.b)

	// bob ran in b, then moved to a: a claim in each.
	bob := naming.Server{Username: "bob"}
	spawnReady(t, m, bob, "gpu")
	stopServer(t, m, bob)
	st := spawnReady(t, m, bob, "cpu")
	if st.Cluster != "a" {
		t.Fatalf("bob in %q after the move, want a", st.Cluster)
	}
	stopServer(t, m, bob)
	claim := st.State.PVCName
	uidA, uidB := claimUID(t, cluster.Client, tc.ns, claim), claimUID(t, tc.b.Client, tc.ns, claim)
	if uidA == "" || uidB == "" {
		t.Fatalf("bob's claim %s: uid %q in a, %q in b; want one in each", claim, uidA, uidB)
	}
	// xavier: stopped in b, for the race below.
	xavier := naming.Server{Username: "xavier"}
	spawnReady(t, m, xavier, "gpu")
	stopServer(t, m, xavier)

	// b marked unavailable: fast, naming b, nothing deleted.
	api.stop()
	waitClusterDown(t, m, "b", 40*time.Second)
	began := time.Now()
	err := m.DeleteForever(ctx, bob)
	took := time.Since(began)
	var cu *ClusterUnavailableError
	if !errors.As(err, &cu) || cu.Cluster != "b" || !errors.Is(err, ErrClusterUnavailable) {
		t.Errorf("DeleteForever with b unavailable: %v; want a ClusterUnavailableError naming b", err)
	}
	if took > 5*time.Second {
		t.Errorf("DeleteForever with b unavailable took %s; want it to fail fast", took)
	}
	if got := claimUID(t, cluster.Client, tc.ns, claim); got != uidA {
		t.Errorf("bob's claim in a: uid %q, was %q: deleted although b is down", got, uidA)
	}
	if st, err := m.Status(bob); err != nil || st.Phase != PhaseStopped {
		t.Errorf("bob after the refused DeleteForever: %+v, %v; want still known, stopped", st, err)
	}

	// While b is down, Stop of xavier (stopped in b) answers at once,
	// and a Spawn with profile any (b, then a) moves him to a. Run with
	// -race: the two must not touch the entry unlocked.
	t.Run("StopWhileSpawnMoves", func(t *testing.T) {
		var wg sync.WaitGroup
		done := make(chan struct{})
		var stops atomic.Int64
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				_, _ = m.Stop(ctx, xavier, spawner.StopOptions{})
				stops.Add(1)
			}
		})
		// The Spawn goes in among Stops already under way, and they go on
		// after it.
		testutil.Eventually(t, 10*time.Second, "ten Stops of xavier", testutil.True(func() bool { return stops.Load() >= 10 }))
		st, started, err := m.Spawn(ctx, xavier, spawnWith("any"))
		after := stops.Load()
		testutil.Eventually(t, 10*time.Second, "ten more Stops of xavier", testutil.True(func() bool { return stops.Load() >= after+10 }))
		close(done)
		wg.Wait()
		t.Logf("Spawn of xavier (any) with b down, among %d Stops: %s in %q, started %v, %v", stops.Load(), st.Phase, st.Cluster, started, err)
		if err == nil && st.Cluster != "a" {
			t.Errorf("xavier started in %q with b down; want a", st.Cluster)
		}
	})

	api.start()
	waitClusterUp(t, m, "b", 60*time.Second)
	if got := claimUID(t, tc.b.Client, tc.ns, claim); got != uidB {
		t.Fatalf("bob's claim in b: uid %q, was %q", got, uidB)
	}

	// b down but not yet marked (within ClusterDownAfter): still an
	// error naming b, and still nothing deleted in a.
	api.stop()
	h, _ := clusterHealthNamed(m, "b")
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	began = time.Now()
	err = m.DeleteForever(dctx, bob)
	cancel()
	t.Logf("DeleteForever right after b's API server stopped (b marked unavailable: %v): %s, %v", h.Unavailable, time.Since(began).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("DeleteForever with b's API server down: %v; want an error naming b", err)
	}
	if got := claimUID(t, cluster.Client, tc.ns, claim); got != uidA {
		t.Errorf("DeleteForever failed (b down) but deleted bob's claim in a (uid %q, was %q): a partial deletion reported as a failure", got, uidA)
	}
	if _, err := m.Status(bob); err != nil {
		t.Errorf("bob forgotten after a failed DeleteForever: %v", err)
	}
	api.start()
	waitClusterUp(t, m, "b", 60*time.Second)

	// Both up: it succeeds, and the claims of both clusters go.
	if err := m.DeleteForever(ctx, bob); err != nil {
		t.Fatalf("DeleteForever with both clusters up: %v", err)
	}
	for name, c := range map[string]kubernetes.Interface{"a": cluster.Client, "b": tc.b.Client} {
		testutil.Eventually(t, 30*time.Second, "bob's claim gone in "+name, testutil.True(func() bool { return claimUID(t, c, tc.ns, claim) == "" }))
	}
	if _, err := m.Status(bob); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob after DeleteForever: %v; want ErrNotFound", err)
	}
}

// 3. The Manager dies right after Spawn returned for a server moving
// from b to a: a new Manager finds it in a only (its pod, not a new
// one), and its claim in b is kept.
func TestAttackKilledMidMove(t *testing.T) {
	tc := startSecondCluster(t)
	ctx := ctxTimeout(t, 4*time.Minute)
	m1, stop1 := runManager(t, tc.options())
	bob := naming.Server{Username: "bob"}
	sb := spawnReady(t, m1, bob, "gpu")
	stopServer(t, m1, bob)
	uidB := claimUID(t, tc.b.Client, tc.ns, sb.State.PVCName)
	if uidB == "" {
		t.Fatal("bob has no claim in b")
	}
	st, started, err := m1.Spawn(ctx, bob, spawnWith("cpu"))
	if err != nil || !started || st.Cluster != "a" {
		t.Fatalf("Spawn of bob with profile cpu: %+v, started %v, %v; want a start in a", st, started, err)
	}
	stop1() // killed: the start is detached
	pa := serverPods(t, cluster.Client, tc.ns, "bob")
	if len(pa) != 1 {
		t.Fatalf("bob's pods in a once Spawn returned: %d, want 1 (Spawn returns once the pod exists)", len(pa))
	}

	m2, _ := runManager(t, tc.options())
	var got Status
	testutil.Eventually(t, 60*time.Second, "bob running in a under the new Manager", testutil.True(func() bool {
		got, _ = m2.Status(bob)
		if got.Reason == ReasonSplitBrain {
			t.Fatalf("bob reported in two clusters: %s", got.Message)
		}
		return got.Phase == PhaseRunning && got.Cluster == "a"
	}))
	if got.State.Cluster != "a" {
		t.Errorf("bob's State.Cluster %q, want a", got.State.Cluster)
	}
	if now := serverPods(t, cluster.Client, tc.ns, "bob"); len(now) != 1 || now[0].UID != pa[0].UID {
		t.Errorf("bob's pods in a: %d; want the one the first Manager made (uid %s)", len(now), pa[0].UID)
	}
	if pb := serverPods(t, tc.b.Client, tc.ns, "bob"); len(pb) != 0 {
		t.Errorf("bob has %d pod(s) in b after the move", len(pb))
	}
	if u := claimUID(t, tc.b.Client, tc.ns, sb.State.PVCName); u != uidB {
		t.Errorf("bob's claim in b: uid %q, was %q; the move keeps it", u, uidB)
	}
	// The next start without a cluster in the profile stays in a.
	stopServer(t, m2, bob)
	if st := spawnReady(t, m2, bob, ""); st.Cluster != "a" {
		t.Errorf("bob restarted with the default profile: cluster %q, want a (where he last ran)", st.Cluster)
	}
}

// 4. Misspelt and empty cluster names: refused by New when New can
// tell, else by Spawn, before anything is made, naming what is wrong.
func TestAttackMisspeltClusters(t *testing.T) {
	tc := startSecondCluster(t)
	emptyBase := tc.base
	emptyBase.KubernetesCluster = kubespawner.ClusterNames{""}
	dupBase := tc.base
	dupBase.KubernetesCluster = kubespawner.ClusterNames{"a", "a"}
	for _, bad := range []struct {
		name string
		opts Options
		want string
	}{
		{"second unnamed", Options{Config: tc.base, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Client: tc.b.Client, Registry: tc.rb}}}, "Clusters[1].Name"},
		{"duplicate", Options{Config: tc.base, Clusters: []Cluster{{Name: "b", Client: cluster.Client, Registry: tc.ra}, {Name: "b", Client: tc.b.Client, Registry: tc.rb}}}, "two clusters"},
		{"upper case", Options{Config: tc.base, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "B", Client: tc.b.Client, Registry: tc.rb}}}, `"B"`},
		{"too long", Options{Config: tc.base, Clusters: []Cluster{{Name: strings.Repeat("x", 64), Client: cluster.Client, Registry: tc.ra}}}, "Clusters[0].Name"},
		{"Client too", Options{Config: tc.base, Client: cluster.Client, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}}}, "either"},
		{"Registry too", Options{Config: tc.base, Registry: tc.ra, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}}}, "either"},
		{"no client", Options{Config: tc.base, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "b", Registry: tc.rb}}}, `cluster "b"`},
		{"no registry", Options{Config: tc.base, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "b", Client: tc.b.Client}}}, `cluster "b"`},
		{`kubernetes_cluster ""`, Options{Config: emptyBase, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "b", Client: tc.b.Client, Registry: tc.rb}}}, "kubernetes_cluster"},
		{"kubernetes_cluster twice", Options{Config: dupBase, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "b", Client: tc.b.Client, Registry: tc.rb}}}, "kubernetes_cluster"},
	} {
		m, err := New(bad.opts)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: New = %v; want an error containing %q", bad.name, err, bad.want)
		}
		if m != nil && err != nil {
			t.Errorf("%s: New returned a Manager with its error", bad.name)
		}
	}

	profile := func(slug string, clusters any) kubespawner.Profile {
		return kubespawner.Profile{DisplayName: slug, Slug: slug, KubeSpawnerOverride: map[string]any{"kubernetes_cluster": clusters}}
	}
	noSuchCluster := func(err error) string {
		if !errors.Is(err, ErrNoSuchCluster) || !strings.Contains(err.Error(), `"nowhere"`) || !strings.Contains(err.Error(), "a, b") {
			return "want ErrNoSuchCluster naming nowhere and the clusters a, b"
		}
		return ""
	}
	// A listed profile (or choice) naming a cluster the Manager does
	// not have is a typo New can see: refused there, naming the profile
	// and the cluster. A misspelt fallback is as wrong as a misspelt
	// first choice: it must not hide until the first cluster is down,
	// the moment the fallback was written for.
	choice := kubespawner.Profile{DisplayName: "choices", Slug: "choices", ProfileOptions: kubespawner.OrderedOptions{
		{Name: "where", ProfileOption: kubespawner.ProfileOption{DisplayName: "Where", Choices: kubespawner.OrderedChoices{
			{Key: "here", Choice: kubespawner.Choice{DisplayName: "Here", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "a"}}},
			{Key: "there", Choice: kubespawner.Choice{DisplayName: "There", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": []any{"b", "nowhere"}}}},
		}}}}}
	for _, p := range []kubespawner.Profile{profile("nowhere", "nowhere"), profile("a-then-nowhere", []any{"a", "nowhere"}),
		profile("nowhere-then-a", []any{"nowhere", "a"}), choice} {
		_, err := New(tc.optionsWith(t, p))
		if why := noSuchCluster(err); why != "" || !strings.Contains(err.Error(), fmt.Sprintf("profile %q", p.Slug)) {
			t.Errorf("New with profile %s: %v; %s, and the profile", p.Slug, err, why)
		}
	}
	// The base configuration naming no cluster of the Manager's: every
	// start would be refused.
	nb := tc.base
	nb.KubernetesCluster = kubespawner.ClusterNames{"nowhere"}
	nopts := tc.options()
	nopts.Config = nb
	if _, err := New(nopts); noSuchCluster(err) != "" || !strings.Contains(err.Error(), "base") {
		t.Errorf("New with base kubernetes_cluster nowhere: %v; %s, and the base", err, noSuchCluster(err))
	}

	// Values that are no cluster names, and the profiles of a
	// ProfileListFunc (known only per start), are refused by Spawn,
	// before anything is made.
	opts := tc.optionsWith(t,
		profile("empty", ""),
		profile("none", []any{}),
		profile("twice", []any{"b", "b"}),
		profile("upper", "B"),
	)
	m, _ := runManager(t, opts)
	dynamic := tc.options()
	dynamic.Config.ProfileList = nil
	dynamic.Config.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) {
		return append(slices.Clone(tc.base.ProfileList), profile("a-then-nowhere", []any{"a", "nowhere"}), profile("nowhere", "nowhere")), nil
	}
	dynamic.Clusters[1].Config = nil
	md, _ := runManager(t, dynamic)
	ctx := ctxTimeout(t, 3*time.Minute)
	refused := func(m *Manager, user, profile string, check func(err error) string) {
		t.Helper()
		s := naming.Server{Username: user}
		st, started, err := m.Spawn(ctx, s, spawnWith(profile))
		if started || err == nil {
			t.Errorf("profile %s: Spawn started %v (%s in %q), %v; want it refused", profile, started, st.Phase, st.Cluster, err)
		} else if why := check(err); why != "" {
			t.Errorf("profile %s: Spawn = %v; %s", profile, err, why)
		}
		if _, err := m.Status(s); !errors.Is(err, ErrNotFound) {
			t.Errorf("profile %s: the refused server is known: %v", profile, err)
		}
		if n := len(serverPods(t, cluster.Client, tc.ns, user)) + len(serverPods(t, tc.b.Client, tc.ns, user)); n != 0 {
			t.Errorf("profile %s: %d pods made for the refused server", profile, n)
		}
	}
	invalid := func(err error) string {
		var se *spawner.StartError
		if !errors.As(err, &se) || se.Step != spawner.StepPlan || !strings.Contains(err.Error(), "kubernetes_cluster") {
			return "want a *spawner.StartError at step plan naming kubernetes_cluster"
		}
		return ""
	}
	refused(md, "dyn-a-then-nowhere", "a-then-nowhere", noSuchCluster)
	refused(md, "dyn-nowhere", "nowhere", noSuchCluster)
	refused(m, "empty", "empty", invalid)
	refused(m, "twice", "twice", invalid)
	refused(m, "upper", "upper", invalid)
	// kubernetes_cluster: [] names no cluster: the default.
	if st := spawnReady(t, m, naming.Server{Username: "none"}, "none"); st.Cluster != "a" {
		t.Errorf("profile with kubernetes_cluster []: cluster %q, want a (the default)", st.Cluster)
	}
}

// 5. b's API server goes away for ~10 s during a start placed on b
// (right after Spawn returned, and just before Spawn, before the Manager
// noticed): the start is unknown meanwhile, never failed, a Stop fails
// fast and deletes nothing, and the start ends running with one pod.
func TestAttackOutageDuringSpawn(t *testing.T) {
	tc := startSecondCluster(t)
	// erin's start meets b down at its first request: what keeps it
	// alive until b is back is the API retry budget (30 s by default),
	// not start_timeout, and a loaded machine can take a while to bring
	// b's API server back after the 10 s outage.
	tc.base.K8sAPIRequestRetryTimeout, tc.cfgB.K8sAPIRequestRetryTimeout = 120, 120
	opts := tc.options()
	// erin's Spawn must come while b is down but not yet marked so;
	// the API server can take seconds to exit, so the default 3 s could
	// have marked it already.
	opts.ClusterDownAfter = 8 * time.Second
	m, _ := runManager(t, opts)
	ctx := ctxTimeout(t, 8*time.Minute)
	api := newAPISwitch(t, tc.b)
	log := collectStatuses(ctx, m)
	const outage = 10 * time.Second

	for _, round := range []struct {
		user        string
		downFirst   bool // the API server stops just before the Spawn
		description string
	}{
		{"dave", false, "stopped right after Spawn returned"},
		{"erin", true, "stopped just before Spawn, the Manager not yet aware"},
	} {
		s := naming.Server{Username: round.user}
		var down time.Time
		if round.downFirst {
			api.stop()
			down = time.Now()
		}
		st, started, err := m.Spawn(ctx, s, spawnWith("gpu"))
		if !round.downFirst {
			api.stop()
			down = time.Now()
		}
		if err != nil || !started || st.Cluster != "b" {
			t.Fatalf("%s (%s): Spawn = %+v, started %v, %v; want a start in b", round.user, round.description, st, started, err)
		}
		waitClusterDown(t, m, "b", 30*time.Second)
		testutil.Eventually(t, 10*time.Second, round.user+" unknown", testutil.True(func() bool {
			st, _ := m.Status(s)
			return st.Phase == PhaseUnknown && st.Reason == ReasonClusterUnavailable
		}))
		began := time.Now()
		_, err = m.Stop(ctx, s, spawner.StopOptions{})
		if took := time.Since(began); !errors.Is(err, ErrClusterUnavailable) || took > 5*time.Second {
			t.Errorf("%s: Stop while b is down: %v after %s; want ErrClusterUnavailable at once", round.user, err, took.Round(time.Millisecond))
		}
		// The outage lasts as long as the round says: no signal ends it.
		time.Sleep(time.Until(down.Add(outage)))
		api.start()
		t.Logf("%s: b's API server down %s (%s)", round.user, time.Since(down).Round(time.Millisecond), round.description)
		// The bound is for b's simulated components, not for spawnkit:
		// kwok and kube-scheduler reconnect with client-go's backoff
		// (up to a minute with its jitter, again after each refusal
		// of a server still starting), and under the whole suite's
		// load they took more than 90 s. A start that failed would
		// end the wait at once.
		var last Status
		testutil.EventuallyEvery(t, 100*time.Millisecond, 180*time.Second, round.user+" running, failed or stopped", func() error {
			last, _ = m.Status(s)
			if last.Phase != PhaseRunning && last.Phase != PhaseFailed && last.Phase != PhaseStopped {
				where := "no pod in b"
				if p, err := tc.b.Client.CoreV1().Pods(tc.ns).Get(ctx, "jupyter-"+round.user, metav1.GetOptions{}); err != nil {
					where = err.Error()
				} else {
					where = fmt.Sprintf("pod %s in b: %s on node %q, conditions %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
				}
				return fmt.Errorf("%s (%s: %s); %s", last.Phase, last.Reason, last.Message, where)
			}
			return nil
		})
		if last.Phase != PhaseRunning || last.Cluster != "b" {
			t.Errorf("%s after b is back: %s in %q (%s: %s); want running in b", round.user, last.Phase, last.Cluster, last.Reason, last.Message)
		}
		pa, pb := serverPods(t, cluster.Client, tc.ns, round.user), serverPods(t, tc.b.Client, tc.ns, round.user)
		if len(pa) != 0 || len(pb) != 1 {
			t.Errorf("%s: %d pods in a, %d in b; want 0 and 1", round.user, len(pa), len(pb))
		}
		if last.Phase == PhaseFailed && len(pb) > 0 {
			t.Errorf("%s: reported failed while its pod %s stays in b", round.user, pb[0].Name)
		}
		for _, st := range log.of(round.user) {
			if st.Phase == PhaseFailed || st.Phase == PhaseStopped {
				t.Errorf("%s: Watch reported %s (%s: %s) for an outage of %s, shorter than start_timeout", round.user, st.Phase, st.Reason, st.Message, outage)
				break
			}
		}
		waitClusterUp(t, m, "b", 60*time.Second)
	}
}

// discoveryOverride is a client whose discovery is another's.
type discoveryOverride struct {
	kubernetes.Interface
	disc discovery.DiscoveryInterfaces
}

func (c discoveryOverride) Discovery() discovery.DiscoveryInterfaces { return c.disc }

// versionFrom is b's client whose discovery answers GET /version from a
// server of its own: the n-th request (from 1) gets the body answer
// returns for it, or 503 when it returns nil.
func versionFrom(t *testing.T, b *testcluster.Cluster, answer func(n int64) []byte) kubernetes.Interface {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := answer(n.Add(1))
		if r.URL.Path != "/version" || body == nil {
			http.Error(w, "cluster b is away", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	disc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	return discoveryOverride{Interface: b.Client, disc: disc}
}

// versionOnce is b's client, but its discovery answers GET /version
// (with b's version) once and then nothing: a cluster that answers the
// Manager's version check and goes away before its informers sync.
func versionOnce(t *testing.T, b *testcluster.Cluster) kubernetes.Interface {
	t.Helper()
	body, err := json.Marshal(b.ServerVersion)
	if err != nil {
		t.Fatal(err)
	}
	return versionFrom(t, b, func(n int64) []byte {
		if n == 1 {
			return body
		}
		return nil
	})
}

// versionServer is b's client whose discovery answers GET /version with
// 503 for the first `fail` requests, then with version v (minor 31).
func versionServer(t *testing.T, b *testcluster.Cluster, fail int, v string) kubernetes.Interface {
	t.Helper()
	return versionFrom(t, b, func(n int64) []byte {
		if n <= int64(fail) {
			return nil
		}
		return fmt.Appendf(nil, `{"major":"1","minor":"31","gitVersion":%q}`, v)
	})
}

// startWithin starts a Manager and waits up to d for it to be ready; the
// error says why it is not (Start's own error when it returned).
func startWithin(t *testing.T, opts Options, d time.Duration) (*Manager, time.Duration, error) {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	finished := make(chan struct{})
	var startErr error
	began := time.Now()
	go func() {
		startErr = m.Start(ctx)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
		if startErr != nil {
			t.Logf("Start: %v", startErr)
		}
	})
	readyCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	if err := m.WaitReady(readyCtx); err != nil {
		select {
		case <-finished:
			return m, time.Since(began), fmt.Errorf("Start returned %v (%w)", startErr, err)
		case <-time.After(5 * time.Second):
			return m, time.Since(began), err
		}
	}
	return m, time.Since(began), nil
}

// 6. A restarted Manager with b unreachable: it serves a within ~40 s,
// reports b's servers unknown (never stopped) and starts none of them
// elsewhere, and finds them in b once b is back.
func TestAttackRestartWithClusterDown(t *testing.T) {
	tc := startSecondCluster(t)
	ctx := ctxTimeout(t, 6*time.Minute)
	m1, stop1 := runManager(t, tc.options())
	alice, bob, carol := naming.Server{Username: "alice"}, naming.Server{Username: "bob"}, naming.Server{Username: "carol"}
	sa := spawnReady(t, m1, alice, "")
	sb := spawnReady(t, m1, bob, "gpu")
	spawnReady(t, m1, carol, "gpu")
	stop1()
	beforeB := uids(t, tc.b.Client, tc.ns)

	api := newAPISwitch(t, tc.b)
	api.stop()
	// The hub keeps bob's state (its database) and seeds it; carol it
	// does not (a hub that only asks).
	opts := tc.options()
	opts.Seed = []Seed{{Server: bob, State: sb.State}}
	m, took, err := startWithin(t, opts, 40*time.Second)
	if err != nil {
		t.Errorf("restarted Manager with b's API server down: not serving a after %s: %v; want it running (b unavailable) within 40 s",
			took.Round(time.Millisecond), err)
		// The rest with b answering the version check only, and away
		// from then on.
		opts := tc.options()
		opts.Seed = []Seed{{Server: bob, State: sb.State}}
		opts.Clusters[1].Client = versionOnce(t, tc.b)
		if m, took, err = startWithin(t, opts, 45*time.Second); err != nil {
			t.Fatalf("restarted Manager, b away after the version check: %v after %s", err, took)
		}
		t.Logf("with b away after its version check: ready after %s", took.Round(time.Millisecond))
	} else {
		t.Logf("restarted Manager with b down: ready after %s", took.Round(time.Millisecond))
	}

	if h := m.Health(); h.Ready() != nil {
		t.Errorf("Ready with a up and b down: %v", h.Ready())
	}
	if h, _ := clusterHealthNamed(m, "b"); !h.Unavailable {
		t.Errorf("cluster b not unavailable: %+v", h)
	}
	if st, err := m.Status(alice); err != nil || st.Phase != PhaseRunning || st.Cluster != "a" || st.URL != sa.URL {
		t.Errorf("alice (a) with b down: %+v, %v; want running in a at %s", st, err, sa.URL)
	}
	// bob, seeded, runs in b: unknown, not stopped (a hub's poll would
	// end a stopped server).
	if st, err := m.Status(bob); err != nil || st.Phase != PhaseUnknown || st.ExitCode != nil {
		t.Errorf("bob (seeded, in b) with b down: %s (%s), exit code %v, %v; want unknown, no exit code", st.Phase, st.Reason, st.ExitCode, err)
	}
	_, started, err := m.Spawn(ctx, bob, SpawnOptions{Env: hubStart().Env})
	var cu *ClusterUnavailableError
	if started || !errors.As(err, &cu) || cu.Cluster != "b" {
		t.Errorf("Spawn of bob (last in b) with b down: started %v, %v; want a ClusterUnavailableError naming b", started, err)
	}
	// carol runs in b, which this Manager has never seen, and the hub
	// did not seed her: nothing tells the Manager she is there. Starts
	// of servers it does not know go on in a (refusing them all would
	// let b's outage stop every new start in a); a hub only starts a
	// server it believes stopped. Here one does: once b is back, carol
	// is a split brain, reported, both pods left alone.
	// Asked about, a server the Manager does not know may be in b: not
	// ErrNotFound (a hub would end a server it believes running), but
	// b unavailable, until b has been seen.
	for _, s := range []naming.Server{carol, {Username: "nobody"}} {
		_, err := m.Status(s)
		if cu := (*ClusterUnavailableError)(nil); !errors.As(err, &cu) || cu.Cluster != "b" || errors.Is(err, ErrNotFound) {
			t.Errorf("Status of %s (unknown) while b has not been seen: %v; want a ClusterUnavailableError naming b, not ErrNotFound", s.Username, err)
		}
		if _, err := m.Poll(ctx, s); !errors.Is(err, ErrClusterUnavailable) {
			t.Errorf("Poll of %s (unknown) while b has not been seen: %v; want ErrClusterUnavailable", s.Username, err)
		}
		if _, err := m.Stop(ctx, s, spawner.StopOptions{}); !errors.Is(err, ErrClusterUnavailable) {
			t.Errorf("Stop of %s (unknown) while b has not been seen: %v; want ErrClusterUnavailable", s.Username, err)
		}
	}
	dan := naming.Server{Username: "dan"}
	st, started, err := m.Spawn(ctx, dan, SpawnOptions{Env: hubStart().Env})
	if err != nil || !started || st.Cluster != "a" {
		t.Errorf("Spawn of dan (new, default profile) with b down: %s in %q, started %v, %v; want a start in a", st.Phase, st.Cluster, started, err)
	}
	st, started, err = m.Spawn(ctx, carol, SpawnOptions{Env: hubStart().Env})
	if err != nil || !started || st.Cluster != "a" {
		t.Fatalf("Spawn of carol (not seeded, her pod in unseen b): %s in %q, started %v, %v; want a start in a", st.Phase, st.Cluster, started, err)
	}
	testutil.Eventually(t, 60*time.Second, "carol running in a", testutil.True(func() bool {
		st, _ := m.Status(carol)
		return st.Phase == PhaseRunning && st.Cluster == "a"
	}))
	beforeA := uids(t, cluster.Client, tc.ns)

	api.start()
	testutil.Eventually(t, 60*time.Second, "carol a split brain once b is back", testutil.True(func() bool {
		st, _ := m.Status(carol)
		return st.Phase == PhaseUnknown && st.Reason == ReasonSplitBrain
	}))
	if st, _ := m.Status(carol); !strings.Contains(st.Message, `cluster "a"`) || !strings.Contains(st.Message, `cluster "b"`) {
		t.Errorf("carol's split brain: %q; want both clusters named", st.Message)
	}
	if _, _, err := m.Spawn(ctx, carol, SpawnOptions{Env: hubStart().Env}); !errors.Is(err, ErrSplitBrain) {
		t.Errorf("Spawn of carol, a split brain: %v; want ErrSplitBrain", err)
	}
	if _, err := m.Stop(ctx, carol, spawner.StopOptions{}); !errors.Is(err, ErrSplitBrain) {
		t.Errorf("Stop of carol, a split brain: %v; want ErrSplitBrain", err)
	}
	if _, err := m.Status(naming.Server{Username: "nobody"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Status of nobody once b has been seen: %v; want ErrNotFound", err)
	}
	settle(t, m)
	sameUIDs(t, "cluster a once b is back", beforeA, uids(t, cluster.Client, tc.ns))
	for _, want := range []Status{sb} {
		s := want.ServerOf()
		var got Status
		testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, want.User+" running in b", func() error {
			if got, _ = m.Status(s); got.Phase != PhaseRunning || got.Cluster != "b" {
				return fmt.Errorf("%s in %q", got.Phase, got.Cluster)
			}
			return nil
		})
		if got.Phase != PhaseRunning || got.Cluster != "b" || got.URL != want.URL {
			t.Errorf("%s once b is back: %s in %q at %s (%s: %.200s); want running in b at %s", want.User, got.Phase, got.Cluster, got.URL, got.Reason, got.Message, want.URL)
		}
	}
	sameUIDs(t, "cluster b after the restart", beforeB, uids(t, tc.b.Client, tc.ns))
	if pa, pb := serverPods(t, cluster.Client, tc.ns, "carol"), serverPods(t, tc.b.Client, tc.ns, "carol"); len(pa) != 1 || len(pb) != 1 {
		t.Errorf("carol: %d pod(s) in a, %d in b; want one in each, untouched", len(pa), len(pb))
	}
}

// 7. Start slots are per cluster: starts that wait in one cluster (here
// one whose pod never gets ready, holding b's only slot) never hold back
// another's, and a start queued in b says so.
func TestAttackSlotsPerCluster(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.optionsWith(t, kubespawner.Profile{DisplayName: "Slow in b", Slug: "slow-b", KubeSpawnerOverride: map[string]any{
		"kubernetes_cluster": "b",
		"extra_annotations":  map[string]any{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady},
	}})
	opts.ConcurrentSpawnLimit = 1
	m, _ := runManager(t, opts)
	ctx := ctxTimeout(t, 3*time.Minute)
	stuck := naming.Server{Username: "stuck"}
	if _, started, err := m.Spawn(ctx, stuck, spawnWith("slow-b")); err != nil || !started {
		t.Fatalf("Spawn stuck (slow-b): started %v, %v", started, err)
	}
	testutil.Eventually(t, 30*time.Second, "stuck's pod in b", testutil.True(func() bool { return len(serverPods(t, tc.b.Client, tc.ns, "stuck")) == 1 }))

	// a's slot is free: alice starts at once, not queued behind stuck.
	began := time.Now()
	if st := spawnReady(t, m, naming.Server{Username: "alice"}, "cpu"); st.Cluster != "a" {
		t.Errorf("alice in %q, want a", st.Cluster)
	}
	t.Logf("alice running in a %s after her Spawn, while b's only slot is held", time.Since(began).Round(time.Millisecond))
	for _, msg := range progressSoFar(t, m, naming.Server{Username: "alice"}) {
		if strings.Contains(msg, "Waiting for a start slot") {
			t.Errorf("alice's start in a waited for a slot while only b's was taken: %q", msg)
		}
	}

	// bob in b waits for b's slot, and his progress names b.
	bob := naming.Server{Username: "bob"}
	if _, started, err := m.Spawn(ctx, bob, spawnWith("gpu")); err != nil || !started {
		t.Fatalf("Spawn bob (gpu): started %v, %v", started, err)
	}
	testutil.Eventually(t, 30*time.Second, "bob queued for b's slot", testutil.True(func() bool {
		for _, msg := range progressSoFar(t, m, bob) {
			if strings.Contains(msg, `Waiting for a start slot in cluster "b"`) && strings.Contains(msg, "position 1") {
				return true
			}
		}
		return false
	}))
	if n := len(serverPods(t, tc.b.Client, tc.ns, "bob")); n != 0 {
		t.Errorf("bob has %d pods while b's only slot is held", n)
	}
	stopServer(t, m, stuck)
	testutil.Eventually(t, 60*time.Second, "bob running in b once the slot is free", testutil.True(func() bool {
		st, _ := m.Status(bob)
		return st.Phase == PhaseRunning && st.Cluster == "b"
	}))
}

// progressSoFar are the messages of s's current (or last) operation
// published so far.
func progressSoFar(t *testing.T, m *Manager, s naming.Server) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	ch, err := m.Events(ctx, s)
	if err != nil {
		t.Fatalf("Events of %s: %v", s.Username, err)
	}
	var out []string
	for ev := range ch {
		out = append(out, ev.Message)
	}
	return out
}

// 8. A cluster whose API server is older than spawnkit supports: Start
// refuses it, naming it, when it answers at Start; one that answers only
// later stays unavailable, Health saying why, and a start there names
// the version.
func TestAttackClusterTooOld(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.options()
	opts.Clusters[1].Client = versionServer(t, tc.b, 0, "v1.31.9")
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(ctxTimeout(t, 30*time.Second))
	if !errors.Is(err, spawner.ErrServerTooOld) || !strings.Contains(err.Error(), `cluster "b"`) || !strings.Contains(err.Error(), "v1.31.9") {
		t.Errorf("Start with cluster b at v1.31.9: %v; want ErrServerTooOld naming b and its version", err)
	}

	opts = tc.options()
	opts.Clusters[1].Client = versionServer(t, tc.b, 1, "v1.31.9")
	m, _ = runManager(t, opts)
	testutil.Eventually(t, 10*time.Second, "b refused as too old", testutil.True(func() bool {
		h, _ := clusterHealthNamed(m, "b")
		return h.Refused != nil
	}))
	time.Sleep(time.Second) // checked again and again: it stays refused
	h, _ := clusterHealthNamed(m, "b")
	if !h.Unavailable || !errors.Is(h.Refused, spawner.ErrServerTooOld) || !errors.Is(h.Err(), spawner.ErrServerTooOld) {
		t.Errorf("cluster b at v1.31.9, answering after Start: %+v; want unavailable, Refused and Err wrapping ErrServerTooOld", h)
	}
	_, started, err := m.Spawn(ctxTimeout(t, 30*time.Second), naming.Server{Username: "old"}, spawnWith("gpu"))
	if started || !errors.Is(err, ErrClusterUnavailable) || !strings.Contains(err.Error(), "v1.31.9") {
		t.Errorf("Spawn on b (too old): started %v, %v; want ErrClusterUnavailable naming the version", started, err)
	}
	if st := spawnReady(t, m, naming.Server{Username: "fine"}, "cpu"); st.Cluster != "a" {
		t.Errorf("a start on a beside a refused b: cluster %q", st.Cluster)
	}
}
