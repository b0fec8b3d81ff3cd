package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// progressEvents is how many pod events each repeat of the progress row
// posts, progressGap the pause between two.
const (
	progressEvents = 100
	progressGap    = 20 * time.Millisecond
)

// measureProgress measures how long a pod event takes to reach a hub: a
// Start waits for a pod that never becomes ready (testcluster's
// BehaviorNeverReady), and K events about that pod are created through
// the API, one every progressGap. For each event the clock runs from just
// before its create request until it arrives in spawnkit's progress
// stream (a spawner.Stream fed by the Start's OnProgress, read through
// Stream.Events as a hub's progress page reads it) and, at the same time,
// in the handler of a raw event informer on the namespace. Both sides see
// the same events over the same run; rows are the median and the 99th
// percentile per repeat.
func measureProgress(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	ns, err := env.NewNamespace(ctx, "progress")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, ns)
	registry, err := reflector.New(reflector.Options{Client: env.Client})
	if err != nil {
		return nil, err
	}
	defer registry.Close()
	cfg := kubespawner.Config{
		Namespace: ns, Cmd: []string{"jupyterhub-singleuser"}, Pod: manifest.PodSpec{Image: image},
		ExtraAnnotations: map[string]string{testcluster.BehaviorAnnotation: testcluster.BehaviorNeverReady},
		StartTimeout:     kubespawner.Seconds(time.Hour.Seconds()),
	}
	srv := benchUser("progress", 0)
	sp, err := spawner.New(srv, spawner.Options{Client: env.Client, Registry: registry, Config: cfg})
	if err != nil {
		return nil, err
	}
	defer sp.Close()

	// The two receivers: the Start's progress stream, and a raw informer.
	var sk, raw atomic.Pointer[arrivals]
	stream := spawner.NewStream()
	readCtx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() { stopReading(); readers.Wait() }()
	readers.Go(func() {
		for e := range stream.Events(readCtx, 0) {
			if a := sk.Load(); a != nil && e.Event != nil {
				a.see(e.Event.Name, time.Now())
			}
		}
	})
	started := make(chan error, 1)
	go func() {
		_, err := sp.Start(ctx, spawner.StartOptions{Env: hubEnv(srv.Username), OnProgress: stream.Publish})
		started <- err
	}()
	defer func() {
		// Stop cancels the start (which then deletes its pod) and waits.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := sp.Stop(stopCtx, spawner.StopOptions{Now: true}); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: stopping the progress server:", err)
		}
		<-started
	}()
	pod, err := waitPodPhase(ctx, env, ns, sp.State().PodName, corev1.PodRunning)
	if err != nil {
		return nil, err
	}
	inf := coreinformers.NewEventInformer(env.Client, ns, 0, cache.Indexers{})
	seen := func(obj any) {
		if ev, ok := obj.(*corev1.Event); ok && ev.InvolvedObject.UID == pod.UID {
			if a := raw.Load(); a != nil {
				a.see(ev.Name, time.Now())
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, err
	}
	stopInformer, err := startInformer(ctx, inf, "event")
	if err != nil {
		return nil, err
	}
	defer stopInformer()

	p50 := Measure{Name: fmt.Sprintf("progress latency p50, %d pod events (Stream vs event informer)", progressEvents),
		Unit: "ms", Better: Lower}
	p99 := Measure{Name: fmt.Sprintf("progress latency p99, %d pod events (Stream vs event informer)", progressEvents),
		Unit: "ms", Better: Lower}
	for r := range repeats {
		names := make([]string, progressEvents)
		for k := range names {
			names[k] = fmt.Sprintf("%s.bench-%02d-%03d", pod.Name, r, k)
		}
		skA, rawA := newArrivals(names), newArrivals(names)
		sk.Store(skA)
		raw.Store(rawA)
		sent := map[string]time.Time{}
		for _, name := range names {
			sent[name] = time.Now()
			if err := postPodEvent(ctx, env, pod, name); err != nil {
				return nil, err
			}
			time.Sleep(progressGap)
		}
		for side, a := range map[string]*arrivals{"spawnkit": skA, "raw": rawA} {
			if err := a.wait(ctx, 30*time.Second); err != nil {
				return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
		}
		skL, rawL := skA.latencies(sent), rawA.latencies(sent)
		fmt.Fprintf(os.Stderr, "repeat %d: progress latency p50/p99: spawnkit %.1f/%.1f ms, raw %.1f/%.1f ms\n", r+1,
			percentile(skL, 50), percentile(skL, 99), percentile(rawL, 50), percentile(rawL, 99))
		p50.Add(percentile(skL, 50), percentile(rawL, 50))
		p99.Add(percentile(skL, 99), percentile(rawL, 99))
	}
	return []Measure{p50, p99}, nil
}

// postPodEvent creates an event about pod, as a kubelet reports one.
func postPodEvent(ctx context.Context, env *Env, pod *corev1.Pod, name string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, FieldPath: "spec.containers{" + manifest.ContainerName + "}"},
		Reason: "Benchmark", Message: "Benchmark event " + name, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "benchreport"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := env.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating event %s: %w", name, err)
	}
	return nil
}

// waitPodPhase waits, up to two minutes, until pod ns/name exists with
// phase, and returns it.
func waitPodPhase(ctx context.Context, env *Env, ns, name string, phase corev1.PodPhase) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // not created yet
		}
		pod = p
		return p.Status.Phase == phase, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for pod %s/%s to be %s: %w", ns, name, phase, err)
	}
	return pod, nil
}

// arrivals records when each expected item (by name) first arrives. It is
// safe for concurrent use.
type arrivals struct {
	mu   sync.Mutex // guards at and done's closing
	at   map[string]time.Time
	want map[string]bool // read-only
	done chan struct{}   // closed once every wanted item has arrived
}

func newArrivals(names []string) *arrivals {
	a := &arrivals{at: map[string]time.Time{}, want: map[string]bool{}, done: make(chan struct{})}
	for _, n := range names {
		a.want[n] = true
	}
	return a
}

// see records name's arrival at t, unless it is not wanted or came
// before.
func (a *arrivals) see(name string, t time.Time) {
	if !a.want[name] {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[name]; ok {
		return
	}
	a.at[name] = t
	if len(a.at) == len(a.want) {
		close(a.done)
	}
}

// wait waits until every wanted item has arrived, up to timeout.
func (a *arrivals) wait(ctx context.Context, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case <-a.done:
		return nil
	case <-timer.C:
		err = context.DeadlineExceeded
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Errorf("%d of %d arrived within %s: %w", len(a.at), len(a.want), timeout, err)
}

// latencies returns, for each arrived item, its arrival minus its time in
// sent.
func (a *arrivals) latencies(sent map[string]time.Time) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]time.Duration, 0, len(a.at))
	for name, t := range a.at {
		out = append(out, t.Sub(sent[name]))
	}
	return out
}

// percentile is the p-th percentile of ds (nearest rank), in
// milliseconds.
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return ms(s[max(i, 0)])
}
