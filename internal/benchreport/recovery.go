package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// recoveryServers is how many running servers the recovery row finds.
const recoveryServers = 10_000

// measureRecovery measures a hub restart: n servers run (their pods
// exist, made by spawner.Plan with a running status and their State
// record), and the clock runs from a cold start until every server is
// known with its URL. spawnkit's side is a new Registry and
// manager.New, whose Start lists the pods and recovers each server
// (Poll waits until it has); raw is a new pod informer synced, then a map
// from (user, server) to URL built from the pods' annotations and status,
// the least a hub needs. Both use the same client (env.Config: -client-qps);
// the order alternates between repeats.
func measureRecovery(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	n := recoveryServers
	if env.Quick {
		n = quickServerPods
	}
	ns, err := env.NewNamespace(ctx, "recovery")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, ns)
	cfg := serverConfig(ns)
	pods, err := createServerPods(ctx, env, cfg, "rec", n)
	if err != nil {
		return nil, err
	}
	probe := benchUser("rec", n-1)
	m := Measure{
		Name: fmt.Sprintf("recovery of %s running servers (manager.New+Start vs informer sync+map)", count(len(pods))),
		Unit: "ms", Better: Lower,
	}
	for r := range repeats {
		var sk, raw time.Duration
		for _, side := range sidesInOrder(r) {
			var err error
			if side == "raw" {
				raw, err = rawRecovery(ctx, env.Client, ns, n)
			} else {
				sk, err = spawnkitRecovery(ctx, env.Client, cfg, probe, n)
			}
			if err != nil {
				return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
		}
		fmt.Fprintf(os.Stderr, "repeat %d: recovered %d servers: spawnkit %s, raw %s\n", r+1, n,
			sk.Round(time.Millisecond), raw.Round(time.Millisecond))
		m.Add(ms(sk), ms(raw))
	}
	return []Measure{m}, nil
}

// spawnkitRecovery starts a Manager on a new Registry and returns how
// long it took until it knew every server as running with a URL. probe is
// one of the servers: Poll answers only once recovery is done.
func spawnkitRecovery(ctx context.Context, client kubernetes.Interface, cfg kubespawner.Config, probe naming.Server, n int) (time.Duration, error) {
	begin := time.Now()
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return 0, err
	}
	defer registry.Close()
	mgr, err := manager.New(manager.Options{Client: client, Registry: registry, Config: cfg})
	if err != nil {
		return 0, err
	}
	stop := runManager(ctx, mgr)
	defer stop()
	if _, err := mgr.Poll(ctx, probe); err != nil {
		return 0, fmt.Errorf("waiting for the manager to recover: %w", err)
	}
	elapsed := time.Since(begin)
	running := 0
	for _, st := range mgr.List() {
		if st.Phase == manager.PhaseRunning && st.URL != "" {
			running++
		}
	}
	if running != n {
		return 0, fmt.Errorf("the manager recovered %d running servers, want %d", running, n)
	}
	return elapsed, nil
}

// runManager runs mgr until the returned stop, which waits for Start to
// return and reports an error it returned.
func runManager(ctx context.Context, mgr *manager.Manager) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport: the manager stopped:", err)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// rawRecovery syncs a new pod informer and builds the map a hub needs:
// (user, server) to URL, from the owner annotations, the State record's
// port and the pod IP of each ready pod.
func rawRecovery(ctx context.Context, client kubernetes.Interface, ns string, n int) (time.Duration, error) {
	begin := time.Now()
	inf := coreinformers.NewPodInformer(client, ns, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	stop, err := startInformer(ctx, inf, "pod")
	if err != nil {
		return 0, err
	}
	defer stop()
	type key struct{ user, server string }
	urls := map[key]string{}
	for _, obj := range inf.GetStore().List() {
		pod := obj.(*corev1.Pod)
		user, ok := pod.Annotations[naming.AnnotationUsername]
		if !ok || pod.DeletionTimestamp != nil {
			continue
		}
		var st struct {
			Port int32 `json:"port"`
		}
		if err := json.Unmarshal([]byte(pod.Annotations[naming.AnnotationState]), &st); err != nil {
			return 0, fmt.Errorf("pod %s: reading its state: %w", pod.Name, err)
		}
		if podIsReady(pod) {
			urls[key{user, pod.Annotations[naming.AnnotationServername]}] = fmt.Sprintf("http://%s:%d", pod.Status.PodIP, st.Port)
		}
	}
	elapsed := time.Since(begin)
	if len(urls) != n {
		return 0, fmt.Errorf("the raw side found %d running servers, want %d", len(urls), n)
	}
	return elapsed, nil
}

// podIsReady is the raw side's readiness check: Running, an IP, PodReady.
func podIsReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
