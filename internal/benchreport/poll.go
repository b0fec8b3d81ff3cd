package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// pollRunning is how many of the cached pods are running servers that
// the poll rows poll, round-robin.
const pollRunning = 100

// pollLoops is how many timed loops each side runs per repeat; the
// fastest counts (what the code costs, without the interference of
// whatever else the machine runs), as in the orphan rows.
const pollLoops = 3

// measurePoll puts env.PollPods server pods in one namespace, cheaply:
// they name a scheduler that does not exist ("none"), so they stay
// Pending and nothing else touches them, except pollRunning of them whose
// status is set to Running and Ready, with an IP, as a kubelet would.
// Both sides cache every pod: spawnkit a Registry, raw a plain informer.
// Each then polls the running servers round-robin in a timed loop:
// spawnkit with Spawner.Poll, raw with a lister Get and a readiness and
// exit check, pollLoops times per repeat, the fastest counting. The
// rows are ns/op and allocs/op (mallocs over the loop, from
// runtime.ReadMemStats).
func measurePoll(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	ns, err := env.NewNamespace(ctx, "poll")
	if err != nil {
		return nil, err
	}
	ms, err := measurePollIn(ctx, env, repeats, ns)
	// The namespace controller deletes the pods; Pending ones go at once.
	if derr := env.DeleteNamespace(ctx, ns, 10*time.Minute); derr != nil && err == nil {
		err = derr
	}
	return ms, err
}

func measurePollIn(ctx context.Context, env *Env, repeats int, ns string) ([]Measure, error) {
	n, running := env.PollPods, min(pollRunning, env.PollPods)
	minTime := time.Second
	if env.Quick {
		minTime = 200 * time.Millisecond
	}
	config := spawnConfig(ns)
	names, err := createPollPods(ctx, env.Config, config, n, running)
	if err != nil {
		return nil, err
	}

	// spawnkit: a warm Registry and a Spawner per running server.
	registry, release, err := warmRegistry(ctx, env.Client, ns, true)
	if err != nil {
		return nil, err
	}
	defer release()
	spawners := make([]*spawner.Spawner, running)
	defer func() {
		for _, sp := range spawners {
			if sp != nil {
				sp.Close()
			}
		}
	}()
	for i := range spawners {
		if spawners[i], err = spawner.New(pollServer(i), spawner.Options{Client: env.Client, Registry: registry, Config: config}); err != nil {
			return nil, err
		}
	}

	// raw: an informer on the namespace and its lister.
	inf := rawPodInformer(env.Client, ns)
	infCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(infCtx) })
	defer func() { cancel(); wg.Wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the raw informer did not sync: %w", ctx.Err())
	}
	lister := corelisters.NewPodLister(inf.GetIndexer()).Pods(ns)

	// Both caches have every running server as running and ready before
	// the clock starts.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i, sp := range spawners {
			st, err := sp.Poll(ctx)
			if err != nil || !st.Ready {
				return false, err
			}
			if raw, err := rawPoll(lister, names[i]); err != nil || !raw.ready {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the caches to show the running servers: %w", err)
	}

	// The loops are CPU-bound in this process: they wait until the
	// cluster has digested the pods' creation (and the rows before), as
	// the orphan rows do. One full run timed them right after the
	// 1,000-spawn rows at 134-206 ns; the run before, 122-127 ns.
	if err := awaitQuiet(ctx, "the poll rows", quietForTiming); err != nil {
		return nil, err
	}

	name := fmt.Sprintf("Poll of a running server, %d pods cached", n)
	// Issue 15's goal: at most 150 ns (raw's lister Get and checks are
	// in the row beside it).
	nsOp := Measure{Name: name, Unit: "ns/op", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 150}}
	// Poll promises that polling a running server allocates nothing.
	allocs := Measure{Name: name, Unit: "allocs/op", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 0}}
	var sink int
	loops := map[string]func(i int) error{
		"spawnkit": func(i int) error {
			st, err := spawners[i%running].Poll(ctx)
			if !st.Running {
				return fmt.Errorf("Poll says server %d is not running: %+v (%w)", i%running, st, err)
			}
			sink += len(st.URL)
			return err
		},
		"raw": func(i int) error {
			st, err := rawPoll(lister, names[i%running])
			if !st.running {
				return fmt.Errorf("the raw poll says pod %s is not running: %+v (%w)", names[i%running], st, err)
			}
			sink += st.exitCode
			return err
		},
	}
	for r := range repeats {
		sides := []string{"raw", "spawnkit"}
		if r%2 == 1 {
			slices.Reverse(sides)
		}
		res := map[string][2]float64{}
		for _, side := range sides {
			perOp, allocsPerOp := math.Inf(1), 0.0
			for range pollLoops {
				ns, a, err := timeLoop(minTime, loops[side])
				if err != nil {
					return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
				}
				if ns < perOp {
					perOp, allocsPerOp = ns, a
				}
			}
			res[side] = [2]float64{perOp, allocsPerOp}
			fmt.Fprintf(os.Stderr, "poll repeat %d: %-8s %.0f ns/op, %.2f allocs/op\n", r+1, side, perOp, allocsPerOp)
		}
		nsOp.Add(res["spawnkit"][0], res["raw"][0])
		allocs.Add(res["spawnkit"][1], res["raw"][1])
	}
	_ = sink
	return []Measure{nsOp, allocs}, nil
}

// timeLoop calls f in a loop that runs for at least minTime, after a
// warm-up, and returns the nanoseconds and heap allocations per call. As
// testing.Benchmark does, it grows the count until one loop lasts long
// enough, so a stall of the machine weighs little.
func timeLoop(minTime time.Duration, f func(i int) error) (nsPerOp, allocsPerOp float64, err error) {
	for i := range 1000 {
		if err := f(i); err != nil {
			return 0, 0, err
		}
	}
	for n := 10_000; ; n *= 2 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		begin := time.Now()
		for i := range n {
			if err := f(i); err != nil {
				return 0, 0, err
			}
		}
		elapsed := time.Since(begin)
		runtime.ReadMemStats(&after)
		if elapsed >= minTime {
			return float64(elapsed.Nanoseconds()) / float64(n), float64(after.Mallocs-before.Mallocs) / float64(n), nil
		}
	}
}

// rawStatus is what a hub needs from a poll: running (not exited), ready,
// and an exit code once exited.
type rawStatus struct {
	running, ready bool
	exitCode       int
}

// rawPoll is the minimum equivalent of Spawner.Poll over a lister: no
// pod is exit code 1; a pod that ended, or whose container terminated,
// has exited with that container's code; any other pod runs.
func rawPoll(lister corelisters.PodNamespaceLister, name string) (rawStatus, error) {
	pod, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return rawStatus{exitCode: 1}, nil
	}
	if err != nil {
		return rawStatus{}, err
	}
	for i := range pod.Status.ContainerStatuses {
		if t := pod.Status.ContainerStatuses[i].State.Terminated; t != nil {
			return rawStatus{exitCode: int(t.ExitCode)}, nil
		}
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return rawStatus{exitCode: 1}, nil
	}
	return rawStatus{running: true, ready: podReady(pod)}, nil
}

func pollServer(i int) naming.Server {
	return naming.Server{Username: fmt.Sprintf("poll%05d", i), UserID: int64(i + 1)}
}

// createPollPods creates n server pods as Start renders them, with
// schedulerName "none", through a client of its own at QPS 2000, and
// marks the first running of them Running and Ready. It returns the
// running pods' names.
func createPollPods(ctx context.Context, base *rest.Config, config kubespawner.Config, n, running int) ([]string, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = 2000, 2000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	names := make([]string, running)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			o, err := spawner.Plan(gctx, pollServer(i), config, spawner.StartOptions{})
			if err != nil {
				return err
			}
			pod := o.Pod
			pod.Spec.SchedulerName = "none"
			pod, err = client.CoreV1().Pods(config.Namespace).Create(gctx, pod, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating pod %d: %w", i, err)
			}
			if i >= running {
				return nil
			}
			names[i] = pod.Name
			markRunning(pod, i)
			if _, err := client.CoreV1().Pods(config.Namespace).UpdateStatus(gctx, pod, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("marking pod %s running: %w", pod.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "poll: created %d pods (%d running) in %s\n", n, running, time.Since(begin).Round(time.Millisecond))
	return names, nil
}

// markRunning sets a pod's status as a kubelet would once its containers
// run and are ready.
func markRunning(pod *corev1.Pod, i int) {
	now := metav1.Now()
	ip := fmt.Sprintf("127.251.%d.%d", i/250, i%250+1)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}
