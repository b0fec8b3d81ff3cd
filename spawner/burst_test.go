package spawner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// podCreates wraps the cluster's config so that pod creates are counted
// (sent: every POST; made: those the API server answered 201 Created),
// and, with delay, answered late: the API server has made the pod, but
// the client has given up by the time the answer comes.
func podCreates(sent, made *atomic.Int64, delayFirst time.Duration) *rest.Config {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 50, 100
	var delayed atomic.Bool
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			isCreate := r.Method == http.MethodPost && len(r.URL.Path) > 5 && r.URL.Path[len(r.URL.Path)-5:] == "/pods"
			if isCreate {
				sent.Add(1)
			}
			resp, err := rt.RoundTrip(r)
			if isCreate && err == nil && resp.StatusCode == http.StatusCreated {
				made.Add(1)
			}
			if isCreate && delayFirst > 0 && err == nil && !delayed.Swap(true) {
				select {
				case <-time.After(delayFirst):
				case <-r.Context().Done():
				}
				if r.Context().Err() != nil {
					resp.Body.Close()
					return nil, r.Context().Err()
				}
			}
			return resp, err
		})
	}
	return cfg
}

// TestCreateThatLandsAfterTheClientGaveUp: the first pod create reaches
// the API server but its answer comes after k8s_api_request_timeout. The
// retry finds the pod by its start id and keeps it: one pod, one start.
func TestCreateThatLandsAfterTheClientGaveUp(t *testing.T) {
	ns := newNamespace(t)
	var creates, made atomic.Int64
	rc := podCreates(&creates, &made, 2*time.Second)
	client := kubernetes.NewForConfigOrDie(rc)
	cfg := baseConfig(ns)
	cfg.K8sAPIRequestTimeout = 1
	s, err := New(naming.Server{Username: "late"}, Options{Client: client, Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Annotations[naming.AnnotationStartID] != s.State().StartID {
		t.Fatalf("%d pods; want the one this start made", len(pods.Items))
	}
	if creates.Load() < 2 {
		t.Errorf("%d creates: the late answer was not retried", creates.Load())
	}
	if made.Load() != 1 {
		t.Errorf("the API server made %d pods; want 1", made.Load())
	}
	t.Logf("creates sent: %d, pods: 1", creates.Load())
}

// TestStartBurst starts many servers at once on one Registry with QPS 50
// and burst 100 (SPAWNKIT_BURST, default 200; the figure is
// 1,000): no start may fail, and each makes exactly one pod. A create
// whose answer outlasts k8s_api_request_timeout on a loaded machine is
// sent again (and finds its pod by start id), so creates sent may exceed
// the starts: what counts is the pods in the namespace afterwards.
func TestStartBurst(t *testing.T) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("SPAWNKIT_BURST")); err == nil && v > 0 {
		n = v
	}
	ns := newNamespace(t)
	var creates, made atomic.Int64
	rc := podCreates(&creates, &made, 0)
	client := kubernetes.NewForConfigOrDie(rc)
	reg, err := reflector.New(reflector.Options{Config: rc})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewFactory(Options{Client: client, Registry: reg, Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Minute)
	var failures atomic.Int64
	var wg sync.WaitGroup
	spawners := make([]*Spawner, n)
	begin := time.Now()
	for i := range n {
		s, err := b.New(naming.Server{Username: fmt.Sprintf("burst%04d", i)})
		if err != nil {
			t.Fatal(err)
		}
		spawners[i] = s
		wg.Go(func() {
			if _, err := s.Start(ctx, hubStart()); err != nil {
				failures.Add(1)
				t.Errorf("start %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	t.Logf("%d concurrent Starts (QPS 50, burst 100): %d failures, %d creates sent (%d answered 201 in time), %s",
		n, failures.Load(), creates.Load(), made.Load(), elapsed.Round(time.Millisecond))
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]bool{}
	for _, s := range spawners {
		starts[s.State().StartID] = true
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || !starts[p.Annotations[naming.AnnotationStartID]] {
			t.Errorf("pod %s: deleting=%v, start id %q not one of the burst's", p.Name, p.DeletionTimestamp != nil, p.Annotations[naming.AnnotationStartID])
		}
	}
	if len(pods.Items) != n {
		t.Errorf("%d pods in the namespace after %d starts", len(pods.Items), n)
	}
	for _, s := range spawners {
		s.Close()
	}
	// The namespace controller removes the pods in the background (one
	// DeleteCollection of 1,000 pods outlasts the API server's request
	// timeout).
	if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// slowBody holds back a request body, so that from the client's side the
// request is in flight (it has a connection) but unanswered: a slow API
// server.
type slowBody struct {
	io.ReadCloser
	ctx   context.Context
	delay time.Duration
	once  sync.Once
}

func (b *slowBody) Read(p []byte) (int, error) {
	var err error
	b.once.Do(func() {
		select {
		case <-time.After(b.delay):
		case <-b.ctx.Done():
			err = b.ctx.Err()
		}
	})
	if err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// TestSlowAPIServerIsReachedByAGrowingTimeout: every pod create takes
// 1.5 s to reach the API server and k8s_api_request_timeout is 1 s. A
// fixed timeout would fail every try; the second try has 2 s and lands.
func TestSlowAPIServerIsReachedByAGrowingTimeout(t *testing.T) {
	ns := newNamespace(t)
	var tries atomic.Int64
	rc := rest.CopyConfig(cluster.Config)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods") && r.Body != nil {
				tries.Add(1)
				r = r.Clone(r.Context())
				r.Body = &slowBody{ReadCloser: r.Body, ctx: r.Context(), delay: 1500 * time.Millisecond}
			}
			return rt.RoundTrip(r)
		})
	}
	cfg := baseConfig(ns)
	cfg.K8sAPIRequestTimeout = 1
	cfg.K8sAPIRequestRetryTimeout = 20
	s, err := New(naming.Server{Username: "slow-api"}, Options{Client: kubernetes.NewForConfigOrDie(rc), Registry: sharedRegistry(t), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatalf("Start against an API server slower than k8s_api_request_timeout: %v", err)
	}
	if n := tries.Load(); n < 2 {
		t.Errorf("%d create tries; the first (1 s for a 1.5 s request) should have timed out", n)
	}
	t.Logf("create tries: %d", tries.Load())
	if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
		t.Fatal(err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
