package manager

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// twoClusters is the package's cluster ("a") and a second simulated
// cluster ("b"), with a namespace of the same name in both.
type twoClusters struct {
	b          *testcluster.Cluster
	ra, rb     *reflector.Registry
	ns         string
	base, cfgB kubespawner.Config
}

func startSecondCluster(t *testing.T) *twoClusters {
	t.Helper()
	ctx := ctxTimeout(t, 3*time.Minute)
	b := testcluster.StartSecond(t, cluster, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	var err error
	tc := &twoClusters{b: b, ra: sharedRegistry(t), ns: newNamespace(t)}
	if _, err := b.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if tc.rb, err = reflector.New(reflector.Options{Config: b.Config}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.rb.Close)
	tc.base = baseConfig(tc.ns)
	tc.base.StoragePVCEnsure = true
	tc.base.StorageCapacity = resource.MustParse("1Gi")
	sc := testcluster.StorageClass
	tc.base.StorageClass = &sc
	tc.base.ProfileList = []kubespawner.Profile{
		{DisplayName: "Default", Slug: "default", Default: true},
		{DisplayName: "CPU", Slug: "cpu", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "a"}},
		{DisplayName: "GPU", Slug: "gpu", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "b"}},
		{DisplayName: "Anywhere", Slug: "any", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": []any{"b", "a"}}},
	}
	// Cluster b's URLs go through a host the hub can resolve, not the
	// pod IP (which the hub cannot route to).
	if tc.cfgB, err = tc.base.Override(map[string]any{"pod_connect_ip": "jupyter-{username}.b.example.test"}); err != nil {
		t.Fatal(err)
	}
	return tc
}

func (tc *twoClusters) options() Options {
	return Options{Config: tc.base, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra},
		{Name: "b", Client: tc.b.Client, Registry: tc.rb, Config: &tc.cfgB},
	}}
}

// uids are the UIDs of every pod and claim in ns of a cluster.
func uids(t *testing.T, client kubernetes.Interface, ns string) map[string]types.UID {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	out := map[string]types.UID{}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		out["pod/"+p.Name] = p.UID
	}
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		out["pvc/"+p.Name] = p.UID
	}
	return out
}

func sameUIDs(t *testing.T, what string, before, after map[string]types.UID) {
	t.Helper()
	for k, u := range before {
		if after[k] != u {
			t.Errorf("%s: %s was %s, now %q", what, k, u, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s is new", what, k)
		}
	}
}

func spawnReady(t *testing.T, m *Manager, s naming.Server, profile string) Status {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	opts := SpawnOptions{Env: hubStart().Env}
	if profile != "" {
		opts.UserOptions = map[string]string{"profile": profile}
	}
	if _, _, err := m.Spawn(ctx, s, opts); err != nil {
		t.Fatalf("Spawn %s (%s): %v", s.Username, profile, err)
	}
	var st Status
	testutil.Eventually(t, 60*time.Second, s.Username+" running", testutil.True(func() bool {
		st, _ = m.Status(s)
		return st.Phase == PhaseRunning
	}))
	return st
}

func inCIDR(t *testing.T, rawURL, cidr string) bool {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return false
	}
	return netip.MustParsePrefix(cidr).Contains(addr)
}

// TestSeveralClusters runs one Manager over two simulated clusters:
// placement by profile, the cluster on the objects, in State and Status,
// per-cluster URLs, one server in one cluster (a move keeps the old
// claim until DeleteForever), recovery by a new Manager, and a split
// brain reported and left alone.
func TestSeveralClusters(t *testing.T) {
	tc := startSecondCluster(t)
	m, stop := runManager(t, tc.options())
	alice, bob := naming.Server{Username: "alice"}, naming.Server{Username: "bob"}

	// Placement: the default profile stays in the default cluster, gpu
	// goes to b; each URL by its cluster's rule.
	sa := spawnReady(t, m, alice, "")
	sb := spawnReady(t, m, bob, "gpu")
	if sa.Cluster != "a" || sb.Cluster != "b" {
		t.Fatalf("clusters: alice %q, bob %q; want a, b", sa.Cluster, sb.Cluster)
	}
	if !inCIDR(t, sa.URL, cluster.PodCIDR) {
		t.Errorf("alice's URL %s is not a pod IP of cluster a (%s)", sa.URL, cluster.PodCIDR)
	}
	if !strings.Contains(sb.URL, "jupyter-bob.b.example.test") {
		t.Errorf("bob's URL %s does not follow cluster b's pod_connect_ip", sb.URL)
	}
	ctx := ctxTimeout(t, 5*time.Minute)
	podB, err := tc.b.Client.CoreV1().Pods(tc.ns).Get(ctx, sb.State.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("bob's pod in cluster b: %v", err)
	}
	if podB.Labels[naming.LabelCluster] != "b" {
		t.Errorf("bob's pod label %s = %q, want b", naming.LabelCluster, podB.Labels[naming.LabelCluster])
	}
	if rec, ok := spawner.StateFromPod(reflector.NewPod(podB)); !ok || rec.Cluster != "b" || sb.State.Cluster != "b" {
		t.Errorf("bob's recorded State cluster = %q (status %q), want b", rec.Cluster, sb.State.Cluster)
	}
	if _, err := cluster.Client.CoreV1().Pods(tc.ns).Get(ctx, sb.State.PodName, metav1.GetOptions{}); err == nil {
		t.Error("bob has a pod in cluster a too")
	}

	// One server, one cluster: a Spawn of running bob with another
	// profile changes nothing.
	st, started, err := m.Spawn(ctx, bob, SpawnOptions{UserOptions: map[string]string{"profile": "cpu"}})
	if err != nil || started || st.Cluster != "b" {
		t.Errorf("Spawn of running bob with profile cpu: started %v, cluster %q, err %v; want nothing started, b", started, st.Cluster, err)
	}
	// A profile naming an unknown cluster is refused before anything.
	if _, _, err := m.Spawn(ctx, naming.Server{Username: "nobody"}, SpawnOptions{UserOptions: map[string]string{"profile": "nope"}}); err == nil {
		t.Error("an unknown profile started")
	}

	// A start whose profile names no cluster stays where the server
	// last ran (its claim is there).
	if _, err := m.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := spawnReady(t, m, bob, ""); st.Cluster != "b" {
		t.Errorf("bob restarted with the default profile: cluster %q, want b (where it ran)", st.Cluster)
	}

	// A move: bob stopped in b, started with profile cpu (cluster a).
	// Its claim in b stays (the files are there); DeleteForever deletes
	// the claims of both clusters.
	if _, err := m.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	claimB := sb.State.PVCName
	sm := spawnReady(t, m, bob, "cpu")
	if sm.Cluster != "a" || !inCIDR(t, sm.URL, cluster.PodCIDR) {
		t.Errorf("bob moved: cluster %q URL %s; want a, a pod IP of a", sm.Cluster, sm.URL)
	}
	if _, err := tc.b.Client.CoreV1().PersistentVolumeClaims(tc.ns).Get(ctx, claimB, metav1.GetOptions{}); err != nil {
		t.Errorf("bob's claim in b after the move: %v", err)
	}

	// Recovery: a new Manager finds every server in its cluster with the
	// same URL. bob is back in b first, to have one in each.
	if _, err := m.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	sb = spawnReady(t, m, bob, "gpu")
	stop()
	m2, stop2 := runManager(t, tc.options())
	for _, want := range []Status{sa, sb} {
		got, err := m2.Status(want.ServerOf())
		if err != nil || got.Phase != PhaseRunning || got.Cluster != want.Cluster || got.URL != want.URL {
			t.Errorf("recovered %s: %+v, %v; want running in %q at %s", want.User, got, err, want.Cluster, want.URL)
		}
	}

	// DeleteForever of bob: its claims in both clusters go.
	if _, err := m2.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m2.DeleteForever(ctx, bob); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]kubernetes.Interface{"a": cluster.Client, "b": tc.b.Client} {
		testutil.Eventually(t, 30*time.Second, "bob's claim gone in "+name, testutil.True(func() bool {
			_, err := c.CoreV1().PersistentVolumeClaims(tc.ns).Get(ctx, claimB, metav1.GetOptions{})
			return err != nil
		}))
	}

	// Two hub requests for one server at once, placed in different
	// clusters: one start, in one cluster.
	racer := naming.Server{Username: "racer"}
	var wg sync.WaitGroup
	startedN := 0
	var startedMu sync.Mutex
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			profile := []string{"cpu", "gpu"}[i%2]
			_, started, err := m2.Spawn(ctx, racer, SpawnOptions{UserOptions: map[string]string{"profile": profile}})
			if err != nil {
				t.Errorf("racing Spawn (%s): %v", profile, err)
			}
			if started {
				startedMu.Lock()
				startedN++
				startedMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if startedN != 1 {
		t.Errorf("8 racing Spawns started %d times, want 1", startedN)
	}
	st = spawnReady(t, m2, racer, "")
	npods := 0
	for _, c := range []kubernetes.Interface{cluster.Client, tc.b.Client} {
		if _, err := c.CoreV1().Pods(tc.ns).Get(ctx, st.State.PodName, metav1.GetOptions{}); err == nil {
			npods++
		}
	}
	if npods != 1 {
		t.Errorf("racer has pods in %d clusters, want 1", npods)
	}

	// A split brain: carol's server made in both clusters behind the
	// Manager's back (a restored database, another hub). The Manager
	// reports both and touches neither; once one is gone it follows the
	// other.
	stop2()
	carol := naming.Server{Username: "carol"}
	for _, c := range []struct {
		name   string
		client kubernetes.Interface
		reg    *reflector.Registry
		cfg    kubespawner.Config
	}{{"a", cluster.Client, tc.ra, tc.base}, {"b", tc.b.Client, tc.rb, tc.cfgB}} {
		sp, err := spawner.New(carol, spawner.Options{Client: c.client, Registry: c.reg, Config: c.cfg, Cluster: c.name})
		if err != nil {
			t.Fatal(err)
		}
		opts := hubStart()
		if c.name == "b" {
			opts.UserOptions = map[string]string{"profile": "gpu"}
		}
		if _, err := sp.Start(ctx, opts); err != nil {
			t.Fatalf("carol in %s: %v", c.name, err)
		}
		sp.Close()
	}
	beforeA, beforeB := uids(t, cluster.Client, tc.ns), uids(t, tc.b.Client, tc.ns)
	m3, _ := runManager(t, tc.options())
	st, err = m3.Status(carol)
	if err != nil || st.Phase != PhaseUnknown || st.Reason != ReasonSplitBrain || !strings.Contains(st.Message, `cluster "a"`) || !strings.Contains(st.Message, `cluster "b"`) {
		t.Fatalf("carol in two clusters: %+v, %v; want unknown, SplitBrain, naming both", st, err)
	}
	if _, _, err := m3.Spawn(ctx, carol, SpawnOptions{}); !errors.Is(err, ErrSplitBrain) || !errors.Is(err, ErrBusy) {
		t.Errorf("Spawn of a split brain: %v; want ErrSplitBrain", err)
	}
	if _, err := m3.Stop(ctx, carol, spawner.StopOptions{}); !errors.Is(err, ErrSplitBrain) {
		t.Errorf("Stop of a split brain: %v; want ErrSplitBrain", err)
	}
	if err := m3.DeleteForever(ctx, carol); !errors.Is(err, ErrSplitBrain) {
		t.Errorf("DeleteForever of a split brain: %v; want ErrSplitBrain", err)
	}
	sameUIDs(t, "cluster a after the split brain", beforeA, uids(t, cluster.Client, tc.ns))
	sameUIDs(t, "cluster b after the split brain", beforeB, uids(t, tc.b.Client, tc.ns))
	// The operator deletes the copy in a: carol is then b's.
	if err := cluster.Client.CoreV1().Pods(tc.ns).Delete(ctx, st.State.PodName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "carol running in b", testutil.True(func() bool {
		st, _ = m3.Status(carol)
		return st.Phase == PhaseRunning && st.Cluster == "b"
	}))
	if _, err := m3.Stop(ctx, carol, spawner.StopOptions{}); err != nil {
		t.Errorf("Stop of carol once one copy is left: %v", err)
	}
}

// TestClusterOutage stops cluster b's API server for 60 s while the
// Manager serves both: a's servers start, stop and report normally;
// b's running server is unknown, never failed, and running again after;
// a start placed on b fails fast naming it; nothing in either cluster is
// touched.
func TestClusterOutage(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.options()
	m, _ := runManager(t, opts)
	ctx := ctxTimeout(t, 5*time.Minute)
	alice, bob := naming.Server{Username: "alice"}, naming.Server{Username: "bob"}
	spawnReady(t, m, alice, "")
	sb := spawnReady(t, m, bob, "gpu")

	// Spawn latency on a before the outage.
	latency := func(n int, prefix string) time.Duration {
		var total time.Duration
		for i := range n {
			s := naming.Server{Username: prefix + string(rune('a'+i))}
			began := time.Now()
			spawnReady(t, m, s, "")
			total += time.Since(began)
			if _, err := m.Stop(ctx, s, spawner.StopOptions{}); err != nil {
				t.Fatalf("Stop %s: %v", s.Username, err)
			}
		}
		return total / time.Duration(n)
	}
	before := latency(3, "pre")
	beforeA, beforeB := uids(t, cluster.Client, tc.ns), uids(t, tc.b.Client, tc.ns)

	watch := m.Watch(ctx)
	var seen []Status
	var seenMu sync.Mutex
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for st := range watch {
			if st.User == "bob" {
				seenMu.Lock()
				seen = append(seen, st)
				seenMu.Unlock()
			}
		}
	}()

	down := time.Now()
	if err := tc.b.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	exited := time.Now() // StopAPIServer returns once the process has ended (it drains first)
	var unknownAt time.Time
	testutil.Eventually(t, 30*time.Second, "bob unknown", testutil.True(func() bool {
		st, _ := m.Status(bob)
		if st.Phase == PhaseUnknown && st.Reason == ReasonClusterUnavailable {
			unknownAt = time.Now()
			return true
		}
		return false
	}))
	t.Logf("bob unknown %s after b's API server was told to stop, %s after it had exited", unknownAt.Sub(down).Round(time.Millisecond), unknownAt.Sub(exited).Round(time.Millisecond))
	h := m.Health()
	if err := h.Ready(); err != nil {
		t.Errorf("Ready with a up and b down: %v; want ready", err)
	}
	if err := h.Degraded(); err == nil || !strings.Contains(err.Error(), `cluster "b"`) {
		t.Errorf("Degraded: %v; want it to name cluster b", err)
	}

	// A start placed on b fails fast, naming it; "any" (b, then a) goes
	// to a.
	began := time.Now()
	_, _, err := m.Spawn(ctx, naming.Server{Username: "dave"}, SpawnOptions{UserOptions: map[string]string{"profile": "gpu"}})
	var cu *ClusterUnavailableError
	if !errors.As(err, &cu) || cu.Cluster != "b" || !errors.Is(err, ErrClusterUnavailable) {
		t.Errorf("Spawn on b while down: %v; want a ClusterUnavailableError naming b", err)
	}
	t.Logf("Spawn on b while down failed in %s", time.Since(began).Round(time.Millisecond))
	if st := spawnReady(t, m, naming.Server{Username: "erin"}, "any"); st.Cluster != "a" {
		t.Errorf("profile any (b, a) with b down: cluster %q, want a", st.Cluster)
	}
	if _, err := m.Stop(ctx, bob, spawner.StopOptions{}); !errors.Is(err, ErrClusterUnavailable) {
		t.Errorf("Stop of bob while b is down: %v; want ErrClusterUnavailable", err)
	}

	// a works throughout: starts and stops while b is down, for the rest
	// of the 60 s.
	var during []time.Duration
	for time.Since(down) < 60*time.Second {
		during = append(during, latency(1, "during"+string(rune('a'+len(during)))+"-"))
		if st, _ := m.Status(bob); st.Phase != PhaseUnknown {
			t.Fatalf("bob during the outage: %s (%s)", st.Phase, st.Reason)
		}
	}
	var sum time.Duration
	for _, d := range during {
		sum += d
	}
	t.Logf("spawn to running on a: %s before, %s during the outage (%d spawns)", before.Round(time.Millisecond), (sum / time.Duration(len(during))).Round(time.Millisecond), len(during))

	if err := tc.b.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testutil.EventuallyEvery(t, 100*time.Millisecond, 60*time.Second, "bob running at his URL after b's API server is back", func() error {
		if last, _ := m.Status(bob); last.Phase != PhaseRunning || last.URL != sb.URL {
			return fmt.Errorf("%+v; health %+v", last, m.Health().Clusters)
		}
		return nil
	})
	t.Logf("bob unknown for %s; running again %s after b's API server served again", time.Since(unknownAt).Round(time.Second), time.Since(back).Round(time.Millisecond))
	// Back means back: while b's informers catch up after the restart
	// (a relist, a watch refused until its cache is warm), b is not
	// marked unavailable again for a blip shorter than ClusterDownAfter.
	// Watched for five seconds, as often as a blip could show: no signal
	// says that a blip will not come.
	for settle := time.Now(); time.Since(settle) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		if h := m.Health().Clusters[1]; h.Unavailable {
			t.Fatalf("cluster b unavailable again %s after it came back (since %s)", time.Since(settle).Round(time.Millisecond), h.Since)
		}
	}
	// Nothing in b was touched; in a only the servers started and
	// stopped meanwhile changed (erin's pod and the claims of the
	// servers started), never alice's.
	sameUIDs(t, "cluster b after the outage", beforeB, uids(t, tc.b.Client, tc.ns))
	afterA := uids(t, cluster.Client, tc.ns)
	for k, u := range beforeA {
		if afterA[k] != u {
			t.Errorf("cluster a after the outage: %s was %s, now %q", k, u, afterA[k])
		}
	}
	seenMu.Lock()
	for _, st := range seen {
		if st.Phase == PhaseFailed || st.Phase == PhaseStopped {
			t.Errorf("Watch reported bob %s (%s) during the outage", st.Phase, st.Reason)
		}
	}
	sawUnknown := false
	for _, st := range seen {
		sawUnknown = sawUnknown || st.Phase == PhaseUnknown
	}
	seenMu.Unlock()
	if !sawUnknown {
		t.Error("Watch never reported bob unknown")
	}
}

// A Go hub's Placement picks among the profile's clusters, sees every
// cluster's health and the server's previous cluster, and a name it gives that is
// no cluster is an error naming the clusters there are; New refuses
// clusters it cannot tell apart.
func TestPlacementFunc(t *testing.T) {
	tc := startSecondCluster(t)
	opts := tc.options()
	var mu sync.Mutex
	var reqs []PlacementRequest
	opts.Placement = func(ctx context.Context, req PlacementRequest) ([]string, error) {
		mu.Lock()
		reqs = append(reqs, req)
		mu.Unlock()
		switch req.Server.Username {
		case "lost":
			return []string{"nowhere"}, nil
		case "outside":
			return []string{"a"}, nil
		}
		// Least loaded: the cluster with the fewest servers.
		best := req.Clusters[0]
		for _, c := range req.Clusters[1:] {
			if c.Servers < best.Servers {
				best = c
			}
		}
		return []string{best.Name}, nil
	}
	m, _ := runManager(t, opts)
	s1 := spawnReady(t, m, naming.Server{Username: "p1"}, "")
	s2 := spawnReady(t, m, naming.Server{Username: "p2"}, "")
	if s1.Cluster != "a" || s2.Cluster != "b" {
		t.Errorf("least loaded: p1 in %q, p2 in %q; want a, then b", s1.Cluster, s2.Cluster)
	}
	mu.Lock()
	if len(reqs) != 2 || len(reqs[0].Profile) != 0 || len(reqs[0].Clusters) != 2 || reqs[0].Previous != "" || reqs[1].Clusters[0].Servers != 1 {
		t.Errorf("PlacementRequests: %+v; want no profile clusters, two clusters (a with p1 at the second), no previous", reqs)
	}
	mu.Unlock()
	ctx := ctxTimeout(t, 60*time.Second)
	_, _, err := m.Spawn(ctx, naming.Server{Username: "outside"}, SpawnOptions{UserOptions: map[string]string{"profile": "gpu"}})
	if err == nil || !strings.Contains(err.Error(), `cluster "a"`) || !strings.Contains(err.Error(), "allows only b") {
		t.Errorf("Placement outside the profile's clusters: %v; want an error naming both", err)
	}
	if _, err := m.Stop(ctx, naming.Server{Username: "p2"}, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	spawnReady(t, m, naming.Server{Username: "p2"}, "")
	mu.Lock()
	if last := reqs[len(reqs)-1]; last.Previous != "b" {
		t.Errorf("restart of p2: Previous %q, want b", last.Previous)
	}
	mu.Unlock()
	_, _, err = m.Spawn(ctx, naming.Server{Username: "lost"}, SpawnOptions{})
	if !errors.Is(err, ErrNoSuchCluster) || !strings.Contains(err.Error(), `"nowhere"`) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("Placement naming no cluster: %v; want ErrNoSuchCluster naming it and the clusters", err)
	}
	if _, err := m.Status(naming.Server{Username: "lost"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused server is known: %v", err)
	}

	for _, bad := range []struct {
		name string
		opts Options
		want string
	}{
		{"duplicate", Options{Config: tc.base, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}, {Name: "a", Client: tc.b.Client, Registry: tc.rb}}}, "two clusters"},
		{"unnamed", Options{Config: tc.base, Clusters: []Cluster{{Client: cluster.Client, Registry: tc.ra}}}, "Clusters[0].Name"},
		{"not a label", Options{Config: tc.base, Clusters: []Cluster{{Name: "GPU_EU", Client: cluster.Client, Registry: tc.ra}}}, "GPU_EU"},
		{"both", Options{Config: tc.base, Client: cluster.Client, Clusters: []Cluster{{Name: "a", Client: cluster.Client, Registry: tc.ra}}}, "either"},
	} {
		if _, err := New(bad.opts); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: New = %v; want an error containing %q", bad.name, err, bad.want)
		}
	}
}

// With one cluster (no Options.Clusters) a profile that names a cluster
// is refused, naming it, rather than ignored: by New for a listed
// profile, by Spawn for one of a ProfileListFunc.
func TestOneClusterRefusesNamedCluster(t *testing.T) {
	cfg := baseConfig(newNamespace(t))
	profiles := []kubespawner.Profile{{DisplayName: "Here", Slug: "here", Default: true}, {DisplayName: "GPU", Slug: "gpu", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "gpu-eu"}}}
	cfg.ProfileList = profiles
	if _, err := New(Options{Config: cfg, Client: cluster.Client, Registry: sharedRegistry(t)}); !errors.Is(err, ErrNoSuchCluster) || !strings.Contains(err.Error(), `profile "gpu"`) || !strings.Contains(err.Error(), "gpu-eu") {
		t.Errorf("New, one cluster, a listed profile naming gpu-eu: %v; want ErrNoSuchCluster naming the profile and gpu-eu", err)
	}
	cfg.ProfileList = nil
	cfg.ProfileListFunc = func(context.Context) ([]kubespawner.Profile, error) { return profiles, nil }
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 60*time.Second)
	_, _, err := m.Spawn(ctx, naming.Server{Username: "onecluster"}, SpawnOptions{UserOptions: map[string]string{"profile": "gpu"}})
	if !errors.Is(err, ErrNoSuchCluster) || !strings.Contains(err.Error(), "gpu-eu") {
		t.Errorf("one cluster, profile naming gpu-eu: %v; want ErrNoSuchCluster naming it", err)
	}
	if st := spawnReady(t, m, naming.Server{Username: "onecluster"}, "here"); st.Cluster != "" || st.State.Cluster != "" {
		t.Errorf("one cluster: Status.Cluster %q, State.Cluster %q; want none", st.Cluster, st.State.Cluster)
	}
}
