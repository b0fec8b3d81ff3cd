package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// detectServers is how many running servers fail in each repeat of the
// detection row, detectGap the pause between two failures.
const (
	detectServers = 100
	detectGap     = 30 * time.Millisecond
)

// measureDetection measures how long a hub takes to notice that a
// running server died: n servers run (pods made by spawner.Plan, with a
// running status), a manager.Manager has recovered them and a raw pod
// informer has synced; then, one every detectGap, each pod's notebook
// container is marked terminated with exit code 1 (phase Failed) through
// UpdateStatus, as a kubelet reports it. For each server the clock runs
// from just before that request until the Manager's Watch reports the
// server failed (the Manager also deletes the stopped pod first, as
// delete_stopped_pods says) and, at the same time, until the raw
// informer's handler sees the pod failed. Rows are the median and the
// 99th percentile per repeat; each repeat fails a fresh set of servers.
func measureDetection(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	ns, err := env.NewNamespace(ctx, "detection")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, ns)
	cfg := serverConfig(ns)
	p50 := Measure{Name: fmt.Sprintf("failure detection p50, %d servers exiting (Manager.Watch vs pod informer)", detectServers),
		Unit: "ms", Better: Lower}
	p99 := Measure{Name: fmt.Sprintf("failure detection p99, %d servers exiting (Manager.Watch vs pod informer)", detectServers),
		Unit: "ms", Better: Lower}
	for r := range repeats {
		sk, raw, err := detectOnce(ctx, env, cfg, fmt.Sprintf("det%d", r))
		if err != nil {
			return nil, fmt.Errorf("repeat %d: %w", r+1, err)
		}
		fmt.Fprintf(os.Stderr, "repeat %d: failure detection p50/p99: spawnkit %.1f/%.1f ms, raw %.1f/%.1f ms\n", r+1,
			percentile(sk, 50), percentile(sk, 99), percentile(raw, 50), percentile(raw, 99))
		p50.Add(percentile(sk, 50), percentile(raw, 50))
		p99.Add(percentile(sk, 99), percentile(raw, 99))
	}
	return []Measure{p50, p99}, nil
}

// detectOnce runs one repeat with the servers of prefix and returns each
// side's detection latencies.
func detectOnce(ctx context.Context, env *Env, cfg kubespawner.Config, prefix string) (sk, raw []time.Duration, err error) {
	pods, err := createServerPods(ctx, env, cfg, prefix, detectServers)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Annotations[naming.AnnotationUsername]
	}
	skA, rawA := newArrivals(names), newArrivals(names)

	registry, err := reflector.New(reflector.Options{Client: env.Client})
	if err != nil {
		return nil, nil, err
	}
	defer registry.Close()
	mgr, err := manager.New(manager.Options{Client: env.Client, Registry: registry, Config: cfg})
	if err != nil {
		return nil, nil, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watcher sync.WaitGroup
	defer func() { stopWatching(); watcher.Wait() }()
	statuses := mgr.Watch(watchCtx)
	watcher.Go(func() {
		for st := range statuses {
			if st.Phase == manager.PhaseFailed {
				skA.see(st.User, time.Now())
			}
		}
	})
	stopManager := runManager(ctx, mgr)
	defer stopManager()
	if _, err := mgr.Poll(ctx, benchUser(prefix, 0)); err != nil {
		return nil, nil, fmt.Errorf("waiting for the manager to recover: %w", err)
	}
	list := mgr.List()
	if len(list) != len(pods) {
		return nil, nil, fmt.Errorf("the manager knows %d servers, want %d", len(list), len(pods))
	}
	for _, st := range list {
		if st.Phase != manager.PhaseRunning {
			return nil, nil, fmt.Errorf("server %s is %s, want running", st.User, st.Phase)
		}
	}

	inf := coreinformers.NewPodInformer(env.Client, cfg.Namespace, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && containerExited(pod) {
			rawA.see(pod.Annotations[naming.AnnotationUsername], time.Now())
		}
	}}); err != nil {
		return nil, nil, err
	}
	stopInformer, err := startInformer(ctx, inf, "pod")
	if err != nil {
		return nil, nil, err
	}
	defer stopInformer()

	sent := map[string]time.Time{}
	for i, pod := range pods {
		failed := pod.DeepCopy()
		exitStatus(failed)
		sent[names[i]] = time.Now()
		if _, err := env.Client.CoreV1().Pods(cfg.Namespace).UpdateStatus(ctx, failed, metav1.UpdateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("failing pod %s: %w", pod.Name, err)
		}
		time.Sleep(detectGap)
	}
	for side, a := range map[string]*arrivals{"spawnkit": skA, "raw": rawA} {
		if err := a.wait(ctx, time.Minute); err != nil {
			return nil, nil, fmt.Errorf("%s: servers detected failed: %w", side, err)
		}
	}
	return skA.latencies(sent), rawA.latencies(sent), nil
}

// exitStatus makes pod's status that of a pod whose notebook container
// exited with code 1.
func exitStatus(pod *corev1.Pod) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
			pod.Status.Conditions[i].Status, pod.Status.Conditions[i].LastTransitionTime = corev1.ConditionFalse, now
		}
	}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		started := now
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.Ready, cs.Started = false, new(bool)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID}}
	}
}

// containerExited is the raw side's check: the notebook container has
// terminated, or the pod has ended.
func containerExited(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == manifest.ContainerName && cs.State.Terminated != nil {
			return true
		}
	}
	return false
}
