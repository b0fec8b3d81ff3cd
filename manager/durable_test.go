package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// TestSpawnReturnsOnceThePodExists: an accepted start is in the cluster
// when Spawn returns, so a process that dies right after the answer
// loses nothing (the next Manager recovers the pod).
func TestSpawnReturnsOnceThePodExists(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	for _, user := range []string{"durable-a", "durable-b", "durable-c"} {
		s := naming.Server{Username: user}
		st, started, err := m.Spawn(t.Context(), s, SpawnOptions{Env: hubStart().Env})
		if err != nil || !started {
			t.Fatalf("Spawn %s = %v, %v", user, started, err)
		}
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), st.State.PodName, metav1.GetOptions{}); err != nil {
			t.Errorf("right after Spawn of %s returned, pod %s: %v", user, st.State.PodName, err)
		}
	}
}

// TestShutdownLetsAcceptedStartsCreateTheirPods: a Manager shut down
// while an accepted start has not created its pod yet (here held in
// ModifyPod) lets it create the pod before detaching it; the next
// Manager finds the server and follows it to running. Nothing is lost,
// nothing deleted.
func TestShutdownLetsAcceptedStartsCreateTheirPods(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	hooks := spawner.Hooks{ModifyPod: func(ctx context.Context, _ *spawner.Spawner, _ *corev1.Pod) error {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return nil
	}}
	m, stop := runManager(t, Options{Config: baseConfig(ns), Hooks: hooks})
	s := naming.Server{Username: "unborn"}
	spawned := make(chan error, 1)
	go func() {
		_, _, err := m.Spawn(t.Context(), s, SpawnOptions{Env: hubStart().Env})
		spawned <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the start never reached ModifyPod")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	// The shutdown waits for the start: it has not returned while the
	// start is held.
	testutil.Eventually(t, 10*time.Second, "the Manager to stop leading", testutil.True(func() bool { return !m.Leading() }))
	select {
	case <-stopped:
		t.Fatal("the Manager stopped before its accepted start had created its pod")
	default:
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the Manager did not stop once the start had created its pod")
	}
	if err := <-spawned; err != nil {
		t.Errorf("Spawn = %v", err)
	}
	pods := advPods(t, t.Context(), ns)
	if len(pods) != 1 || pods[0].DeletionTimestamp != nil {
		t.Fatalf("after the shutdown, pods %v; want the start's one pod, not deleted", pods)
	}

	next, _ := runManager(t, Options{Config: baseConfig(ns)})
	st := waitStatus(t, next, s, "running", phaseIs(PhaseRunning))
	if st.State.PodName != pods[0].Name {
		t.Errorf("the next Manager runs pod %s, want %s", st.State.PodName, pods[0].Name)
	}
	if got := advPods(t, t.Context(), ns); len(got) != 1 || got[0].UID != pods[0].UID {
		t.Errorf("pods after the next Manager took over: %v; want the same one", got)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(t.Context(), pods[0].Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("the pod is gone")
	}
}
