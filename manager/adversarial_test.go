package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/spawner"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// advWatch records every status change of one server from now on.
type advWatch struct {
	mu     sync.Mutex
	phases []Phase
	all    []Status
}

func watchServer(ctx context.Context, m *Manager, s naming.Server) *advWatch {
	w := &advWatch{}
	ch := m.Watch(ctx)
	go func() {
		for st := range ch {
			if st.User == s.Username && st.Server == s.Servername {
				w.mu.Lock()
				w.phases = append(w.phases, st.Phase)
				w.all = append(w.all, st)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *advWatch) snapshot() ([]Phase, []Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Phase(nil), w.phases...), append([]Status(nil), w.all...)
}

func TestAdvPollDuringStartNeverDeletesTheNewPod(t *testing.T) {
	ns := newNamespace(t)
	srv := naming.Server{Username: "adv-poll"}
	ctx := ctxTimeout(t, 90*time.Second)
	for round := range 3 {
		// An exited pod of an earlier start.
		exited := baseConfig(ns)
		exited.DeleteStoppedPods = ptr.To(false)
		exited.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorExit, testcluster.ExitCodeAnnotation: "3"}
		old := newSpawner(t, srv, exited)
		if _, err := old.Start(ctx, hubStart()); err != nil {
			// It may exit before it is seen ready; either way a pod exists.
			t.Logf("round %d: the exiting start: %v", round, err)
		}
		if _, err := cluster.WaitForPod(ctx, ns, old.State().PodName, func(p *corev1.Pod) (bool, error) {
			return p != nil && p.Status.Phase == corev1.PodFailed, nil
		}); err != nil {
			// The exiting start may have failed and deleted its pod: make one by hand.
			t.Logf("round %d: no exited pod (%v); skipping the round", round, err)
			continue
		}
		poller := newSpawner(t, srv, baseConfig(ns))
		fresh := newSpawner(t, srv, baseConfig(ns))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var polls atomic.Int64
		for range 3 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = poller.Poll(ctx)
					polls.Add(1)
					time.Sleep(time.Millisecond) // paces the pollers: not a wait
				}
			})
		}
		url, err := fresh.Start(ctx, hubStart())
		// Keep polling a while after the start.
		after := polls.Load()
		testutil.Eventually(t, 30*time.Second, "thirty Polls after the start", testutil.True(func() bool { return polls.Load() >= after+30 }))
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: Start replacing an exited pod while Polls run = %v", round, err)
		}
		pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, fresh.State().PodName, metav1.GetOptions{})
		if err != nil || pod.DeletionTimestamp != nil || pod.Annotations[naming.AnnotationStartID] != fresh.State().StartID {
			t.Fatalf("round %d: the new pod (URL %s) was deleted by a racing Poll: %v", round, url, err)
		}
		if st, err := poller.Poll(ctx); err != nil || !st.Running {
			t.Errorf("round %d: Poll after the start = %+v, %v", round, st, err)
		}
		if err := fresh.Stop(ctx, spawner.StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdvManagerStopWhileTheStartSucceeds(t *testing.T) {
	ns := newNamespace(t)
	entered, stopBegun, hookDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	// A slow hook: the start has succeeded, and the hook returns only
	// once the Stop has begun.
	hooks := spawner.Hooks{PodURL: func(_ *spawner.Spawner, _ *reflector.Pod, def string) string {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			select {
			case <-stopBegun:
			case <-time.After(30 * time.Second):
				t.Error("the Stop did not begin while the start was in its PodURL hook")
			}
			close(hookDone)
		}
		return def
	}}
	m, _ := runManager(t, Options{Config: baseConfig(ns), Hooks: hooks})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "adv-stop-ready"}
	go func() {
		defer close(stopBegun)
		_ = wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
			st, _ := m.Status(s)
			return st.Phase == PhaseStopping || st.Phase == PhaseStopped, nil
		})
	}()
	w := watchServer(ctx, m, s)
	if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the start never reached the PodURL hook")
	}
	st, err := m.Stop(ctx, s, spawner.StopOptions{Now: true})
	if err != nil || st.Phase != PhaseStopped {
		t.Fatalf("Stop = %+v, %v", st, err)
	}
	// Whatever the start does once its hook returns, it has done when
	// the Manager has settled.
	<-hookDone
	settle(t, m)
	// settle proves the Manager has nothing left to do, but Watch relays
	// statuses in goroutines of its own: one published just before
	// settle returned may still be on its way to w, and nothing marks the
	// end of that relay, so give it time.
	time.Sleep(200 * time.Millisecond)
	phases, _ := w.snapshot()
	for i, p := range phases {
		if p == PhaseStopping {
			for _, q := range phases[i+1:] {
				if q == PhaseRunning || q == PhaseStarting {
					t.Errorf("phases %v: %s after stopping", phases, q)
				}
			}
			break
		}
	}
	if st, _ := m.Status(s); st.Phase != PhaseStopped {
		t.Errorf("final phase %s, want stopped", st.Phase)
	}
	if pods := advPods(t, ctx, ns); len(pods) != 0 {
		t.Errorf("%d pods after Stop", len(pods))
	}
}

func TestAdvManagerConcurrentSpawnOnePod(t *testing.T) {
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns)})
	ctx := ctxTimeout(t, 60*time.Second)
	s := naming.Server{Username: "adv-many", Servername: "one"}
	spawnAll := func() int32 {
		var started atomic.Int32
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 24 {
			wg.Go(func() {
				<-gate
				st, ok, err := m.Spawn(ctx, s, SpawnOptions{UserOptions: map[string]string{}})
				if err != nil {
					t.Errorf("Spawn: %v", err)
					return
				}
				if st.Phase != PhaseStarting && st.Phase != PhaseRunning {
					t.Errorf("Spawn returned phase %s", st.Phase)
				}
				if ok {
					started.Add(1)
				}
			})
		}
		close(gate)
		wg.Wait()
		return started.Load()
	}
	if n := spawnAll(); n != 1 {
		t.Fatalf("%d of 24 concurrent Spawns started the server; want exactly 1", n)
	}
	waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
	pods := advPods(t, ctx, ns)
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	if n := spawnAll(); n != 0 {
		t.Errorf("%d Spawns of a running server started it again", n)
	}
	after := advPods(t, ctx, ns)
	if len(after) != 1 || after[0].UID != pods[0].UID {
		t.Errorf("Spawns of a running server replaced its pod")
	}
	if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

func TestAdvManagerStopRacesSpawn(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 120*time.Second)
	s := naming.Server{Username: "adv-flip"}
	var claimUID types.UID
	for i := range 12 {
		if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
			t.Fatalf("round %d: Spawn = %v", i, err)
		}
		// Round i stops the start after its i-th progress event (or once
		// its progress ended): across its steps, round by round.
		ectx, ecancel := context.WithCancel(ctx)
		evs, err := m.Events(ectx, s)
		if err != nil {
			t.Fatalf("round %d: Events = %v", i, err)
		}
		for range i {
			if _, ok := <-evs; !ok {
				break
			}
		}
		ecancel()
		st, err := m.Stop(ctx, s, spawner.StopOptions{Now: true})
		if err != nil || st.Phase != PhaseStopped {
			t.Fatalf("round %d: Stop = %+v, %v", i, st, err)
		}
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, st.State.PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("round %d: a pod is left after Stop (%v)", i, err)
		}
		if st, _ := m.Status(s); st.Phase != PhaseStopped {
			t.Errorf("round %d: phase %s after Stop returned", i, st.Phase)
		}
		if c, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, st.State.PVCName, metav1.GetOptions{}); err == nil {
			if claimUID != "" && c.UID != claimUID {
				t.Errorf("round %d: the claim was replaced", i)
			}
			claimUID = c.UID
		}
	}
}

func TestAdvManagerDeleteForeverRacesSpawn(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 150*time.Second)
	for i := range 4 {
		s := naming.Server{Username: fmt.Sprintf("adv-del-%d", i)}
		if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
		if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		var delErr, spawnErr error
		var started bool
		var wg sync.WaitGroup
		wg.Go(func() { delErr = m.DeleteForever(ctx, s) })
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond) // staggers the race round by round
			_, started, spawnErr = m.Spawn(ctx, s, SpawnOptions{})
		})
		wg.Wait()
		t.Logf("round %d: DeleteForever = %v; Spawn = started %v, %v", i, delErr, started, spawnErr)
		if delErr != nil && !errors.Is(delErr, ErrBusy) {
			t.Errorf("round %d: DeleteForever = %v", i, delErr)
		}
		if spawnErr != nil && !errors.Is(spawnErr, ErrBusy) {
			t.Errorf("round %d: Spawn = %v", i, spawnErr)
		}
		if !started {
			continue
		}
		st := waitStatus(t, m, s, "running or failed", func(st Status) bool {
			return st.Phase == PhaseRunning || st.Phase == PhaseFailed || st.Phase == PhaseStopped
		})
		if st.Phase != PhaseRunning {
			t.Errorf("round %d: Spawn said it started the server, which then became %s (%s: %s)", i, st.Phase, st.Reason, st.Message)
			continue
		}
		claim, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, st.State.PVCName, metav1.GetOptions{})
		if err != nil || claim.DeletionTimestamp != nil {
			t.Errorf("round %d: the server runs on a claim that is gone or being deleted (%v)", i, err)
		}
		if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdvManagerShutdownMidStartAndMidStop(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := kubespawner.Load([]byte(fmt.Sprintf(`
namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
storage_pvc_ensure: true
storage_capacity: 1Gi
profile_list:
- display_name: Default
  slug: default
  default: true
- display_name: Slow
  slug: slow
  kubespawner_override:
    extra_annotations: {%q: %s}
`, ns, testcluster.BehaviorAnnotation, testcluster.BehaviorNeverReady)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 120*time.Second)
	m1, stop1 := runManager(t, Options{Config: cfg})
	starting := naming.Server{Username: "adv-sd-start"}
	stopping := naming.Server{Username: "adv-sd-stop"}
	if _, _, err := m1.Spawn(ctx, stopping, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m1, stopping, "running", phaseIs(PhaseRunning))
	if _, _, err := m1.Spawn(ctx, starting, SpawnOptions{UserOptions: map[string]string{"profile": "slow"}}); err != nil {
		t.Fatal(err)
	}
	startingPod := waitPod(t, ctx, m1, starting)
	rec, ok := spawner.StateFromPod(reflector.NewPod(startingPod))
	if !ok || rec.PVCName == "" {
		t.Fatalf("the starting pod records %+v, %v", rec, ok)
	}
	claimBefore, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, rec.PVCName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopDone := make(chan error, 1)
	go func() { _, err := m1.Stop(ctx, stopping, spawner.StopOptions{}); stopDone <- err }()
	// The shutdown comes once the Stop has begun.
	testutil.Eventually(t, 30*time.Second, "the Stop of "+stopping.Username+" to begin", testutil.True(func() bool {
		st, _ := m1.Status(stopping)
		return st.Phase == PhaseStopping || st.Phase == PhaseStopped
	}))
	stop1()
	stopErr := <-stopDone
	t.Logf("Stop racing the shutdown: %v", stopErr)

	p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, startingPod.Name, metav1.GetOptions{})
	if err != nil || p.UID != startingPod.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the shutdown deleted or replaced the starting server's pod: %v", err)
	}
	if c, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claimBefore.Name, metav1.GetOptions{}); err != nil || c.UID != claimBefore.UID || c.DeletionTimestamp != nil {
		t.Fatalf("the shutdown touched the starting server's claim: %v", err)
	}
	stoppingState, _ := m1.Status(stopping)
	_, getErr := cluster.Client.CoreV1().Pods(ns).Get(ctx, stoppingState.State.PodName, metav1.GetOptions{})
	if stopErr == nil && !apierrors.IsNotFound(getErr) {
		t.Errorf("Stop returned nil across the shutdown but the pod is there (%v)", getErr)
	}

	fresh, err := reflector.New(reflector.Options{Config: cluster.Config})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close) // after the Manager's own cleanup
	m2, _ := runManager(t, Options{Config: cfg, Registry: fresh})
	if st, err := m2.Status(starting); err != nil || st.Phase != PhaseStarting {
		t.Fatalf("recovered starting server = %+v, %v; want starting", st, err)
	}
	st, err := m2.Status(stopping)
	switch {
	case stopErr == nil && err == nil && (st.Phase == PhaseRunning || st.Phase == PhaseStarting):
		t.Errorf("the stopped server came back as %s", st.Phase)
	case stopErr == nil && err != nil && !errors.Is(err, ErrNotFound):
		t.Errorf("Status of the stopped server: %v", err)
	}
	setPodStatus(t, ctx, ns, startingPod.Name, markReady)
	running := waitStatus(t, m2, starting, "running after recovery", phaseIs(PhaseRunning))
	if running.URL == "" {
		t.Error("no URL after recovery")
	}
	if c, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claimBefore.Name, metav1.GetOptions{}); err != nil || c.UID != claimBefore.UID {
		t.Errorf("the recovered server's claim changed: %v", err)
	}
	if _, err := m2.Stop(ctx, starting, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

func TestAdvManagerSpawnDuringShutdown(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady}
	for round := range 3 {
		m, stop := runManager(t, Options{Config: cfg})
		ctx := ctxTimeout(t, 60*time.Second)
		var wg sync.WaitGroup
		var spawned atomic.Int32
		quit := make(chan struct{})
		for g := range 4 {
			wg.Go(func() {
				for i := range 15 {
					select {
					case <-quit:
						return
					default:
					}
					s := naming.Server{Username: fmt.Sprintf("adv-sd-%d-%d-%d", round, g, i)}
					if _, _, err := m.Spawn(ctx, s, SpawnOptions{}); err != nil {
						return // ErrNotRunning once the shutdown is through
					}
					spawned.Add(1)
				}
			})
		}
		// The shutdown comes a little later each round, among the Spawns.
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("round %d: Spawns under way", round), testutil.True(func() bool {
			return spawned.Load() >= int32(4+round*8)
		}))
		stop()
		close(quit)
		wg.Wait()
		before := m.List()
		// Start has returned: nothing of the Manager runs that could say
		// it is done, so only a window shows that nothing changes.
		time.Sleep(500 * time.Millisecond)
		after := m.List()
		if len(before) != len(after) {
			t.Fatalf("round %d: %d servers after Start returned, then %d", round, len(before), len(after))
		}
		for i := range before {
			if before[i].Phase != after[i].Phase {
				t.Errorf("round %d: %s changed from %s to %s after the Manager's Start returned", round, before[i].User, before[i].Phase, after[i].Phase)
			}
			if after[i].Phase == PhaseFailed {
				t.Errorf("round %d: %s failed because of the shutdown: %s %s", round, after[i].User, after[i].Reason, after[i].Message)
			}
		}
		// Clean the pods up for the next round.
		if err := cluster.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdvManagerCollidingUsers(t *testing.T) {
	a, b := collidingUsers(t)
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 90*time.Second)
	sa, sb := naming.Server{Username: a}, naming.Server{Username: b}
	ssl := &spawner.SSL{Key: []byte("K"), Cert: []byte("C")}
	if _, _, err := m.Spawn(ctx, sa, SpawnOptions{SSL: ssl}); err != nil {
		t.Fatal(err)
	}
	runA := waitStatus(t, m, sa, "running", phaseIs(PhaseRunning))
	uids := map[string]types.UID{}
	core := cluster.Client.CoreV1()
	snap := func() map[string]types.UID {
		out := map[string]types.UID{}
		if p, err := core.Pods(ns).Get(ctx, runA.State.PodName, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
			out["pod"] = p.UID
		}
		if c, err := core.PersistentVolumeClaims(ns).Get(ctx, runA.State.PVCName, metav1.GetOptions{}); err == nil && c.DeletionTimestamp == nil {
			out["pvc"] = c.UID
		}
		if svc, err := core.Services(ns).Get(ctx, runA.State.PodName, metav1.GetOptions{}); err == nil {
			out["service"] = svc.UID
		}
		secrets, err := core.Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets.Items {
			if sec.Annotations[naming.AnnotationUsername] != "" {
				out["secret/"+sec.Name] = sec.UID
			}
		}
		return out
	}
	uids = snap()
	if len(uids) < 4 {
		t.Fatalf("A's objects: %v; want pod, claim, service and secret", uids)
	}
	for _, opts := range []SpawnOptions{{SSL: ssl}, {}} {
		if _, _, err := m.Spawn(ctx, sb, opts); err != nil {
			t.Fatalf("B's Spawn = %v", err)
		}
		st := waitStatus(t, m, sb, "failed", func(st Status) bool { return st.Phase == PhaseFailed || st.Phase == PhaseRunning })
		if st.Phase != PhaseFailed || st.Reason != spawner.ReasonCollision {
			t.Errorf("B = %s (%s: %s); want failed with reason Collision", st.Phase, st.Reason, st.Message)
		}
		if st, err := m.Poll(ctx, sb); err != nil || st.Phase == PhaseRunning || st.Phase == PhaseStarting {
			t.Errorf("B's Poll = %+v, %v; A's pod is not B's", st.Phase, err)
		}
		if _, err := m.Stop(ctx, sb, spawner.StopOptions{Now: true}); err != nil && !spawner.IsCollision(err) {
			t.Errorf("B's Stop = %v; want nil or a CollisionError", err)
		}
		if err := m.DeleteForever(ctx, sb); err != nil && !spawner.IsCollision(err) {
			t.Errorf("B's DeleteForever = %v; want a CollisionError", err)
		}
		if got := snap(); fmt.Sprint(got) != fmt.Sprint(uids) {
			t.Fatalf("A's objects changed: %v, were %v", got, uids)
		}
	}
	if st, err := m.Poll(ctx, sa); err != nil || st.Phase != PhaseRunning || st.URL != runA.URL {
		t.Errorf("A = %+v, %v; want running at %s", st, err, runA.URL)
	}
	if _, err := m.Stop(ctx, sa, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

func TestAdvBadInput(t *testing.T) {
	ns := newNamespace(t)
	cfg, err := kubespawner.Load([]byte(fmt.Sprintf(`
namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
profile_list:
- display_name: A
  slug: a
  default: true
`, ns)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := runManager(t, Options{Config: cfg})
	ctx := ctxTimeout(t, 120*time.Second)

	// An unknown profile fails at Spawn; the Manager does not learn the server.
	bad := naming.Server{Username: "adv-badprofile"}
	if _, _, err := m.Spawn(ctx, bad, SpawnOptions{UserOptions: map[string]string{"profile": "nope"}}); err == nil {
		t.Error("Spawn with an unknown profile succeeded")
	}
	if _, err := m.Status(bad); !errors.Is(err, ErrNotFound) {
		t.Errorf("a server whose Spawn failed is known: %v", err)
	}

	weird := []naming.Server{
		{Username: ""},
		{Username: "adv-w", Servername: "../../etc"},
		{Username: "ädv ünicode 用户", Servername: "🚀"},
		{Username: strings.Repeat("x", 300), Servername: strings.Repeat("y", 300)},
		{Username: "adv-w", Servername: "-"},
		{Username: "UPPER.case@example.com", Servername: "a.b"},
	}
	for _, s := range weird {
		_, started, err := m.Spawn(ctx, s, SpawnOptions{})
		if err != nil {
			if _, serr := m.Status(s); !errors.Is(serr, ErrNotFound) {
				t.Errorf("%q/%q: Spawn failed (%v) but the server is known", s.Username, s.Servername, err)
			}
			t.Logf("%q/%q rejected: %v", s.Username, s.Servername, err)
			continue
		}
		if !started {
			t.Errorf("%q/%q: not started", s.Username, s.Servername)
			continue
		}
		st := waitStatus(t, m, s, "running or failed", func(st Status) bool { return st.Phase == PhaseRunning || st.Phase == PhaseFailed })
		if st.Phase != PhaseRunning {
			t.Errorf("%q/%q: %s: %s", s.Username, s.Servername, st.Reason, st.Message)
			continue
		}
		pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, st.State.PodName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Annotations[naming.AnnotationUsername] != s.Username || pod.Annotations[naming.AnnotationServername] != s.Servername {
			t.Errorf("%q/%q: pod annotations %v", s.Username, s.Servername, pod.Annotations)
		}
		if st, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil || st.Phase != PhaseStopped {
			t.Errorf("%q/%q: Stop = %s, %v", s.Username, s.Servername, st.Phase, err)
		}
	}

	// Nil maps and a nil Env on a bare Spawner.
	s := newSpawner(t, naming.Server{Username: "adv-nil"}, kubespawner.Config{Namespace: ns, Pod: cfg.Pod})
	if _, err := s.Start(ctx, spawner.StartOptions{}); err != nil {
		t.Fatalf("Start with zero StartOptions: %v", err)
	}
	if err := s.Stop(ctx, spawner.StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}

	// A 2 MiB environment variable: over spawnkit's bound
	// (MaxEnvValueBytes), refused while planning, before anything is
	// created (the API server would refuse the pod); Start fails cleanly
	// with a StartError naming the bound and leaves nothing.
	hcfg := baseConfig(ns)
	hcfg.K8sAPIRequestRetryTimeout = 5
	huge := newSpawner(t, naming.Server{Username: "adv-huge"}, hcfg)
	opts := hubStart()
	opts.Env = append(opts.Env, corev1.EnvVar{Name: "HUGE", Value: strings.Repeat("x", 2<<20)})
	begin := time.Now()
	_, err = huge.Start(ctx, opts)
	var se *spawner.StartError
	var le *kubespawner.LimitError
	if !errors.As(err, &se) || se.Step != spawner.StepPlan || !errors.As(err, &le) || le.Limit != "MaxEnvValueBytes" {
		t.Errorf("Start with a 2 MiB env = %v; want a StartError at the plan step with a LimitError of MaxEnvValueBytes", err)
	}
	t.Logf("huge env: failed after %s: %v", time.Since(begin).Round(time.Millisecond), err)
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, huge.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a pod is left after the huge start (%v)", err)
	}
}

func TestAdvAPIServerOutage(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(ns), ResyncInterval: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 150*time.Second)
	a := naming.Server{Username: "adv-outage-a"}
	if _, _, err := m.Spawn(ctx, a, SpawnOptions{}); err != nil {
		t.Fatal(err)
	}
	runA := waitStatus(t, m, a, "running", phaseIs(PhaseRunning))
	w := watchServer(ctx, m, a)
	sp := newSpawner(t, naming.Server{Username: "adv-outage-sp"}, baseConfig(ns))

	var down atomic.Bool
	restore := func() {
		if down.Swap(false) {
			if err := c.StartAPIServer(); err != nil {
				t.Errorf("restarting the API server: %v", err)
			}
		}
	}
	t.Cleanup(restore)
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	outage := time.Now()

	// During the outage: Poll answers from the cache; a Spawn and a
	// Start begin.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	if st, err := m.Poll(pctx, a); err != nil || st.Phase != PhaseRunning {
		t.Errorf("Poll during the outage = %s, %v; want running from the cache", st.Phase, err)
	}
	pcancel()
	b := naming.Server{Username: "adv-outage-b"}
	if _, _, err := m.Spawn(ctx, b, SpawnOptions{}); err != nil {
		t.Errorf("Spawn during the outage = %v", err)
	}
	type res struct {
		url string
		err error
	}
	spDone := make(chan res, 1)
	go func() { u, err := sp.Start(ctx, hubStart()); spDone <- res{u, err} }()

	// An outage of ten seconds: its length is the point, no signal ends it.
	time.Sleep(10*time.Second - time.Since(outage))
	restore()
	t.Logf("API server back after %s", time.Since(outage).Round(time.Millisecond))

	r := <-spDone
	t.Logf("Start begun during the outage returned %s after it began: %q, %v", time.Since(outage).Round(time.Millisecond), r.url, r.err)
	if r.err != nil {
		var se *spawner.StartError
		if !errors.As(r.err, &se) {
			t.Errorf("Start across the outage = %v (%T); want success or a StartError", r.err, r.err)
		}
		if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, sp.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Start failed across the outage but left its pod (%v)", err)
		}
	} else if st, err := sp.Poll(ctx); err != nil || !st.Running {
		t.Errorf("Start across the outage returned %s but Poll = %+v, %v", r.url, st, err)
	}
	stB := waitStatus(t, m, b, "running or failed", func(st Status) bool { return st.Phase == PhaseRunning || st.Phase == PhaseFailed })
	t.Logf("Spawn begun during the outage: %s %s after it began", stB.Phase, time.Since(outage).Round(time.Millisecond))
	if stB.Phase != PhaseRunning {
		var code int
		if stB.ExitCode != nil {
			code = *stB.ExitCode
		}
		t.Errorf("Spawn across the outage ended %s (%s: %s, exit %d)", stB.Phase, stB.Reason, stB.Message, code)
	}
	// A stayed running throughout: whatever the outage made the Manager
	// report of A, it has reported when the Manager has settled.
	settle(t, m)
	// settle proves the Manager has nothing left to do, but Watch relays
	// statuses in goroutines of its own: one published just before
	// settle returned may still be on its way to w, and nothing marks the
	// end of that relay, so give it time.
	time.Sleep(time.Second)
	phases, all := w.snapshot()
	for i, p := range phases {
		if p != PhaseRunning {
			t.Errorf("A was reported %s (%s: %s) around the outage", p, all[i].Reason, all[i].Message)
		}
	}
	if st, err := m.Poll(ctx, a); err != nil || st.Phase != PhaseRunning || st.URL != runA.URL {
		t.Errorf("A after the outage = %+v, %v", st, err)
	}
	for _, s := range []naming.Server{a, b} {
		if _, err := m.Stop(ctx, s, spawner.StopOptions{Now: true}); err != nil {
			t.Error(err)
		}
	}
	if err := sp.Stop(ctx, spawner.StopOptions{Now: true}); err != nil {
		t.Error(err)
	}
}
