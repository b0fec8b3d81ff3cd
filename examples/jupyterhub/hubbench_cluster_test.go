//go:build hubbench

package jupyterhub_test

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
)

// apiCounter is a reverse proxy in front of the API server, on loopback
// over TLS with HTTP/2 (as the API server serves), that counts the
// requests of the one client given its kubeconfig: the hub's KubeSpawner
// or the spawnkit-service. It forwards them with the cluster's admin
// credentials, the identity both clients would otherwise use; the
// client's own are dropped. Safe for concurrent use.
type apiCounter struct {
	srv        *httptest.Server
	kubeconfig string

	mu     sync.Mutex // guards counts
	counts map[string]int
}

// newAPICounter starts the proxy and writes its kubeconfig into dir. It
// is closed when the test ends.
func newAPICounter(t *testing.T, c *testcluster.Cluster, dir string) *apiCounter {
	t.Helper()
	target, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := &apiCounter{counts: map[string]int{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization")
		},
		Transport: rt,
		// Watches stream: every event goes on at once.
		FlushInterval: -1,
	}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := apiCallKey(r)
		a.mu.Lock()
		a.counts[key]++
		a.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	a.srv.EnableHTTP2 = true
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)

	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	a.kubeconfig = filepath.Join(dir, "counted-kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: counted
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: counted
  user: {}
contexts:
- name: counted
  context: {cluster: counted, user: counted, namespace: %s}
current-context: counted
`, a.srv.URL, base64.StdEncoding.EncodeToString(ca), namespace)
	if err := os.WriteFile(a.kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// total is how many requests the proxy has seen; byKey the same by
// "VERB resource".
func (a *apiCounter) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.counts {
		n += v
	}
	return n
}

func (a *apiCounter) byKey() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.counts))
	for k, v := range a.counts {
		out[k] = v
	}
	return out
}

// apiCallKey is "VERB resource" for a request to the API server: LIST and
// WATCH for a GET of a collection, the subresource after a slash.
func apiCallKey(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return r.Method + " " + r.URL.Path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return r.Method + " " + r.URL.Path
	}
	resource, verb := parts[0], r.Method
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	if verb == http.MethodGet && len(parts) == 1 {
		verb = "LIST"
		// kubernetes_asyncio sends watch=True.
		if w := r.URL.Query().Get("watch"); strings.EqualFold(w, "true") || w == "1" {
			verb = "WATCH"
		}
	}
	return verb + " " + resource
}

// clusterWatch follows the bench namespace's pods and events from the
// test's own connection to the API server (not the counted one): when
// each event was first seen, which user each pod belongs to, and how
// many pods there are. Its informers run until the test ends. Safe for
// concurrent use.
type clusterWatch struct {
	pods cache.SharedIndexInformer

	mu sync.Mutex // guards seen
	// seen is when each event was first seen, by eventKey.
	seen map[string]time.Time
}

// eventKey identifies an event as a progress message shows it: the pod
// (its UID: every run has pods of the same names, with the same events),
// the event's type and its message.
func eventKey(pod types.UID, typ, message string) string {
	return string(pod) + "\x00" + typ + "\x00" + message
}

func newClusterWatch(t *testing.T, c *testcluster.Cluster) *clusterWatch {
	t.Helper()
	w := &clusterWatch{seen: map[string]time.Time{}}
	pods := c.Client.CoreV1().Pods(namespace)
	w.pods = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{})
	events := c.Client.CoreV1().Events(namespace)
	evInformer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return events.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return events.Watch(ctx, o)
		},
	}, &corev1.Event{}, 0, cache.Indexers{})
	noteEvent := func(obj any) {
		now := time.Now()
		if e, ok := obj.(*corev1.Event); ok && e.InvolvedObject.Kind == "Pod" {
			k := eventKey(e.InvolvedObject.UID, e.Type, e.Message)
			w.mu.Lock()
			if _, dup := w.seen[k]; !dup {
				w.seen[k] = now
			}
			w.mu.Unlock()
		}
	}
	if _, err := evInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: noteEvent, UpdateFunc: func(_, obj any) { noteEvent(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{w.pods, evInformer} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	sync, syncCancel := context.WithTimeout(t.Context(), time.Minute)
	defer syncCancel()
	if !cache.WaitForCacheSync(sync.Done(), w.pods.HasSynced, evInformer.HasSynced) {
		t.Fatal("the bench's pod and event informers did not sync in a minute")
	}
	return w
}

// podCount is how many pods the namespace holds.
func (w *clusterWatch) podCount() int { return len(w.pods.GetStore().ListKeys()) }

// waitNoPods waits until the namespace holds no pod, checking every 50
// ms, and returns when it saw that.
func (w *clusterWatch) waitNoPods(ctx context.Context, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if w.podCount() == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d pods left in %s after %s", w.podCount(), namespace, timeout)
		case <-tick.C:
		}
	}
}

// eventSeen returns a function that says when the watch first saw the
// event a progress message of user's shows ("<time> [<type>] <message>",
// as both KubeSpawner and spawnkit write them), or false for a message
// that shows no event. The event is one of the user's pods that exist
// when eventSeen is called.
func (w *clusterWatch) eventSeen() func(user, message string) (time.Time, bool) {
	pods := map[string][]types.UID{}
	for _, obj := range w.pods.GetStore().List() {
		pod := obj.(*corev1.Pod)
		u := pod.Annotations[naming.AnnotationUsername]
		pods[u] = append(pods[u], pod.UID)
	}
	return func(user, message string) (time.Time, bool) {
		_, rest, ok := strings.Cut(message, " [")
		if !ok {
			return time.Time{}, false
		}
		typ, text, ok := strings.Cut(rest, "] ")
		if !ok {
			return time.Time{}, false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, uid := range pods[user] {
			if at, ok := w.seen[eventKey(uid, typ, text)]; ok {
				return at, true
			}
		}
		return time.Time{}, false
	}
}
