package spawner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// Adversarial tests: each tries to break one promise of doc.go on the
// simulated cluster.

// advPods lists the pods in ns that are not being deleted.
func advPods(t *testing.T, ctx context.Context, ns string) []corev1.Pod {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestAdvPodURLHookMayCallState: doc.go (Hooks) says a hook may call
// Poll, State and Server. A PodURL hook that does so must not deadlock
// Start.
func TestAdvPodURLHookMayCallState(t *testing.T) {
	ns := newNamespace(t)
	var calls atomic.Int32
	s, err := New(naming.Server{Username: "adv-hook"}, Options{
		Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns),
		Hooks: Hooks{PodURL: func(s *Spawner, pod *reflector.Pod, def string) string {
			calls.Add(1)
			st := s.State() // allowed by the Hooks contract (Poll would call this hook again)
			return def + "/?pod=" + st.PodName
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 60*time.Second)
	type res struct {
		url string
		err error
	}
	done := make(chan res, 1)
	go func() { u, err := s.Start(ctx, hubStart()); done <- res{u, err} }()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !strings.HasSuffix(r.url, "/?pod="+s.State().PodName) || calls.Load() == 0 {
			t.Errorf("URL = %q; the PodURL hook's answer must be used", r.url)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Start deadlocked: the PodURL hook called State, which the Hooks contract allows")
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestAdvStartWaitingForTheSlotFailsWithStartError: a Start whose ctx
// ends while another operation holds the slot is still a failed Start, so
// doc.go promises a *StartError (reason Cancelled, or Detached for
// ErrDetach).
func TestAdvStartWaitingForTheSlotFailsWithStartError(t *testing.T) {
	ns := newNamespace(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	s, err := New(naming.Server{Username: "adv-slot"}, Options{
		Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns),
		Hooks: Hooks{ModifyPod: func(ctx context.Context, _ *Spawner, _ *corev1.Pod) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := ctxTimeout(t, 60*time.Second)
	first := make(chan error, 1)
	go func() { _, err := s.Start(ctx, hubStart()); first <- err }()
	<-entered

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = s.Start(short, hubStart())
	var se *StartError
	if !errors.As(err, &se) || se.Reason != ReasonCancelled || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start whose ctx ended waiting for the slot = %v (%T); want a *StartError, reason Cancelled, wrapping the ctx error", err, err)
	}
	dctx, dcancel := context.WithCancelCause(ctx)
	go func() { time.Sleep(200 * time.Millisecond); dcancel(ErrDetach) }()
	_, err = s.Start(dctx, hubStart())
	if !errors.As(err, &se) || se.Reason != ReasonDetached || !errors.Is(err, ErrDetach) {
		t.Errorf("Start detached while waiting for the slot = %v; want a *StartError, reason Detached", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first Start: %v", err)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

// TestAdvSpawnerStopRacesStart: Stop racing Start in a tight loop. Every
// failed Start is a *StartError whose pod is gone; a Start that returned
// a URL left a ready pod of its own unless a Stop came after it; a final
// Stop leaves nothing.
func TestAdvSpawnerStopRacesStart(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	s := newSpawner(t, naming.Server{Username: "adv-race", Servername: "x"}, cfg)
	ctx := ctxTimeout(t, 120*time.Second)
	var claimUID types.UID
	for i := range 10 {
		stream := NewStream()
		opts := hubStart()
		opts.OnProgress = stream.Publish
		started := make(chan error, 1)
		go func() { _, err := s.Start(ctx, opts); started <- err }()
		time.Sleep(time.Duration(i*60) * time.Millisecond)
		if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
			t.Fatalf("round %d: Stop = %v", i, err)
		}
		err := <-started
		evs, done := stream.Snapshot()
		if !done || len(evs) == 0 {
			t.Fatalf("round %d: the stream did not end", i)
		}
		last := evs[len(evs)-1]
		pod, getErr := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
		if err != nil {
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("round %d: Start = %v (%T); want a *StartError", i, err, err)
			}
			if !last.Failed || last.Ready {
				t.Errorf("round %d: Start failed but the final event is %+v", i, last)
			}
			if getErr == nil {
				t.Errorf("round %d: Start failed (%v) but pod %s (uid %s) is still there", i, err, pod.Name, pod.UID)
			} else if !apierrors.IsNotFound(getErr) {
				t.Fatal(getErr)
			}
		} else {
			if !last.Ready || last.Failed {
				t.Errorf("round %d: Start succeeded but the final event is %+v", i, last)
			}
			if getErr == nil && (pod.Annotations[naming.AnnotationStartID] != s.State().StartID || pod.DeletionTimestamp != nil) {
				t.Errorf("round %d: a pod of another start (%s, want %s) survived", i, pod.Annotations[naming.AnnotationStartID], s.State().StartID)
			}
		}
		// A cancelled start keeps its claim; the claim is never replaced.
		claim, err := cluster.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, s.State().PVCName, metav1.GetOptions{})
		if err == nil {
			if claimUID != "" && claim.UID != claimUID {
				t.Errorf("round %d: the claim was replaced", i)
			}
			claimUID = claim.UID
		}
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	if pods := advPods(t, ctx, ns); len(pods) != 0 {
		t.Errorf("%d pods left after the final Stop", len(pods))
	}
}

// TestAdvCloseDuringStop: Close while a Stop runs never hangs, and a Stop
// that returned nil left no pod.
func TestAdvCloseDuringStop(t *testing.T) {
	ns := newNamespace(t)
	for i := range 3 {
		s, err := New(naming.Server{Username: fmt.Sprintf("adv-close-%d", i)}, Options{Client: cluster.Client, Registry: sharedRegistry(t), Config: baseConfig(ns)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxTimeout(t, 60*time.Second)
		if _, err := s.Start(ctx, hubStart()); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- s.Stop(ctx, StopOptions{}) }()
		time.Sleep(time.Duration(i*5) * time.Millisecond)
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatal("Close hung during a Stop")
		}
		err = <-stopped
		_, getErr := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{})
		switch {
		case err == nil && !apierrors.IsNotFound(getErr):
			t.Errorf("round %d: Stop returned nil but the pod is still there (%v)", i, getErr)
		case err != nil && !errors.Is(err, ErrClosed):
			t.Errorf("round %d: Stop racing Close = %v; want nil or ErrClosed", i, err)
		}
		if err != nil && getErr == nil {
			// Close does not stop a running server: clean up by hand.
			_ = cluster.Client.CoreV1().Pods(ns).Delete(ctx, s.State().PodName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

// TestAdvPollDuringStartNeverDeletesTheNewPod: a Poll with
// delete_stopped_pods racing a Start that replaces an exited pod of the
// same server deletes only the exited pod (UID precondition), never the
// new one.
// TestAdvManagerStopWhileTheStartSucceeds: a Stop that lands after the
// Spawner's Start has seen the pod ready but before the Manager applied
// the outcome must not make the server running again: stopping is
// followed by stopped, never by running.
// TestAdvManagerConcurrentSpawnOnePod: many goroutines Spawn the same
// server at once: exactly one start, one pod, and later Spawns never
// restart it.
// TestAdvManagerStopRacesSpawn: Spawn then Stop at once, over and over,
// with storage: after each Stop the server is stopped and has no pod, and
// the claim is the same one throughout.
// TestAdvManagerDeleteForeverRacesSpawn: DeleteForever and Spawn of the
// same stopped server at once. Whatever wins, a server the Manager
// reports running has a live claim, and a Spawn that said it started the
// server is not silently undone.
// TestAdvStartAfterDeleteForeverNeverMountsADyingClaim: DeleteForever,
// then Start at once. The old claim may still be terminating (a finalizer
// holds it here); Start must not mount it (the new server's home would
// vanish with it) but wait for it to go and make a new one.
func TestAdvStartAfterDeleteForeverNeverMountsADyingClaim(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	srv := naming.Server{Username: "adv-dying"}
	s := newSpawner(t, srv, cfg)
	ctx := ctxTimeout(t, 90*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
	claims := cluster.Client.CoreV1().PersistentVolumeClaims(ns)
	name := s.State().PVCName
	const hold = "test.spawnkit.dev/hold"
	// The cluster's controllers may update the claim meanwhile (binding
	// it): add the finalizer as any client must, retrying on conflict.
	var old *corev1.PersistentVolumeClaim
	if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Finalizers = append(c.Finalizers, hold)
		old, err = claims.Update(ctx, c, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The finalizer goes in two seconds, as a slow storage driver's
	// would; DeleteForever waits for the claim to be gone.
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(2 * time.Second)
		for range 10 {
			c, err := claims.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return
			}
			c.Finalizers = nil
			if _, err := claims.Update(context.Background(), c, metav1.UpdateOptions{}); err == nil || apierrors.IsNotFound(err) {
				return
			}
		}
	}()
	t.Cleanup(func() { <-released })
	if err := s.DeleteForever(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
	default:
		t.Error("DeleteForever returned while the claim was still held by its finalizer")
	}
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatalf("Start after DeleteForever: %v", err)
	}
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the running server has no claim: %v", err)
	}
	if c.UID == old.UID || c.DeletionTimestamp != nil {
		t.Errorf("Start mounted the claim DeleteForever deleted (uid %s, deleting %v)", c.UID, c.DeletionTimestamp != nil)
	}
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

// TestAdvManagerShutdownMidStartAndMidStop: the Manager's ctx ends while
// one server starts (with a claim) and another stops. Nothing that should
// stay is deleted, nothing that should go stays, and a new Manager on a
// new Registry recovers exactly that.
// TestAdvManagerSpawnDuringShutdown: Spawns keep arriving while the
// Manager shuts down. Start returns only after every operation ended:
// nothing changes afterwards, and no start is reported failed because of
// the shutdown.
// TestAdvManagerCollidingUsers: two users whose pod, claim, secret and
// service names collide, through the Manager, with storage and SSL. The
// second user's Spawn fails with a collision; its Stop, Poll and
// DeleteForever never touch the first user's objects, which keeps running.
// TestAdvBadInput: weird names, an unknown profile, nil maps and a huge
// environment either work end to end or fail cleanly before anything is
// created.
// TestAdvAPIServerOutage stops kube-apiserver for about ten seconds. A
// running server is never reported gone or failed by the Manager; a
// Spawn and a Spawner Start begun during the outage succeed after it (or
// fail cleanly with a StartError, leaving no pod).

// TestStopTimeoutEndsAStuckStop: a pod held by a finalizer nobody
// removes ends Stop after stop_timeout with ErrStopTimeout naming the
// pod, never a hang; once the finalizer goes, Stop succeeds.
func TestStopTimeoutEndsAStuckStop(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.StopTimeout = 2
	s := newSpawner(t, naming.Server{Username: "stuck-stop"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	podsAPI := cluster.Client.CoreV1().Pods(ns)
	name := s.State().PodName
	const hold = "test.spawnkit.dev/hold"
	setFinalizers := func(f []string) {
		t.Helper()
		if err := clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
			p, err := podsAPI.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Finalizers = f
			_, err = podsAPI.Update(ctx, p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	setFinalizers([]string{hold})
	begin := time.Now()
	err := s.Stop(ctx, StopOptions{Now: true})
	took := time.Since(begin)
	if !errors.Is(err, ErrStopTimeout) || !strings.Contains(err.Error(), ns+"/"+name) {
		t.Fatalf("Stop of a pod held by a finalizer = %v after %s; want ErrStopTimeout naming the pod", err, took)
	}
	if took > 10*time.Second {
		t.Errorf("Stop took %s with stop_timeout 2 s", took)
	}
	setFinalizers(nil)
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Errorf("Stop once the finalizer is gone: %v", err)
	}
}

// TestStartPhaseBounds: pending_timeout ends a start whose pod no node
// fits (a node selector nothing matches) with reason PendingTimeout, long
// before start_timeout, and deletes its pod; creating_timeout is checked
// from the time the pod was scheduled (phaseBound, on a pod as the cache
// holds it); with neither set only start_timeout bounds a start, as in
// KubeSpawner.
func TestStartPhaseBounds(t *testing.T) {
	ns := newNamespace(t)
	cfg := baseConfig(ns)
	cfg.PendingTimeout = 2
	cfg.Pod.NodeSelector = map[string]string{"spawnkit.dev/no-such-node": "true"}
	s := newSpawner(t, naming.Server{Username: "pending-bound"}, cfg)
	ctx := ctxTimeout(t, 60*time.Second)
	begin := time.Now()
	_, err := s.Start(ctx, hubStart())
	var se *StartError
	if !errors.As(err, &se) || se.Reason != ReasonPendingTimeout {
		t.Fatalf("Start of an unschedulable pod with pending_timeout 2 = %v; want reason PendingTimeout", err)
	}
	if took := time.Since(begin); took > 15*time.Second {
		t.Errorf("the pending bound ended the start after %s", took)
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, s.State().PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the failed start left its pod (%v)", err)
	}

	creating := baseConfig(ns)
	creating.CreatingTimeout = 30
	c := newSpawner(t, naming.Server{Username: "creating-bound"}, creating)
	scheduledAt := time.Now().Add(-time.Minute)
	pod := reflector.NewPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Status: corev1.PodStatus{
		Phase:      corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduledAt)}},
	}})
	if reason, _, err := c.phaseBound(&c.b.cfg, pod, scheduledAt.Add(-time.Second)); reason != ReasonCreatingTimeout || err == nil {
		t.Errorf("scheduled a minute ago, still creating, creating_timeout 30 s: %q, %v; want CreatingTimeout", reason, err)
	}
	if reason, left, _ := c.phaseBound(&c.b.cfg, pod, time.Now()); reason != "" || left <= 0 || left > 30*time.Second {
		t.Errorf("a start that began just now: %q, %s left; want none yet, at most 30 s left", reason, left)
	}
	nb := newSpawner(t, naming.Server{Username: "no-bound"}, baseConfig(ns))
	if reason, left, _ := nb.phaseBound(&nb.b.cfg, pod, scheduledAt); reason != "" || left != 0 {
		t.Errorf("without bounds: %q, %s; want none", reason, left)
	}
}
