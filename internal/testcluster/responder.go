package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// BootDelayAnnotation delays a pod's responder (Options.Responders): for
// this long (a Go duration string, "3s") after the responder sees the pod
// Running, connections to the pod's ports are refused, as while a real
// server boots. Readiness is not delayed; the pod turns Ready as usual.
const BootDelayAnnotation = "testcluster.spawnkit.dev/boot-delay"

// HoldAnnotation keeps a pod's ports refusing connections for as long as
// the pod has it (any value), however long that is; removing it opens
// them (after BootDelayAnnotation's delay, if any). A test that must look
// at a server while it is still booting, with no clock to race, holds it
// and lets go when done. Readiness is not affected.
const HoldAnnotation = "testcluster.spawnkit.dev/hold"

// Answer is the JSON body a responder returns, with status 200, for every
// request to a pod's port.
type Answer struct {
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	IP        string `json:"ip"`
	// Path is the request's URL path.
	Path string `json:"path"`
}

// responders stands in for the servers in simulated pods: for each pod that
// is Running with a pod IP it listens on podIP:containerPort for every TCP
// port of every container and answers with an Answer, until the pod stops
// running or is deleted. It learns about pods from an informer on all
// namespaces. run owns every goroutine it starts and returns only after
// all of them have ended.
type responders struct {
	informer cache.SharedIndexInformer
	log      *log.Logger
	// retry is the pause between attempts to listen on an address that is
	// still in use: kwok reuses a deleted pod's IP, possibly before the old
	// pod's listener has closed.
	retry time.Duration

	mu sync.Mutex // guards servers
	// servers holds the serving pods by UID: a pod re-created with the same
	// name (or given a reused IP) is a new pod with its own responder.
	servers map[types.UID]*podServer
	// wg counts the goroutines of every podServer.
	wg sync.WaitGroup
}

// podServer is one pod's set of listeners; stop ends them.
type podServer struct {
	ip   string
	stop context.CancelFunc
}

// startResponders starts the responders and waits until they have seen
// every existing pod. They run until Stop, not until ctx ends: ctx bounds
// start-up only.
func (c *Cluster) startResponders(ctx context.Context) error {
	f, err := os.Create(filepath.Join(c.LogDir, "responders.log"))
	if err != nil {
		return fmt.Errorf("creating log for the responders: %w", err)
	}
	c.respondersLog = f
	r, err := newResponders(c.Client, log.New(f, "", log.LstdFlags|log.Lmicroseconds))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.stopResponders, c.respondersDone = cancel, make(chan struct{})
	var runErr error
	go func() {
		defer close(c.respondersDone)
		runErr = r.run(runCtx)
	}()
	return c.waitFor(ctx, 60*time.Second, "the responders' pod informer to sync", func(context.Context) (bool, error) {
		select {
		case <-c.respondersDone:
			return false, fmt.Errorf("the responders stopped: %w", runErr)
		default:
			return r.hasSynced(), nil
		}
	})
}

func newResponders(client kubernetes.Interface, logger *log.Logger) (*responders, error) {
	informer, err := allPodsInformer(client)
	if err != nil {
		return nil, fmt.Errorf("the responders' informer: %w", err)
	}
	return &responders{
		informer: informer,
		log:      logger,
		retry:    200 * time.Millisecond,
		servers:  map[types.UID]*podServer{},
	}, nil
}

// allPodsInformer is an informer on every pod of the cluster, for the
// simulated kubelet's parts (responders, finisher). Managed fields are
// most of a pod's bytes and none of what they read, so they are dropped.
func allPodsInformer(client kubernetes.Interface) (cache.SharedIndexInformer, error) {
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, opts)
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if err := informer.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("setting the transform: %w", err)
	}
	return informer, nil
}

// run serves pods until ctx ends, then stops every listener and returns
// once every goroutine has ended.
func (r *responders) run(ctx context.Context) error {
	// The handler is registered before the informer runs, so it sees every
	// pod, those already Running included. Informer handlers are called
	// one at a time, so sync never races with itself; it only starts and
	// cancels listeners, which is quick.
	if _, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.sync(ctx, obj) },
		UpdateFunc: func(_, obj any) { r.sync(ctx, obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.stopPod(pod.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("adding the responders' event handler: %w", err)
	}
	// RunWithContext returns after its handlers have stopped being
	// called, so no listener starts after the loop below.
	r.informer.RunWithContext(ctx)
	r.mu.Lock()
	for uid := range r.servers {
		r.servers[uid].stop()
		delete(r.servers, uid)
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// hasSynced reports whether run has seen every pod that existed when it
// started.
func (r *responders) hasSynced() bool { return r.informer.HasSynced() }

// sync starts or stops the pod's responder to match its state. The pod
// comes from the informer's cache and is only read.
func (r *responders) sync(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	_, held := pod.Annotations[HoldAnnotation]
	serve := pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && !held
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.servers[pod.UID]
	if cur != nil && (!serve || cur.ip != pod.Status.PodIP) {
		cur.stop()
		delete(r.servers, pod.UID)
		cur = nil
	}
	if serve && cur == nil {
		r.servers[pod.UID] = r.start(ctx, pod)
	}
}

func (r *responders) stopPod(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.servers[uid]; s != nil {
		s.stop()
		delete(r.servers, uid)
	}
}

// start begins serving the pod's ports. Called with r.mu held.
func (r *responders) start(ctx context.Context, pod *corev1.Pod) *podServer {
	ctx, cancel := context.WithCancel(ctx)
	s := &podServer{ip: pod.Status.PodIP, stop: cancel}
	name := pod.Namespace + "/" + pod.Name
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !ip.IsLoopback() {
		// Pod IPs come from a loopback range; anything else would be an
		// address on a real network, which this package never touches.
		r.log.Printf("%s: not serving: pod IP %q is not a loopback address", name, pod.Status.PodIP)
		return s
	}
	delay := time.Duration(0)
	if v, ok := pod.Annotations[BootDelayAnnotation]; ok {
		if delay, err = time.ParseDuration(v); err != nil {
			r.log.Printf("%s: ignoring %s=%q: %v", name, BootDelayAnnotation, v, err)
			delay = 0
		}
	}
	answer := Answer{Pod: pod.Name, Namespace: pod.Namespace, IP: pod.Status.PodIP}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
				continue
			}
			addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.ContainerPort)))
			r.wg.Go(func() { r.serve(ctx, name, addr, delay, answer) })
		}
	}
	return s
}

// serve waits out the boot delay, listens on addr (retrying while the
// address is in use) and answers until ctx ends.
func (r *responders) serve(ctx context.Context, name, addr string, delay time.Duration, answer Answer) {
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	var lc net.ListenConfig
	var ln net.Listener
	for attempt := 1; ; attempt++ {
		var err error
		if ln, err = lc.Listen(ctx, "tcp4", addr); err == nil {
			if attempt > 1 {
				r.log.Printf("%s: listening on %s after %d attempts", name, addr, attempt)
			}
			break
		}
		if attempt == 1 {
			r.log.Printf("%s: cannot listen on %s yet, retrying every %s: %v", name, addr, r.retry, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.retry):
		}
	}
	srv := &http.Server{
		Handler:           answerHandler(answer),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          r.log,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		// Close, not Shutdown: a stopped pod's server is gone at once,
		// open connections included.
		_ = srv.Close()
		<-served
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			r.log.Printf("%s: serving %s: %v", name, addr, err)
		}
	}
}

func answerHandler(a Answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body := a // a copy: requests are served concurrently
		body.Path = req.URL.Path
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	})
}
