package orphan_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/orphan"
)

// now is the examples' wall clock: the objects' ages are relative to it.
var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// object is the metadata spawnkit writes on a server's objects: its
// managed-by label and the annotations naming the server (none when user
// is ""), created age ago.
func object(namespace, name, user, server string, age time.Duration) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Namespace: namespace, Name: name, UID: types.UID("uid-" + name),
		Labels:            map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit},
		CreationTimestamp: metav1.NewTime(now.Add(-age)),
	}
	if user != "" {
		m.Annotations = naming.Annotations(naming.Server{Username: user, Servername: server}, nil)
	}
	return m
}

// hubCluster is a fake clientset holding what a hub's namespace might:
// servers the hub knows and some it has forgotten.
func hubCluster() *fake.Clientset {
	const day = 24 * time.Hour
	objects := []runtime.Object{
		// alice's server runs, as the hub believes.
		&corev1.Pod{ObjectMeta: object("jhub", "jupyter-alice", "alice", "", day)},
		&corev1.PersistentVolumeClaim{ObjectMeta: object("jhub", "claim-alice", "alice", "", 30*day)},
		// bob's server is stopped in the hub's database, but its pod runs.
		&corev1.Pod{ObjectMeta: object("jhub", "jupyter-bob", "bob", "", day)},
		// carol's "gpu" server is unknown to the hub, and so is its secret.
		&corev1.Pod{ObjectMeta: object("jhub", "jupyter-carol--gpu", "carol", "gpu", day)},
		&corev1.Secret{ObjectMeta: object("jhub", "jupyter-carol--gpu", "carol", "gpu", day)},
		// dave is not a user any more; his claim holds his data.
		&corev1.PersistentVolumeClaim{ObjectMeta: object("jhub", "claim-dave", "dave", "", 90*day)},
		// erin's server is unknown and was created a minute ago.
		&corev1.Pod{ObjectMeta: object("jhub", "jupyter-erin", "erin", "", time.Minute)},
		// spawnkit's label without the annotations: reported, never deleted
		// unless asked for.
		&corev1.Pod{ObjectMeta: object("jhub", "jupyter-unknown", "", "", day)},
		// Without spawnkit's label an object is never looked at.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "hub"}},
	}
	return fake.NewClientset(objects...)
}

// hubKnown is the servers in the hub's database.
func hubKnown() *orphan.Known {
	known := orphan.NewKnown(3)
	known.Add("alice", "", true)
	known.Add("bob", "", false)
	known.Add("carol", "", true)
	return known
}

// List compares the servers a hub knows with spawnkit's objects in the
// cluster. Without Options.Registry it lists them with the client, here a
// fake clientset.
func ExampleList() {
	ctx := context.Background()
	client := hubCluster()

	orphans, err := orphan.List(ctx, hubKnown(), orphan.Options{Client: client, Namespaces: []string{"jhub"}})
	if err != nil {
		panic(err)
	}
	for _, o := range orphans {
		fmt.Println(o)
	}
	// Output:
	// PersistentVolumeClaim jhub/claim-dave (dave, user-unknown)
	// Pod jhub/jupyter-bob (bob, server-not-running)
	// Pod jhub/jupyter-carol--gpu (carol/gpu, server-unknown)
	// Pod jhub/jupyter-erin (erin, server-unknown)
	// Pod jhub/jupyter-unknown (, unattributed)
	// Secret jhub/jupyter-carol--gpu (carol/gpu, server-unknown)
}

// Cleanup with DryRun says what it would delete and why it would leave the
// rest alone, and deletes nothing. Claims are deleted only when asked for
// by kind, unattributed objects only with IncludeUnattributed, and nothing
// younger than DefaultMinAge.
func ExampleCleanup() {
	ctx := context.Background()
	client := hubCluster()
	orphans, err := orphan.List(ctx, hubKnown(), orphan.Options{Client: client, Namespaces: []string{"jhub"}})
	if err != nil {
		panic(err)
	}

	report, err := orphan.Cleanup(ctx, orphans, orphan.CleanupOptions{
		Client: client,
		DryRun: true,
		Clock:  clocktesting.NewFakePassiveClock(now),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted:", len(report.Deleted))
	for _, s := range report.Skipped {
		fmt.Printf("skipped %s: %s\n", s.Orphan, s.Reason)
	}
	pods, err := client.CoreV1().Pods("jhub").List(ctx, metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("pods left:", len(pods.Items))
	// Output:
	// deleted: 0
	// skipped PersistentVolumeClaim jhub/claim-dave (dave, user-unknown): kind PersistentVolumeClaim not included
	// skipped Pod jhub/jupyter-bob (bob, server-not-running): dry run
	// skipped Pod jhub/jupyter-carol--gpu (carol/gpu, server-unknown): dry run
	// skipped Pod jhub/jupyter-erin (erin, server-unknown): younger than 10m0s
	// skipped Pod jhub/jupyter-unknown (, unattributed): unattributed (no user/server annotations)
	// skipped Secret jhub/jupyter-carol--gpu (carol/gpu, server-unknown): dry run
	// pods left: 6
}

// A Known set is built from the hub's database: every server it knows
// (the default server is ""), and whether it should be running. Adding a
// server again updates whether it should run.
func ExampleKnown() {
	type row struct {
		user, server string
		running      bool
	}
	database := []row{
		{"alice", "", true},
		{"alice", "gpu", false},
		{"bob", "", false},
	}
	known := orphan.NewKnown(len(database))
	for _, r := range database {
		known.Add(r.user, r.server, r.running)
	}
	fmt.Println("servers known:", known.Len())

	list := func() {
		orphans, err := orphan.List(context.Background(), known, orphan.Options{
			Client: hubCluster(), Namespaces: []string{"jhub"}, Kinds: []orphan.Kind{orphan.KindPod},
		})
		if err != nil {
			panic(err)
		}
		for _, o := range orphans {
			if o.Server.User == "bob" {
				fmt.Println(o)
				return
			}
		}
		fmt.Println("bob's pod is not an orphan")
	}
	list()
	known.Add("bob", "", true) // bob's server was started meanwhile
	list()
	fmt.Println("servers known:", known.Len())
	// Output:
	// servers known: 3
	// Pod jhub/jupyter-bob (bob, server-not-running)
	// bob's pod is not an orphan
	// servers known: 3
}

// A hub whose servers live in several clusters records where each lives
// (AddIn) and lists each cluster with its own client, naming it
// (Options.Cluster). bob's server was moved from cluster "a" to "b": the
// pod it left in a is a's orphan, not b's, and his claim in a is kept (it
// holds his data). Cleanup deletes an orphan only through the client of
// the cluster it was listed in.
func Example_severalClusters() {
	ctx := context.Background()
	const day = 24 * time.Hour
	clients := map[string]*fake.Clientset{
		"a": fake.NewClientset(
			&corev1.Pod{ObjectMeta: object("jhub", "jupyter-bob", "bob", "", day)},
			&corev1.PersistentVolumeClaim{ObjectMeta: object("jhub", "claim-bob", "bob", "", 30*day)},
		),
		"b": fake.NewClientset(
			&corev1.Pod{ObjectMeta: object("jhub", "jupyter-bob", "bob", "", time.Hour)},
		),
	}
	known := orphan.NewKnown(1)
	known.AddIn("b", "bob", "", true)

	listed := map[string][]orphan.Orphan{}
	for _, name := range []string{"a", "b"} {
		orphans, err := orphan.List(ctx, known, orphan.Options{Client: clients[name], Cluster: name, Namespaces: []string{"jhub"}})
		if err != nil {
			panic(err)
		}
		listed[name] = orphans
		fmt.Printf("cluster %s: %d orphans\n", name, len(orphans))
		for _, o := range orphans {
			fmt.Println(o)
		}
	}

	// a's orphans through b's client: refused, nothing deleted.
	_, err := orphan.Cleanup(ctx, listed["a"], orphan.CleanupOptions{Client: clients["b"], Cluster: "b", MinAge: orphan.NoMinAge})
	fmt.Println("through b refused:", errors.Is(err, orphan.ErrInvalidOptions))
	report, err := orphan.Cleanup(ctx, listed["a"], orphan.CleanupOptions{Client: clients["a"], Cluster: "a", MinAge: orphan.NoMinAge})
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted through a:", report.Deleted)
	// Output:
	// cluster a: 1 orphans
	// Pod jhub/jupyter-bob in cluster a (bob, other-cluster: lives in b)
	// cluster b: 0 orphans
	// through b refused: true
	// deleted through a: [Pod jhub/jupyter-bob in cluster a (bob, other-cluster: lives in b)]
}
