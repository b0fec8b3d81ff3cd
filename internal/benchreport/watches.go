package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// watchUsers is how many users, each in a namespace of their own, the
// watches row starts servers for; -quick uses 20.
const watchUsers = 200

// measureWatches counts the watch requests a hub opens in user-namespace
// mode (enable_user_namespaces): one server per user, each in its own
// namespace. spawnkit's side is a Registry and a manager.Manager with
// EnableUserNamespaces spawning every server until the Manager reports it
// running; raw is what a per-namespace design does: for each user a
// namespace, a pod informer and an event informer on it, and a pod
// created and followed until Ready. Each side's client (env.Config, -client-qps;
// none by default) counts the GET requests with watch=true that leave it, through a
// RoundTripper wrapped around its transport (rest.Config.Wrap). The count
// depends on the design, not on timing, so it is taken once, not per
// repeat.
func measureWatches(ctx context.Context, env *Env, _ int) ([]Measure, error) {
	users := watchUsers
	if env.Quick {
		users = 20
	}
	base, err := env.NewNamespace(ctx, "watches")
	if err != nil {
		return nil, err
	}
	defer cleanupNamespace(ctx, env, base)
	sk, err := spawnkitWatches(ctx, env, base, users)
	if err != nil {
		return nil, fmt.Errorf("spawnkit: %w", err)
	}
	raw, err := rawWatches(ctx, env, base, users)
	if err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	fmt.Fprintf(os.Stderr, "watches for %d users in their own namespaces: spawnkit %d, raw %d\n", users, sk, raw)
	m := Measure{
		Name: fmt.Sprintf("watches opened, %d users in their own namespaces (Registry+Manager vs per-namespace informers)", users),
		Unit: "watches", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 2},
	}
	m.Add(float64(sk), float64(raw))
	return []Measure{m}, nil
}

// watchCounter counts the watch requests of the clients built from its
// config.
type watchCounter struct{ n atomic.Int64 }

// client returns a client built from env's config that counts its watch
// requests in c.
func (c *watchCounter) client(env *Env) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return watchCountingTransport{c: c, next: rt} })
	return kubernetes.NewForConfig(cfg)
}

type watchCountingTransport struct {
	c    *watchCounter
	next http.RoundTripper
}

func (t watchCountingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if w := req.URL.Query().Get("watch"); req.Method == http.MethodGet && (w == "true" || w == "1") {
		t.c.n.Add(1)
	}
	return t.next.RoundTrip(req)
}

// spawnkitWatches spawns users servers through a Manager in
// user-namespace mode and returns the watches its client opened by the
// time all run. It stops the servers and deletes their namespaces.
func spawnkitWatches(ctx context.Context, env *Env, base string, users int) (int64, error) {
	var counter watchCounter
	client, err := counter.client(env)
	if err != nil {
		return 0, err
	}
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return 0, err
	}
	defer registry.Close()
	cfg := kubespawner.Config{
		Namespace: base, EnableUserNamespaces: true, UserNamespaceTemplate: "{namespace}-{username}",
		Cmd: []string{"jupyterhub-singleuser"}, Pod: manifest.PodSpec{Image: image},
	}
	mgr, err := manager.New(manager.Options{Client: client, Registry: registry, Config: cfg})
	if err != nil {
		return 0, err
	}
	servers := make([]string, users)
	for i := range servers {
		servers[i] = benchUser("w", i).Username
	}
	running := newArrivals(servers)
	var namespaces sync.Map // user namespaces, for the cleanup
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watcher sync.WaitGroup
	defer func() { stopWatching(); watcher.Wait() }()
	statuses := mgr.Watch(watchCtx)
	watcher.Go(func() {
		for st := range statuses {
			namespaces.Store(st.State.Namespace, true)
			if st.Phase == manager.PhaseRunning {
				running.see(st.User, time.Now())
			}
		}
	})
	stopManager := runManager(ctx, mgr)
	defer func() {
		stopManager()
		var nss []string
		namespaces.Range(func(ns, _ any) bool { nss = append(nss, ns.(string)); return true })
		deleteNamespaces(ctx, env, nss)
	}()
	begin := time.Now()
	for i := range users {
		srv := benchUser("w", i)
		if _, _, err := mgr.Spawn(ctx, srv, manager.SpawnOptions{Env: hubEnv(srv.Username)}); err != nil {
			return 0, fmt.Errorf("spawning %s: %w", srv.Username, err)
		}
	}
	if err := running.wait(ctx, 5*time.Minute); err != nil {
		return 0, fmt.Errorf("servers running: %w", err)
	}
	watches := counter.n.Load()
	fmt.Fprintf(os.Stderr, "spawnkit: %d servers running in %s\n", users, time.Since(begin).Round(time.Millisecond))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(25)
	for i := range users {
		g.Go(func() error {
			_, err := mgr.Stop(gctx, benchUser("w", i), spawner.StopOptions{Now: true})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("stopping the servers: %w", err)
	}
	return watches, nil
}

// rawWatches does for each of users users what a per-namespace design
// does: a namespace, a pod informer and an event informer on it, and a pod
// followed until Ready; it returns the watches its client opened by the
// time all pods are Ready. Up to 100 users go at once, as the Manager's
// default spawn limit. It stops the informers and deletes the namespaces.
func rawWatches(ctx context.Context, env *Env, base string, users int) (int64, error) {
	var counter watchCounter
	client, err := counter.client(env)
	if err != nil {
		return 0, err
	}
	var mu sync.Mutex // guards stops and nss
	var stops []func()
	var nss []string
	defer func() {
		for _, stop := range stops {
			stop()
		}
		deleteNamespaces(ctx, env, nss)
	}()
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(100)
	for i := range users {
		g.Go(func() error {
			user := benchUser("w", i).Username
			ns, err := client.CoreV1().Namespaces().Create(gctx, &corev1.Namespace{
				ObjectMeta: metav1.ObjectMeta{Name: base + "-raw-" + user}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating a namespace: %w", err)
			}
			mu.Lock()
			nss = append(nss, ns.Name)
			mu.Unlock()
			ready := make(chan struct{})
			var once sync.Once
			pods := coreinformers.NewPodInformer(client, ns.Name, 0, cache.Indexers{})
			seen := func(obj any) {
				if pod, ok := obj.(*corev1.Pod); ok && podIsReady(pod) {
					once.Do(func() { close(ready) })
				}
			}
			if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
			}); err != nil {
				return err
			}
			events := coreinformers.NewEventInformer(client, ns.Name, 0, cache.Indexers{})
			for _, inf := range []cache.SharedIndexInformer{pods, events} {
				stop, err := startInformer(ctx, inf, "per-namespace")
				if err != nil {
					return err
				}
				mu.Lock()
				stops = append(stops, stop)
				mu.Unlock()
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user, Labels: map[string]string{"component": "singleuser-server"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: manifest.ContainerName, Image: image, Command: []string{"jupyterhub-singleuser"},
					Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}},
				}}},
			}
			if _, err := client.CoreV1().Pods(ns.Name).Create(gctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating pod %s/%s: %w", ns.Name, pod.Name, err)
			}
			select {
			case <-ready:
				return nil
			case <-gctx.Done():
				return fmt.Errorf("waiting for pod %s/%s to be ready: %w", ns.Name, pod.Name, context.Cause(gctx))
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	fmt.Fprintf(os.Stderr, "raw: %d pods ready in %s\n", users, time.Since(begin).Round(time.Millisecond))
	return counter.n.Load(), nil
}

// deleteNamespaces deletes namespaces and waits, up to five minutes,
// until all are gone (one LIST a second, not a GET per namespace), even
// when ctx has ended.
func deleteNamespaces(ctx context.Context, env *Env, namespaces []string) {
	ctx = context.WithoutCancel(ctx)
	left := map[string]bool{}
	for _, ns := range namespaces {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "benchreport: deleting namespace %s: %v\n", ns, err)
			continue
		}
		left[ns] = true
	}
	remaining := len(left)
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // try again
		}
		remaining = 0
		for _, ns := range list.Items {
			if left[ns.Name] {
				remaining++
			}
		}
		return remaining == 0, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %d of %d namespaces not deleted yet: %v\n", remaining, len(left), err)
	}
}
