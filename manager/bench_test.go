package manager

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/spawner"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// BenchmarkManagerRecovery creates SPAWNKIT_RECOVERY_SERVERS (default
// 10,000) running servers' pods on the API server, as Start would have
// made them (with their State record), on a node no kubelet serves, with
// a Running and Ready status. It then measures a new Manager's recovery
// after its informer has synced, and the heap the Manager holds per
// recovered server (its entries, Spawners and statuses; the pod cache is
// counted before the Manager exists and left out).
//
//	go test -run '^$' -bench ManagerRecovery -benchtime 1x ./spawner
func BenchmarkManagerRecovery(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("SPAWNKIT_RECOVERY_SERVERS")); err == nil && v > 0 {
		n = v
	}
	ns := newNamespace(b)
	ctx := context.Background()
	rc := rest.CopyConfig(cluster.Config)
	rc.QPS, rc.Burst = 2000, 2000
	client := kubernetes.NewForConfigOrDie(rc)
	cfg := baseConfig(ns)
	createPods(b, ctx, client, cfg, n)

	for b.Loop() {
		reg, err := reflector.New(reflector.Options{Config: rc})
		if err != nil {
			b.Fatal(err)
		}
		warm, err := reg.Pods(ctx, ns)
		if err != nil {
			b.Fatal(err)
		}
		if err := warm.WaitForSync(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := New(Options{Client: client, Registry: reg, Config: cfg})
		if err != nil {
			b.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		begin := time.Now()
		go func() { done <- m.Start(mctx) }()
		if err := m.waitReady(ctx); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(begin)
		runtime.GC()
		runtime.ReadMemStats(&after)
		running := 0
		for _, st := range m.List() {
			if st.Phase == PhaseRunning && st.URL != "" {
				running++
			}
		}
		if running != n {
			b.Fatalf("recovered %d running servers of %d", running, n)
		}
		b.ReportMetric(float64(elapsed.Milliseconds()), "ms/recovery")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/server")
		b.Logf("recovered %d servers in %s after sync; %d B of heap per server", n, elapsed.Round(time.Millisecond),
			(after.HeapAlloc-before.HeapAlloc)/uint64(n))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		warm.Release()
	}
	// The namespace controller removes the pods in the background.
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Error(err)
	}
}

// createPods makes n pods the way Start would, on a node no kubelet
// serves, and marks them Running and Ready.
func createPods(b *testing.B, ctx context.Context, client kubernetes.Interface, cfg kubespawner.Config, n int) {
	b.Helper()
	begin := time.Now()
	// The node exists (so the pod garbage collector leaves its pods
	// alone) but no kwok kubelet serves it (so nothing changes them).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "no-kubelet-here"}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	for range 32 {
		wg.Go(func() {
			for i := range work {
				srv := naming.Server{Username: fmt.Sprintf("rec%05d", i)}
				o, err := spawner.Plan(ctx, srv, cfg, spawner.StartOptions{})
				if err == nil {
					o.Pod.Spec.NodeName = "no-kubelet-here"
					var p *corev1.Pod
					if p, err = client.CoreV1().Pods(cfg.Namespace).Create(ctx, o.Pod, metav1.CreateOptions{}); err == nil {
						p.Status.PodIP = fmt.Sprintf("127.250.%d.%d", i/250, i%250+1)
						markReady(p)
						_, err = client.CoreV1().Pods(cfg.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.Logf("created %d running pods in %s", n, time.Since(begin).Round(time.Millisecond))
}
