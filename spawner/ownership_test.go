package spawner

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

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

func TestCollidingUsersCannotTakeOverEachOther(t *testing.T) {
	a, b := collidingUsers(t)
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	ctx := ctxTimeout(t, 90*time.Second)
	sa := newSpawner(t, naming.Server{Username: a}, cfg)
	sb := newSpawner(t, naming.Server{Username: b}, cfg)
	if sa.State().PodName != sb.State().PodName || sa.names.PVC != sb.names.PVC {
		t.Fatalf("the search did not find colliding names: %+v / %+v", sa.State(), sb.State())
	}
	urlA, err := sa.Start(ctx, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	podA, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, sa.State().PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimA, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, sa.State().PVCName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	_, err = sb.Start(ctx, hubStart())
	var ce *CollisionError
	var se *StartError
	if !errors.As(err, &ce) || !errors.As(err, &se) || se.Reason != ReasonCollision || ce.Have == nil || ce.Have.Username != a || ce.Want.Username != b {
		t.Fatalf("second user's Start = %v; want a StartError with a CollisionError naming both users", err)
	}
	t.Logf("collision: %v", err)
	// B cannot stop or delete A's objects either.
	if err := sb.Stop(ctx, StopOptions{Now: true}); !IsCollision(err) {
		t.Errorf("B's Stop = %v; want a CollisionError", err)
	}
	if err := sb.DeleteForever(ctx); !IsCollision(err) {
		t.Errorf("B's DeleteForever = %v; want a CollisionError", err)
	}
	if st, err := sb.Poll(ctx); err != nil || st.Running {
		t.Errorf("B's Poll = %+v, %v; want not running (the pod is A's)", st, err)
	}

	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, sa.State().PodName, metav1.GetOptions{})
	if err != nil || pod.UID != podA.UID {
		t.Fatalf("A's pod was replaced or deleted: %v", err)
	}
	claim, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, sa.State().PVCName, metav1.GetOptions{})
	if err != nil || claim.UID != claimA.UID {
		t.Fatalf("A's claim was replaced or deleted: %v", err)
	}
	if st, err := sa.Poll(ctx); err != nil || !st.Running || st.URL != urlA {
		t.Errorf("A's Poll = %+v, %v; want running at %s", st, err, urlA)
	}
	// Without storage the pod itself collides.
	cfg.StoragePVCEnsure = false
	sb2 := newSpawner(t, naming.Server{Username: b}, cfg)
	if _, err := sb2.Start(ctx, hubStart()); !IsCollision(err) {
		t.Errorf("B's Start without storage = %v; want a CollisionError at the pod", err)
	}
	if pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, sa.State().PodName, metav1.GetOptions{}); err != nil || pod.UID != podA.UID {
		t.Fatalf("A's pod was touched: %v", err)
	}
}

// FuzzNoTakeover: for any two servers whose objects get the same names,
// the ownership check refuses every object of the other server, so no
// Start, Stop or DeleteForever can delete, replace or reuse it.
func FuzzNoTakeover(f *testing.F) {
	f.Add("alice", "", "bob", "")
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa--31556", "", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa--32398", "")
	f.Add("Alice", "x", "alice", "x")
	f.Fuzz(func(t *testing.T, u1, s1, u2, s2 string) {
		a, b := naming.Server{Username: u1, Servername: s1}, naming.Server{Username: u2, Servername: s2}
		cfg := kubespawner.Config{Namespace: "ns", Pod: baseConfig("ns").Pod, StoragePVCEnsure: true, StorageCapacity: resource.MustParse("1Gi")}
		oa, err := Plan(t.Context(), a, cfg, StartOptions{SSL: &SSL{Key: []byte("k"), Cert: []byte("c")}})
		if err != nil {
			return // names the templates cannot render are rejected before any API call
		}
		for _, obj := range []metav1.Object{oa.Pod, oa.PVC, oa.Secret, oa.Service} {
			serverMatters := true
			if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				serverMatters = a.Servername != "" && pvcTemplateNamesServer("claim-{user_server}")
			}
			err := checkOwner(b, "X", obj, serverMatters)
			same := a.Username == b.Username && (!serverMatters || a.Servername == b.Servername)
			if same && err != nil {
				t.Fatalf("%s of %+v refused to its own server: %v", obj.GetName(), a, err)
			}
			if !same && !IsCollision(err) {
				t.Fatalf("%s of %+v accepted for %+v", obj.GetName(), a, b)
			}
		}
	})
}

func TestStopCancelsAStartInFlight(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	cfg.StartTimeout = 45
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	s := newSpawner(t, naming.Server{Username: "stopper"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	stream, started := startUntilPodEvent(t, ctx, ctx, s)
	begin := time.Now()
	stopCtx := ctxTimeout(t, 8*time.Second)
	if err := s.Stop(stopCtx, StopOptions{}); err != nil {
		t.Fatalf("Stop during a Start: %v", err)
	}
	t.Logf("Stop during a Start returned in %s", time.Since(begin).Round(time.Millisecond))
	err := <-started
	var se *StartError
	if !errors.As(err, &se) || se.Reason != ReasonCancelled || !errors.Is(err, ErrStartCancelled) {
		t.Fatalf("Start = %v; want a StartError with reason Cancelled wrapping ErrStartCancelled", err)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cancelled start's pod is still there (%v)", err)
	}
	if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.State().PVCName, metav1.GetOptions{}); err != nil {
		t.Errorf("a cancelled start must keep its claim: %v", err)
	}
	evs, done := stream.Snapshot()
	if !done || !evs[len(evs)-1].Failed || evs[len(evs)-1].Reason != ReasonCancelled {
		t.Errorf("the stream did not end with a cancelled event: %+v", evs[len(evs)-1])
	}
}

func TestCloseCancelsAStartAndIsTerminal(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	s, err := New(naming.Server{Username: "closer"}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 60*time.Second)
	_, started := startUntilPodEvent(t, ctx, ctx, s)
	s.Close()
	if err := <-started; !errors.Is(err, ErrClosed) {
		t.Fatalf("Start cancelled by Close = %v; want ErrClosed", err)
	}
	waitDeleted(t, ctx, "Pod", ns, s.State().PodName)
	if _, err := s.Start(ctx, hubStart()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v", err)
	}
	if _, err := s.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after Close = %v", err)
	}
	if err := s.Stop(ctx, StopOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Stop after Close = %v", err)
	}
	s.Close() // idempotent
}

func TestDetachedStartIsResumed(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	s := newSpawner(t, naming.Server{Username: "detacher"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	sctx, cancel := context.WithCancelCause(ctx)
	_, started := startUntilPodEvent(t, ctx, sctx, s)
	cancel(ErrDetach)
	err := <-started
	var se *StartError
	if !errors.As(err, &se) || se.Reason != ReasonDetached {
		t.Fatalf("detached Start = %v; want reason Detached", err)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a detached start must leave its pod: %v", err)
	}
	// Another process resumes it from the pod's record.
	st, ok := StateFromPod(reflector.NewPod(pod))
	if !ok || st.Port != 8888 || st.StartID == "" {
		t.Fatalf("the pod records %+v, %v", st, ok)
	}
	cfg.ExtraAnnotations = nil
	s2 := newSpawner(t, naming.Server{Username: "detacher"}, cfg)
	s2.LoadState(st)
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if _, err := s2.Resume(rctx, StartOptions{}); err == nil {
		t.Fatal("Resume of a never-ready pod returned ready")
	}
	// The caller's ctx ended: the pod is deleted like any cancelled start.
	waitDeleted(t, ctx, "Pod", ns, st.PodName)
	if _, err := s2.Resume(ctx, StartOptions{}); !errors.Is(err, ErrNoPod) {
		t.Errorf("Resume without a pod = %v; want ErrNoPod", err)
	}
}

func TestPodDeletedDuringStartFailsAtOnce(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.ExtraAnnotations = map[string]string{"testcluster.spawnkit.dev/behavior": "never-ready"}
	cfg.StartTimeout = 60
	s := newSpawner(t, naming.Server{Username: "victim"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	_, started := startUntilPodEvent(t, ctx, ctx, s)
	begin := time.Now()
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, s.State().PodName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := <-started
	if !errors.Is(err, ErrPodGone) {
		t.Fatalf("Start = %v; want ErrPodGone", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("noticing the deleted pod took %s", d)
	}
}

// startUntilPodEvent runs s.Start(startCtx) in the background and returns
// once its progress shows the first pod event (the pod exists), with the
// stream and the channel that receives Start's error.
func startUntilPodEvent(t *testing.T, ctx, startCtx context.Context, s *Spawner) (*Stream, <-chan error) {
	t.Helper()
	stream := NewStream()
	opts := hubStart()
	opts.OnProgress = stream.Publish
	started := make(chan error, 1)
	go func() { _, err := s.Start(startCtx, opts); started <- err }()
	for e := range stream.Events(ctx, 0) {
		if e.Event != nil {
			return stream, started
		}
	}
	t.Fatal("the start ended before any pod event")
	return nil, nil
}
