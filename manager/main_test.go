package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 2}, &cluster)
}

var (
	registryOnce sync.Once
	registry     *reflector.Registry
)

// sharedRegistry is the package's Registry, as a hub's one per process.
func sharedRegistry(t testing.TB) *reflector.Registry {
	t.Helper()
	c := testcluster.Require(t, cluster)
	registryOnce.Do(func() {
		var err error
		if registry, err = reflector.New(reflector.Options{Config: c.Config}); err != nil {
			t.Fatal(err)
		}
		testcluster.AtExit(registry.Close)
	})
	return registry
}

func newNamespace(t testing.TB) string {
	t.Helper()
	c := testcluster.Require(t, cluster)
	ns, err := c.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manager-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func baseConfig(ns string) kubespawner.Config {
	return kubespawner.Config{
		Namespace: ns,
		Pod:       manifest.PodSpec{Image: "quay.io/jupyter/base-notebook:2024-01-01"},
		Cmd:       []string{"jupyterhub-singleuser"},
	}
}

// newSpawner is a Spawner of the package's cluster and Registry.
func newSpawner(t testing.TB, server naming.Server, cfg kubespawner.Config) *spawner.Spawner {
	t.Helper()
	s, err := spawner.New(server, spawner.Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// hubStart is what a hub passes to every start: its token.
func hubStart() spawner.StartOptions {
	return spawner.StartOptions{Env: []corev1.EnvVar{{Name: "JUPYTERHUB_API_TOKEN", Value: "secret"}}}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// advPods lists the pods of ns from the API server.
func advPods(t *testing.T, ctx context.Context, ns string) []corev1.Pod {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// collidingUsers finds two different user names whose pod and claim names
// are the same under the safe scheme (KubeSpawner 7.1's, which keeps 32
// bits of a hash): a birthday search over names that are always hashed.
func collidingUsers(t testing.TB) (string, string) {
	t.Helper()
	namer, err := naming.New(naming.Options{Scheme: naming.SchemeSafe, HubNamespace: "x"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	begin := time.Now()
	for i := range 2_000_000 {
		user := fmt.Sprintf("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa--%d", i)
		names, err := namer.Names(naming.Server{Username: user})
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[names.Pod]; ok {
			t.Logf("birthday search: %q and %q both map to pod %q (%d names, %s)", other, user, names.Pod, i+1, time.Since(begin).Round(time.Millisecond))
			return other, user
		}
		seen[names.Pod] = user
	}
	t.Fatal("no collision in 2,000,000 names")
	return "", ""
}

// unstarted is a Manager of ns that has not been started, with the pod
// informer and the workqueue Start would give it, for tests that drive
// its parts by hand.
func unstarted(t *testing.T, ctx context.Context, ns string) (*Manager, *reflector.Pods, workqueue.TypedRateLimitingInterface[serverKey]) {
	t.Helper()
	m, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := sharedRegistry(t).Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pods.Release)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[serverKey]())
	t.Cleanup(q.ShutDown)
	m.cells[0].pods, m.queue = &podSet{handles: []*reflector.Pods{pods}}, q
	return m, pods, q
}

// settle has m look at every server again (a resync pass, as its own
// loop makes) and waits until that look is through: nothing queued, no
// worker inside a reconcile, no operation in flight, and no reconcile
// begun between two checks. What m does on its own about the cluster's
// present state it has done when settle returns: the positive signal a
// test waits for before it checks that something did not happen.
func settle(t *testing.T, m *Manager) {
	t.Helper()
	m.resync(t.Context())
	last := int64(-1)
	testutil.Eventually(t, 60*time.Second, "the Manager to settle", func() error {
		m.mu.Lock()
		q, ops := m.queue, len(m.ops)
		m.mu.Unlock()
		n := m.reconciles.Load()
		began := n != last
		last = n
		switch {
		case q != nil && q.Len() > 0:
			return fmt.Errorf("%d servers queued", q.Len())
		case m.busy.Load() > 0:
			return errors.New("a worker inside a reconcile")
		case ops > 0:
			return fmt.Errorf("%d operations in flight", ops)
		case began:
			return errors.New("a reconcile began since the last check")
		}
		return nil
	})
}
