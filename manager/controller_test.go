package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// podChanged lets pass the pod versions of a start in flight and, once
// the start has ended, the version it found ready (settled); any other
// version, and a deletion, is reconciled.
func TestPodChangedSkipsTheReadyVersion(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[serverKey]())
	defer q.ShutDown()
	key := serverKey{user: "alice"}
	c := &cell{}
	e := &entry{key: key, cell: c, status: Status{Phase: PhaseStarting}}
	m := &Manager{cells: []*cell{c}, servers: map[serverKey]*entry{key: e}, queue: q}
	podOf := func(rv string) *reflector.Pod {
		return reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-alice", ResourceVersion: rv,
			Labels:      map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit},
			Annotations: map[string]string{naming.AnnotationUsername: "alice"}}})
	}
	queued := func() int {
		n := q.Len()
		for range n {
			k, _ := q.Get()
			q.Done(k)
			q.Forget(k)
		}
		return n
	}
	e.op = &operation{kind: opStart}
	for _, rv := range []string{"1", "2", "3"} {
		m.podChanged(m.cells[0], podOf(rv), false)
	}
	if n := queued(); n != 0 {
		t.Fatalf("during the start: %d queued, want none", n)
	}
	e.op, e.readyVersion, e.status.Phase = nil, "4", PhaseRunning
	m.podChanged(m.cells[0], podOf("4"), false)
	if n := queued(); n != 0 {
		t.Errorf("the ready version after the start: %d queued, want none", n)
	}
	m.podChanged(m.cells[0], podOf("4"), true)
	if n := queued(); n != 1 {
		t.Errorf("a deletion carrying the ready version: %d queued, want 1", n)
	}
	m.podChanged(m.cells[0], podOf("5"), false)
	if n := queued(); n != 1 {
		t.Errorf("a later version: %d queued, want 1", n)
	}
	e.status.Phase = PhaseFailed
	m.podChanged(m.cells[0], podOf("4"), false)
	if n := queued(); n != 1 {
		t.Errorf("the ready version of a server no longer running: %d queued, want 1", n)
	}
}

// A start is settled only while the informer's store still holds the
// very pod version it found ready: a later version, a replacement of the
// same name, or none at all, and the server is reconciled.
func TestSettledOnlyOnTheReadyVersion(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 90*time.Second)
	pods, err := sharedRegistry(t).Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	c := &cell{pods: &podSet{handles: []*reflector.Pods{pods}}}
	m := &Manager{cells: []*cell{c}}
	if e := (&entry{cell: c}); m.settledLocked(ctx, e, newSpawner(t, naming.Server{Username: "never-started"}, baseConfig(ns))) {
		t.Error("a Spawner that never started: settled")
	}
	sp := newSpawner(t, naming.Server{Username: "settled"}, baseConfig(ns))
	if _, err := sp.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	ready, ok := sp.ReadyPod()
	if !ok {
		t.Fatal("ReadyPod after a start: none")
	}
	cachedAt(t, ctx, pods, ns, ready.Name, ready.ResourceVersion)
	e := &entry{cell: c}
	if !m.settledLocked(ctx, e, sp) || e.readyVersion != ready.ResourceVersion {
		t.Errorf("the cache holds the ready version: settled %q, want it settled on %s", e.readyVersion, ready.ResourceVersion)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, ready.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["later"] = "yes"
	later, err := cluster.Client.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cachedAt(t, ctx, pods, ns, ready.Name, later.ResourceVersion)
	if e := (&entry{cell: c}); m.settledLocked(ctx, e, sp) {
		t.Error("a later version is cached: settled on the ready one")
	}
	// Another pod of the name (same labels, a new uid) is not the one
	// the start found ready.
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, ready.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the deletion cached", testutil.True(func() bool {
		_, ok, _ := pods.Get(ctx, ns, ready.Name)
		return !ok
	}))
	if e := (&entry{cell: c}); m.settledLocked(ctx, e, sp) {
		t.Error("the pod is gone: settled")
	}
	other := idlePod(t, ctx, pods, ns, ready.Name)
	if other.UID == ready.UID {
		t.Fatal("the replacement has the ready pod's uid")
	}
	if e := (&entry{cell: c}); m.settledLocked(ctx, e, sp) {
		t.Error("another pod of the name: settled")
	}
}

// runStart, for a start and a resume: a success on the version the
// cache still holds queues no reconcile; a success after which the pod
// changed (the change cached before the operation ended) is reconciled.
func TestRunStartReconcilesAChangeAfterReady(t *testing.T) {
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 120*time.Second)
	m, pods, q := unstarted(t, ctx, ns)
	m.leading = true
	for _, kind := range []opKind{opStart, opResume} {
		for _, changed := range []bool{false, true} {
			name := fmt.Sprintf("%s-%v", kind, changed)
			key := serverKey{user: name}
			sp, err := m.factory.New(naming.Server{Username: name})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			e := &entry{key: key, cell: m.cells[0], sp: sp, status: Status{Phase: PhaseStarting}}
			e.mu.Lock()
			op, opCtx := m.beginOpLocked(ctx, e, kind)
			e.mu.Unlock()
			if kind == opStart {
				m.metrics.spawnsInFlight.Inc()
			}
			m.runStart(opCtx, e, startJob{op: op, sp: sp, stream: spawner.NewStream(), do: func(ctx context.Context) (string, error) {
				url, err := sp.Start(ctx, hubStart())
				if err != nil || !changed {
					return url, err
				}
				ready, _ := sp.ReadyPod()
				p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, ready.Name, metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				p.Labels["after"] = "ready"
				later, err := cluster.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
				if err != nil {
					return "", err
				}
				cachedAt(t, ctx, pods, ns, ready.Name, later.ResourceVersion)
				return url, nil
			}})
			if e.status.Phase != PhaseRunning {
				t.Fatalf("%s (changed %v): phase %s (%s)", kind, changed, e.status.Phase, e.status.Message)
			}
			queued := false
			for q.Len() > 0 {
				k, _ := q.Get()
				queued = queued || k == key
				q.Done(k)
			}
			if queued != changed {
				t.Errorf("%s, pod changed after ready %v: reconcile queued %v, want %v", kind, changed, queued, changed)
			}
		}
	}
}

// idlePod creates pod name in ns on a node no kubelet serves (nothing but
// the test changes it) and waits until pods caches it.
func idlePod(t *testing.T, ctx context.Context, pods *reflector.Pods, ns, name string) *corev1.Pod {
	t.Helper()
	created, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"component": "singleuser-server"}},
		Spec: corev1.PodSpec{NodeName: "spawnkit-no-kubelet", Containers: []corev1.Container{{Name: "notebook", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cachedAt(t, ctx, pods, ns, name, created.ResourceVersion)
	return created
}

// cachedAt waits until pods caches version rv of pod ns/name.
func cachedAt(t *testing.T, ctx context.Context, pods *reflector.Pods, ns, name, rv string) {
	t.Helper()
	testutil.EventuallyEvery(t, 10*time.Millisecond, time.Minute, "version "+rv+" of "+ns+"/"+name+" in the cache", func() error {
		p, ok, err := pods.Get(ctx, ns, name)
		switch {
		case err != nil:
			return err
		case !ok:
			return errors.New("not cached")
		case p.ResourceVersion != rv:
			return fmt.Errorf("version %s cached", p.ResourceVersion)
		}
		return nil
	})
}

// TestStartReturnsNilOnShutdown: a Manager whose ctx ends returns nil
// from Start, whichever of its two wake-ups (ctx, or the end of its last
// term) Start's loop sees first. (CI once saw "manager: %!w(<nil>)": the
// term's end won the select and its nil was wrapped as an error.) The
// race is not forced: many short runs make each order likely.
func TestStartReturnsNilOnShutdown(t *testing.T) {
	ns := newNamespace(t)
	for i := range 200 {
		m, err := New(Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Start(ctx) }()
		if err := m.WaitReady(ctxTimeout(t, 30*time.Second)); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run %d: Start after its ctx ended = %v, want nil", i, err)
		}
	}
}
