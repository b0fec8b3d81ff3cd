package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// rawSpawns is the minimum client-go does for the same result as
// Spawner.Start: create a pod and wait until it is Ready, seen through an
// informer on the namespace that was synced before the clock started.
func rawSpawns(ctx context.Context, client kubernetes.Interface, ns string, n int) (time.Duration, error) {
	ready := make(map[string]chan struct{}, n) // read-only once the informer runs
	for i := range n {
		ready[rawName(i)] = make(chan struct{})
	}
	closed := map[string]bool{} // only the handler goroutine touches it
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || closed[pod.Name] || !podReady(pod) {
			return
		}
		if ch, ok := ready[pod.Name]; ok {
			closed[pod.Name] = true
			close(ch)
		}
	}
	inf := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", ns, fields.Everything()),
		&corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return 0, err
	}
	infCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(infCtx) })
	defer func() { cancel(); wg.Wait() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return 0, fmt.Errorf("the raw informer did not sync: %w", ctx.Err())
	}
	return spawnAll(ctx, n, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: rawName(i), Labels: map[string]string{"component": "singleuser-server"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "notebook", Image: image, Command: []string{"jupyterhub-singleuser"},
				Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}},
			}}},
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		select {
		case <-ready[pod.Name]:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s to be ready: %w", pod.Name, ctx.Err())
		}
	})
}

func rawName(i int) string { return fmt.Sprintf("raw-%04d", i) }

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// spawnkitSpawns starts n servers with spawner.Spawner.Start, sharing one
// Registry whose informers for the namespace are synced before the clock
// starts, as a running hub's would be.
func spawnkitSpawns(ctx context.Context, client kubernetes.Interface, ns string, n int) (time.Duration, error) {
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return 0, err
	}
	defer registry.Close()
	pods, err := registry.Pods(ctx, ns)
	if err != nil {
		return 0, err
	}
	defer pods.Release()
	events, err := registry.Events(ctx, ns)
	if err != nil {
		return 0, err
	}
	defer events.Release()
	if err := pods.WaitForSync(ctx); err != nil {
		return 0, err
	}
	if err := events.WaitForSync(ctx); err != nil {
		return 0, err
	}
	config := spawner.Config{Namespace: ns, Cmd: []string{"jupyterhub-singleuser"}, Pod: manifest.PodSpec{Image: image}}
	spawners := make([]*spawner.Spawner, n)
	for i := range spawners {
		srv := naming.Server{Username: fmt.Sprintf("user%04d", i), UserID: int64(i + 1)}
		if spawners[i], err = spawner.New(srv, spawner.Options{Client: client, Registry: registry, Config: config}); err != nil {
			return 0, err
		}
		defer spawners[i].Close()
	}
	return spawnAll(ctx, n, func(ctx context.Context, i int) error {
		if _, err := spawners[i].Start(ctx, spawner.StartOptions{}); err != nil {
			return fmt.Errorf("starting %s: %w", spawners[i].State().PodName, err)
		}
		return nil
	})
}
