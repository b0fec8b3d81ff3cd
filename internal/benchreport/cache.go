package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// heapPods is how many running servers the heap row caches (a large
// hub's); -quick uses quickServerPods.
const (
	heapPods        = 10_000
	quickServerPods = 1_000
)

// measureHeap measures the heap a cached pod costs: n realistic running
// server pods exist in a namespace (made as spawner.Start makes them, with
// a kubelet's running status), and the heap that stays after a GC once a
// pod informer has synced them is divided by n. spawnkit's side is
// reflector.Registry.Pods (its compact pods, the uid map and the namespace
// index included); raw is a plain SharedIndexInformer with a namespace
// index and no transform. Each side's informer is stopped before the
// other's is measured, and the order alternates between repeats. Pods
// are decoded from the API server's answers, as a hub's informer decodes
// them, so no two pods share a string.
func measureHeap(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	n := heapPods
	if env.Quick {
		n = quickServerPods
	}
	ns, err := env.NewNamespace(ctx, "heap")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, ns)
	if _, err := createServerPods(ctx, env, serverConfig(ns), "heap", n); err != nil {
		return nil, err
	}
	// The simulated cluster keeps an informer on all pods in this process:
	// let it take in the new pods before the heap is read.
	time.Sleep(3 * time.Second)
	m := Measure{
		Name: fmt.Sprintf("heap per cached pod, %s running server pods (Registry.Pods vs plain informer)", count(n)),
		Unit: "B/pod", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 2048},
	}
	for r := range repeats {
		var sk, raw float64
		for _, side := range sidesInOrder(r) {
			var perPod float64
			var err error
			if side == "raw" {
				perPod, err = heapPerPod(n, func() (int, func(), error) { return rawPodCache(ctx, env.Client, ns) })
				raw = perPod
			} else {
				perPod, err = heapPerPod(n, func() (int, func(), error) { return spawnkitPodCache(ctx, env.Client, ns) })
				sk = perPod
			}
			if err != nil {
				return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
			fmt.Fprintf(os.Stderr, "repeat %d: %-8s %.0f B per cached pod\n", r+1, side, perPod)
		}
		m.Add(sk, raw)
	}
	return []Measure{m}, nil
}

// heapPerPod returns the heap that cache (which returns the number of pods
// it holds and how to stop it) keeps per pod after a GC.
func heapPerPod(n int, cache func() (int, func(), error)) (float64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // a second cycle frees what finalizers released in the first
	runtime.ReadMemStats(&before)
	got, stop, err := cache()
	if err != nil {
		return 0, err
	}
	defer stop()
	// Two cycles, as before: the second frees what the first moved to
	// sync.Pool's victim caches (the HTTP/2 transport's read buffers,
	// about 430 B a pod just after a sync), which no cache holds.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got != n {
		return 0, fmt.Errorf("the cache holds %d pods, want %d", got, n)
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), nil
}

// spawnkitPodCache syncs a fresh Registry's pod informer for ns.
func spawnkitPodCache(ctx context.Context, client kubernetes.Interface, ns string) (int, func(), error) {
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return 0, nil, err
	}
	pods, err := registry.Pods(ctx, ns)
	if err != nil {
		registry.Close()
		return 0, nil, err
	}
	stop := func() { pods.Release(); registry.Close() }
	if err := pods.WaitForSync(ctx); err != nil {
		stop()
		return 0, nil, err
	}
	list, err := pods.List(ctx, ns)
	if err != nil {
		stop()
		return 0, nil, err
	}
	return len(list), stop, nil
}

// rawPodCache syncs a plain pod informer for ns, as client-go's informer
// factory makes one: a namespace index, no transform.
func rawPodCache(ctx context.Context, client kubernetes.Interface, ns string) (int, func(), error) {
	inf := coreinformers.NewPodInformer(client, ns, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	stop, err := startInformer(ctx, inf, "pod")
	if err != nil {
		return 0, nil, err
	}
	return len(inf.GetStore().ListKeys()), stop, nil
}

// startInformer runs inf and waits until it has synced, woken by its
// sync (no polling, as spawnkit's WaitForSync: a 100 ms poll would weigh
// on the raw side of the timed rows); stop stops it and waits for it.
func startInformer(ctx context.Context, inf cache.SharedInformer, what string) (stop func(), err error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(runCtx) })
	stop = func() { cancel(); wg.Wait() }
	select {
	case <-inf.HasSyncedChecker().Done():
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, fmt.Errorf("waiting for the raw %s informer to sync: %w", what, context.Cause(ctx))
	}
}

// serverConfig is a hub's configuration for servers in ns, with what a
// real one sets (image, limits, a home volume, ids, a toleration), and
// scheduler "none": no scheduler binds the pods, so they stay exactly as
// the benchmark sets them.
func serverConfig(ns string) kubespawner.Config {
	return kubespawner.Config{
		Namespace: ns,
		Cmd:       []string{"jupyterhub-singleuser"},
		Pod: manifest.PodSpec{
			Image:         "quay.io/jupyter/scipy-notebook:2024-01-01",
			SchedulerName: "none",
			UID:           ptr.To[int64](1000), FSGID: ptr.To[int64](100),
			CPULimit: resource.MustParse("2"), MemLimit: resource.MustParse("4Gi"), MemGuarantee: resource.MustParse("1Gi"),
			Volumes: []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-{username}"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}},
			Tolerations: []corev1.Toleration{{Key: "hub.jupyter.org/dedicated", Operator: corev1.TolerationOpEqual,
				Value: "user", Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

// hubEnv is the environment JupyterHub hands a server on each start.
func hubEnv(user string) []corev1.EnvVar {
	prefix := "/user/" + user + "/"
	return []corev1.EnvVar{
		{Name: "JUPYTERHUB_API_TOKEN", Value: "4c8a1f0e9b7d4e2a8f6c3b1d0e9a7f5c"},
		{Name: "JUPYTERHUB_API_URL", Value: "http://hub.jhub.svc.cluster.local:8081/hub/api"},
		{Name: "JUPYTERHUB_ACTIVITY_URL", Value: "http://hub.jhub.svc.cluster.local:8081/hub/api/users/" + user + "/activity"},
		{Name: "JUPYTERHUB_BASE_URL", Value: "/"},
		{Name: "JUPYTERHUB_CLIENT_ID", Value: "jupyterhub-user-" + user},
		{Name: "JUPYTERHUB_HOST", Value: ""},
		{Name: "JUPYTERHUB_OAUTH_CALLBACK_URL", Value: prefix + "oauth_callback"},
		{Name: "JUPYTERHUB_OAUTH_SCOPES", Value: `["access:servers!server=` + user + `/"]`},
		{Name: "JUPYTERHUB_SERVER_NAME", Value: ""},
		{Name: "JUPYTERHUB_SERVICE_PREFIX", Value: prefix},
		{Name: "JUPYTERHUB_SERVICE_URL", Value: "http://0.0.0.0:8888" + prefix},
		{Name: "JUPYTERHUB_USER", Value: user},
	}
}

// benchUser names server i of a run: users of different runs (prefix)
// never share a pod name.
func benchUser(prefix string, i int) naming.Server {
	return naming.Server{Username: fmt.Sprintf("%s%05d", prefix, i), UserID: int64(i + 1)}
}

// createServerPods creates n servers' pods under cfg as spawner.Start
// would make them (spawner.Plan, so labels, owner annotations and the
// State record are spawnkit's), then gives each the status a kubelet
// reports for a running, ready server, with its own loopback pod IP.
// It uses a client of its own with a high rate limit: making the pods is
// setup, not what is measured. It returns the pods as last written.
func createServerPods(ctx context.Context, env *Env, cfg kubespawner.Config, prefix string, n int) ([]*corev1.Pod, error) {
	rc := rest.CopyConfig(env.Cluster.Config)
	rc.QPS, rc.Burst = 2000, 2000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	pods := make([]*corev1.Pod, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			srv := benchUser(prefix, i)
			objs, err := spawner.Plan(gctx, srv, cfg, spawner.StartOptions{Env: hubEnv(srv.Username), UserID: srv.UserID})
			if err != nil {
				return err
			}
			created, err := client.CoreV1().Pods(cfg.Namespace).Create(gctx, objs.Pod, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating pod %s: %w", objs.Pod.Name, err)
			}
			created.Status = runningStatus(fmt.Sprintf("127.250.%d.%d", i/250, i%250+1), cfg.Pod.Image)
			if pods[i], err = client.CoreV1().Pods(cfg.Namespace).UpdateStatus(gctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("setting pod %s running: %w", created.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "created %d running server pods in %s\n", n, time.Since(begin).Round(time.Millisecond))
	return pods, nil
}

// runningStatus is the status a kubelet reports for a running, ready
// server.
func runningStatus(ip, image string) corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	hostIP := "127.250.255.254"
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}}, StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized),
			cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		ContainerStatuses: []corev1.ContainerStatus{{Name: manifest.ContainerName, Ready: true, Started: ptr.To(true),
			Image: image, ImageID: "quay.io/jupyter/scipy-notebook@sha256:5f1b4c4e0c1d2b7e9a3f6d8c2b1a0e9f8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a",
			ContainerID: "containerd://9d5c0f1e2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d",
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
}

// cleanupNamespace deletes ns and waits until it is gone, even when ctx
// has ended (a run interrupted leaves the cluster clean too).
func cleanupNamespace(ctx context.Context, env *Env, ns string) {
	if err := env.DeleteNamespace(context.WithoutCancel(ctx), ns, 5*time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
	}
}

// sidesInOrder alternates which side goes first between repeats, so that
// neither always meets the cluster (or the heap) warmer.
func sidesInOrder(repeat int) []string {
	if repeat%2 == 1 {
		return []string{"spawnkit", "raw"}
	}
	return []string{"raw", "spawnkit"}
}

// count writes n with thousands separators.
func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
