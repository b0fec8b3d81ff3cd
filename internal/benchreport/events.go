package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/reflector"
)

// floodEvents is the event-flood row's namespace event count
// (KubeSpawner #913: a hub out of memory at about 35,000); -quick uses
// a tenth.
const floodEvents = 50_000

// measureEventFlood measures the heap an event cache keeps for a
// namespace flooded with events: half about 10 server pods (that the
// Registry's pod informer caches), half about 2,500 other pods. spawnkit's
// side is Registry.Pods and Registry.Events of the namespace synced (the
// bounded event store: the newest 100 per server pod, a bounded hold for
// others); raw is a plain client-go event informer, as KubeSpawner's
// event reflector keeps every event. Each side is synced from the API
// server and measured alone after a GC; the order alternates.
func measureEventFlood(ctx context.Context, env *Env, repeats int) ([]Measure, error) {
	n := floodEvents
	if env.Quick {
		n /= 10
	}
	ns, err := env.NewNamespace(ctx, "flood")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, ns)
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = 5000, 5000
	client, err := kubernetes.NewForConfig(fast)
	if err != nil {
		return nil, err
	}
	servers, err := createServerPods(ctx, env, serverConfig(ns), "flood", 10)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			pod, uid := fmt.Sprintf("other-%d", i%2500), types.UID(fmt.Sprintf("other-uid-%d", i%2500))
			if i%2 == 0 {
				p := servers[(i/2)%len(servers)]
				pod, uid = p.Name, p.UID
			}
			at := metav1.NewTime(began.Add(time.Duration(i) * time.Millisecond))
			_, err := client.CoreV1().Events(ns).Create(gctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod, 0x17a0000000+i)},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: uid, APIVersion: "v1", FieldPath: "spec.containers{notebook}"},
				Reason:         "BackOff", Type: corev1.EventTypeWarning, Count: 1,
				Message:        fmt.Sprintf("Back-off pulling image %q (attempt %d)", "quay.io/jupyter/scipy-notebook:2024-01-01", i),
				Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
				FirstTimestamp: at, LastTimestamp: at,
			}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("creating %d events: %w", n, err)
	}
	fmt.Fprintf(os.Stderr, "event flood: %d events created in %s\n", n, time.Since(began).Round(time.Second))
	m := Measure{
		Name: fmt.Sprintf("event cache heap, %s events in a namespace, half about 10 server pods (Registry.Events vs plain event informer)", count(n)),
		Unit: "MiB", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 16},
	}
	for r := range repeats {
		var sk, raw float64
		for _, side := range sidesInOrder(r) {
			cacheFn := func() (int, func(), error) { return spawnkitEventCache(ctx, env.Client, ns) }
			if side == "raw" {
				cacheFn = func() (int, func(), error) { return rawEventCache(ctx, env.Client, ns) }
			}
			bytes, err := heapPerPod(1, cacheFn) // n = 1: the heap the cache keeps
			if err != nil {
				return nil, fmt.Errorf("repeat %d, %s: %w", r+1, side, err)
			}
			mib := bytes / (1 << 20)
			if side == "raw" {
				raw = mib
			} else {
				sk = mib
			}
			fmt.Fprintf(os.Stderr, "repeat %d: %-8s %.1f MiB for %d events\n", r+1, side, mib, n)
		}
		m.Add(sk, raw)
	}
	return []Measure{m}, nil
}

// spawnkitEventCache syncs a fresh Registry's pod and event informers of
// ns; it returns 1 (heapPerPod's count, for the whole cache) once both
// have synced.
func spawnkitEventCache(ctx context.Context, client kubernetes.Interface, ns string) (int, func(), error) {
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return 0, nil, err
	}
	pods, err := registry.Pods(ctx, ns)
	if err != nil {
		registry.Close()
		return 0, nil, err
	}
	if err := pods.WaitForSync(ctx); err != nil {
		pods.Release()
		registry.Close()
		return 0, nil, err
	}
	events, err := registry.Events(ctx, ns)
	if err != nil {
		pods.Release()
		registry.Close()
		return 0, nil, err
	}
	stop := func() { events.Release(); pods.Release(); registry.Close() }
	if err := events.WaitForSync(ctx); err != nil {
		stop()
		return 0, nil, err
	}
	return 1, stop, nil
}

// rawEventCache syncs a plain event informer of ns (the pod events, as
// spawnkit's selects them), as client-go's informer factory makes one.
func rawEventCache(ctx context.Context, client kubernetes.Interface, ns string) (int, func(), error) {
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "events", ns, func(o *metav1.ListOptions) {
		o.FieldSelector = "involvedObject.kind=Pod"
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.Event{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	stop, err := startInformer(ctx, inf, "event")
	if err != nil {
		return 0, nil, err
	}
	return 1, stop, nil
}
