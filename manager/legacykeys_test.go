package manager

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/orphan"
	"github.com/spawnkit/spawnkit/spawner"
)

// relabelLegacy rewrites an object's cluster label as releases before the
// single label domain wrote it: naming.LegacyLabelCluster instead of
// naming.LabelCluster.
func relabelLegacy(t *testing.T, client kubernetes.Interface, ns, kind, name string) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	var cluster string
	switch kind {
	case "pod":
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cluster = p.Labels[naming.LabelCluster]
	case "claim":
		c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cluster = c.Labels[naming.LabelCluster]
	}
	if cluster == "" {
		t.Fatalf("%s %s/%s has no %s to rewrite", kind, ns, name, naming.LabelCluster)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{
		naming.LabelCluster: nil, naming.LegacyLabelCluster: cluster,
	}}})
	var err error
	switch kind {
	case "pod":
		_, err = client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "claim":
		_, err = client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Pods and claims written before the single label domain (their cluster
// under naming.LegacyLabelCluster) are still read: a new Manager recovers
// each server in its cluster at the same URL, a Spawn of a running one
// starts nothing, orphan.List with the running servers calls none of their
// objects an orphan, and a server stopped and started again goes back to
// the cluster where its legacy-labelled claim is, under the new key.
func TestLegacyClusterLabelStillRead(t *testing.T) {
	tc := startSecondCluster(t)
	m1, stop1 := runManager(t, tc.options())
	alice, bob := naming.Server{Username: "legacy-alice"}, naming.Server{Username: "legacy-bob"}
	sa := spawnReady(t, m1, alice, "")
	sb := spawnReady(t, m1, bob, "gpu")
	if sa.Cluster != "a" || sb.Cluster != "b" || sa.State.PVCName == "" || sb.State.PVCName == "" {
		t.Fatalf("before: alice %q (claim %q), bob %q (claim %q); want a and b, each with a claim", sa.Cluster, sa.State.PVCName, sb.Cluster, sb.State.PVCName)
	}
	stop1()
	clients := map[string]kubernetes.Interface{"a": cluster.Client, "b": tc.b.Client}
	for _, st := range []Status{sa, sb} {
		relabelLegacy(t, clients[st.Cluster], tc.ns, "pod", st.State.PodName)
		relabelLegacy(t, clients[st.Cluster], tc.ns, "claim", st.State.PVCName)
	}

	m2, _ := runManager(t, tc.options())
	ctx := ctxTimeout(t, 3*time.Minute)
	known := orphan.NewKnown(2)
	for _, want := range []Status{sa, sb} {
		s := want.ServerOf()
		got, err := m2.Status(s)
		if err != nil || got.Phase != PhaseRunning || got.Cluster != want.Cluster || got.URL != want.URL {
			t.Fatalf("recovered %s: %+v, %v; want running in %q at %s", want.User, got, err, want.Cluster, want.URL)
		}
		if _, started, err := m2.Spawn(ctx, s, SpawnOptions{Env: hubStart().Env}); err != nil || started {
			t.Fatalf("Spawn of running %s: started %v, %v; want nothing started", want.User, started, err)
		}
		known.AddIn(want.Cluster, s.Username, s.Servername, true)
	}
	for name, c := range clients {
		orphans, err := orphan.List(ctx, known, orphan.Options{Client: c, Namespaces: []string{tc.ns}, Cluster: name})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range orphans {
			// Other tests share the cluster and leave their own.
			if o.Server.User != alice.Username && o.Server.User != bob.Username {
				continue
			}
			t.Errorf("cluster %s: orphan.List calls a running server's legacy-labelled object an orphan: %v", name, o)
		}
	}

	// bob, stopped and started with no profile, goes back to b, where
	// its legacy-labelled claim is, and the new pod has the new key.
	if _, err := m2.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	again := spawnReady(t, m2, bob, "")
	if again.Cluster != "b" || again.State.PVCName != sb.State.PVCName {
		t.Fatalf("bob restarted: cluster %q claim %q; want b, %q", again.Cluster, again.State.PVCName, sb.State.PVCName)
	}
	pod, err := tc.b.Client.CoreV1().Pods(tc.ns).Get(ctx, again.State.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, old := pod.Labels[naming.LegacyLabelCluster]; old || pod.Labels[naming.LabelCluster] != "b" {
		t.Errorf("bob's new pod labels %v: want %s=b and no %s", pod.Labels, naming.LabelCluster, naming.LegacyLabelCluster)
	}
}
