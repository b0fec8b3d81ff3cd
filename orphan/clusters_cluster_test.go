package orphan

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// TestSeveralClusters runs against two API servers: the package's
// cluster as "a" and one started here as "b".
func TestSeveralClusters(t *testing.T) {
	a := testcluster.Require(t, cluster).Client
	second := testcluster.StartSecond(t, cluster, testcluster.Options{})
	b := second.Client
	t.Logf("second API server started in %s", second.Timings.Total.Round(time.Millisecond))

	t.Run("a moved server", func(t *testing.T) { testMovedServer(t, a, b) })
	t.Run("Cleanup refuses another cluster's orphans", func(t *testing.T) { testCleanupRefusesOtherCluster(t, a, b) })
	t.Run("the Lease lives in one cluster", func(t *testing.T) { testSweeperLeaseCluster(t, a, b) })
	t.Run("a cluster down", func(t *testing.T) { testSweeperClusterDown(t, a, b, second) })
}

// sameNamespace creates a namespace in a and one of the same name in b,
// as a hub that uses one namespace in every cluster has.
func sameNamespace(t *testing.T, a, b kubernetes.Interface) string {
	t.Helper()
	ns := newNamespace(t, nil, nil)
	if _, err := b.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func podIn(t *testing.T, client kubernetes.Interface, ns string, m metav1.ObjectMeta) *corev1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: m, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func exists(t *testing.T, client kubernetes.Interface, ns, pod string) bool {
	t.Helper()
	_, err := client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// bob's server moved from a to b: his pod and secret left in a are a's
// orphans (ReasonOtherCluster, naming b), his claim in a is not, and b
// has no orphan. carol's placement is unknown: her pods count in both.
func testMovedServer(t *testing.T, a, b kubernetes.Interface) {
	ctx := t.Context()
	ns := sameNamespace(t, a, b)
	known := NewKnown(2)
	known.AddIn("b", "bob", "", true)
	known.AddIn("", "carol", "", true)

	old := podIn(t, a, ns, meta("jupyter-bob", "bob", "", true))
	sm := meta("jupyter-bob", "bob", "", true)
	sm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: old.Name, UID: old.UID}}
	if _, err := a.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: sm}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: meta("claim-bob", "bob", "", true), Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if _, err := a.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podIn(t, a, ns, meta("jupyter-carol", "carol", "", true))
	podIn(t, b, ns, meta("jupyter-bob", "bob", "", true))
	podIn(t, b, ns, meta("jupyter-carol", "carol", "", true))

	inA, err := List(ctx, known, Options{Client: a, Cluster: "a", Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	var got []placed
	for _, o := range inA {
		got = append(got, placed{o.Kind, o.Name, o.Reason, o.ServerCluster})
		if o.Cluster != "a" {
			t.Errorf("%s listed in a has Cluster %q", o, o.Cluster)
		}
	}
	want := []placed{{KindPod, "jupyter-bob", ReasonOtherCluster, "b"}, {KindSecret, "jupyter-bob", ReasonOtherCluster, "b"}}
	if !slices.Equal(got, want) {
		t.Errorf("orphans of a: %v, want %v", got, want)
	}
	inB, err := List(ctx, known, Options{Client: b, Cluster: "b", Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	if len(inB) != 0 {
		t.Errorf("orphans of b: %v, want none", inB)
	}

	report, err := Cleanup(ctx, inA, CleanupOptions{Client: a, Cluster: "a", MinAge: NoMinAge, Kinds: AllKinds})
	if err != nil || len(report.Deleted) != 2 || len(report.Failed) != 0 {
		t.Fatalf("cleaning a: %+v, %v", report, err)
	}
	if exists(t, a, ns, "jupyter-bob") || !exists(t, b, ns, "jupyter-bob") || !exists(t, a, ns, "jupyter-carol") {
		t.Error("want bob's old pod in a gone, his pod in b and carol's in a kept")
	}
	if _, err := a.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "claim-bob", metav1.GetOptions{}); err != nil {
		t.Errorf("bob's claim in a: %v", err)
	}
}

// An orphan listed in a is never deleted through another cluster's
// client, nor through Cleanup for one unnamed cluster.
func testCleanupRefusesOtherCluster(t *testing.T, a, b kubernetes.Interface) {
	ctx := t.Context()
	ns := sameNamespace(t, a, b)
	known := NewKnown(1)
	known.AddIn("b", "zoe", "", true)
	podIn(t, a, ns, meta("jupyter-zoe", "zoe", "", true))
	podIn(t, b, ns, meta("jupyter-zoe", "zoe", "", true))
	orphans, err := List(ctx, known, Options{Client: a, Cluster: "a", Namespaces: []string{ns}})
	if err != nil || len(orphans) != 1 {
		t.Fatalf("List: %v, %v; want zoe's old pod", orphans, err)
	}
	for name, opts := range map[string]CleanupOptions{
		"b's client":      {Client: b, Cluster: "b", MinAge: NoMinAge},
		"unnamed cluster": {Client: a, MinAge: NoMinAge},
	} {
		report, err := Cleanup(ctx, orphans, opts)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("%s: Cleanup: %v, want ErrInvalidOptions naming cluster a", name, err)
		}
		if len(report.Deleted)+len(report.Skipped)+len(report.Failed) != 0 {
			t.Errorf("%s: report %+v, want empty", name, report)
		}
	}
	if !exists(t, a, ns, "jupyter-zoe") || !exists(t, b, ns, "jupyter-zoe") {
		t.Fatal("a refused Cleanup deleted a pod")
	}
	if report, err := Cleanup(ctx, orphans, CleanupOptions{Client: a, Cluster: "a", MinAge: NoMinAge}); err != nil || len(report.Deleted) != 1 {
		t.Errorf("Cleanup in a: %+v, %v", report, err)
	}
}

// With Clusters, the Lease is taken in the first cluster; with Client
// too, in Client's.
func testSweeperLeaseCluster(t *testing.T, a, b kubernetes.Interface) {
	ns := sameNamespace(t, a, b)
	known := func(context.Context) (*Known, error) {
		k := NewKnown(1)
		k.Add("alice", "", true)
		return k, nil
	}
	for _, tc := range []struct {
		name     string
		client   kubernetes.Interface
		clusters []SweeperCluster
		holder   kubernetes.Interface // where the Lease must be
		other    kubernetes.Interface // where it must not
	}{
		{"first cluster", nil, []SweeperCluster{{Name: "b", Client: b}, {Name: "a", Client: a}}, b, a},
		{"explicit Client", a, []SweeperCluster{{Name: "b", Client: b}}, a, b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := "sweeper-" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-"))
			s, err := NewSweeper(SweeperOptions{
				Client: tc.client, Clusters: tc.clusters, Known: known, Interval: time.Hour,
				List: Options{Namespaces: []string{ns}}, Cleanup: CleanupOptions{MinAge: NoMinAge},
				LeaderElection: &LeaderElection{Namespace: ns, Name: lease, Identity: "replica",
					LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 250 * time.Millisecond},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Start(ctx) }()
			testutil.Eventually(t, 20*time.Second, "a sweep", testutil.True(func() bool {
				select {
				case err := <-done:
					t.Fatalf("Start returned before sweeping: %v", err)
				default:
				}
				return s.Sweeps() > 0
			}))
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := tc.holder.CoordinationV1().Leases(ns).Get(t.Context(), lease, metav1.GetOptions{}); err != nil {
				t.Errorf("the Lease in the cluster that should hold it: %v", err)
			}
			if _, err := tc.other.CoordinationV1().Leases(ns).Get(t.Context(), lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the Lease in the other cluster: %v, want NotFound", err)
			}
		})
	}
}

// b's API server is down: a sweep still cleans a, and fails with a
// *ClusterError naming b; once b is back, the next sweep cleans b.
func testSweeperClusterDown(t *testing.T, a, b kubernetes.Interface, second *testcluster.Cluster) {
	ctx := t.Context()
	ns := sameNamespace(t, a, b)
	podIn(t, a, ns, meta("jupyter-stray", "stray", "", true))
	podIn(t, b, ns, meta("jupyter-stray", "stray", "", true))
	reg := prometheus.NewRegistry()
	s, err := NewSweeper(SweeperOptions{
		Clusters: []SweeperCluster{{Name: "a", Client: a}, {Name: "b", Client: b}},
		Known: func(context.Context) (*Known, error) {
			k := NewKnown(1)
			k.Add("alice", "", true)
			return k, nil
		},
		List: Options{Namespaces: []string{ns}}, Cleanup: CleanupOptions{MinAge: NoMinAge},
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := second.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := second.StartAPIServer(); err != nil {
				t.Error(err)
			}
		}
	})
	start := time.Now()
	report, err := s.SweepOnce(ctx)
	t.Logf("sweep with b down: %s, %v", time.Since(start).Round(time.Millisecond), err)
	var ce *ClusterError
	if !errors.As(err, &ce) || ce.Cluster != "b" || !strings.Contains(err.Error(), `cluster "b"`) || strings.Contains(err.Error(), `cluster "a"`) {
		t.Errorf("SweepOnce: %v, want b's error alone, naming it", err)
	}
	if len(report.Deleted) != 1 || report.Deleted[0].Cluster != "a" || report.Deleted[0].Name != "jupyter-stray" {
		t.Errorf("deleted %v, want a's stray pod", report.Deleted)
	}
	if exists(t, a, ns, "jupyter-stray") {
		t.Error("a's stray pod survived b's outage")
	}
	if n := s.Sweeps(); n != 1 {
		t.Errorf("%d sweeps counted, want 1", n)
	}

	if err := second.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	testutil.Eventually(t, 30*time.Second, "b's API server", testutil.True(func() bool {
		_, err := b.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err == nil
	}))
	report, err = s.SweepOnce(ctx)
	if err != nil || len(report.Deleted) != 1 || report.Deleted[0].Cluster != "b" {
		t.Errorf("sweep with b back: deleted %v, %v; want b's stray pod", report.Deleted, err)
	}
	if exists(t, b, ns, "jupyter-stray") {
		t.Error("b's stray pod survived the sweep after b came back")
	}

	got := counters(t, reg)
	for _, w := range []struct {
		metric string
		labels string
		value  float64
	}{
		{"spawnkit_orphans_found_total", "cluster=a,kind=Pod,reason=server-unknown", 1},
		{"spawnkit_orphans_found_total", "cluster=b,kind=Pod,reason=server-unknown", 1},
		{"spawnkit_orphans_cleanup_total", "cluster=a,kind=Pod,outcome=deleted", 1},
		{"spawnkit_orphans_cleanup_total", "cluster=b,kind=Pod,outcome=deleted", 1},
		{"spawnkit_orphans_sweep_failures_total", "cluster=b", 1},
		{"spawnkit_orphans_sweep_failures_total", "cluster=a", 0},
	} {
		if v := got[w.metric+"{"+w.labels+"}"]; v != w.value {
			t.Errorf("%s{%s} = %v, want %v", w.metric, w.labels, v, w.value)
		}
	}
}

// counters gathers reg's counters as "name{label=value,...}" (labels in
// name order) to their values.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] += m.GetCounter().GetValue()
		}
	}
	return out
}

// Without Clusters, List.Cluster names the one cluster swept: its orphans
// carry the name, are cleaned (Cleanup is told the same cluster) and are
// counted under it.
func TestSweeperOneNamedCluster(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t, nil, nil)
	createPod(t, ns, meta("jupyter-stray", "stray", "", true))
	reg := prometheus.NewRegistry()
	s, err := NewSweeper(SweeperOptions{
		Client: cluster.Client,
		Known: func(context.Context) (*Known, error) {
			k := NewKnown(1)
			k.AddIn("home", "alice", "", true)
			return k, nil
		},
		List: Options{Namespaces: []string{ns}, Cluster: "home"}, Cleanup: CleanupOptions{MinAge: NoMinAge},
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	report, err := s.SweepOnce(t.Context())
	if err != nil || len(report.Deleted) != 1 || report.Deleted[0].Cluster != "home" {
		t.Fatalf("SweepOnce: deleted %v, %v; want the stray pod, in cluster home", report.Deleted, err)
	}
	if v := counters(t, reg)["spawnkit_orphans_cleanup_total{cluster=home,kind=Pod,outcome=deleted}"]; v != 1 {
		t.Errorf("deleted in cluster home: %v, want 1", v)
	}
}
