package spawner

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/naming"
)

// requestLog records the method and path of every request a client
// makes.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) RoundTrip(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.reqs = append(l.reqs, req.Method+" "+req.URL.Path)
		l.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.reqs)
	l.reqs = nil
	return out
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestStopIsOneRequest: a stop of a running server asks the API server
// once (the delete, with the cached pod's uid as precondition), as
// KubeSpawner's does; the owner check reads the cache.
func TestStopIsOneRequest(t *testing.T) {
	ns := newNamespace(t)
	var log requestLog
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = log.RoundTrip
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(naming.Server{Username: "ada"}, Options{Client: client, Registry: sharedRegistry(t), Config: baseConfig(ns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := s.Start(ctx, hubStart()); err != nil {
		t.Fatal(err)
	}
	log.take()
	if err := s.Stop(ctx, StopOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"DELETE /api/v1/namespaces/" + ns + "/pods/" + s.State().PodName}
	if got := log.take(); !slices.Equal(got, want) {
		t.Errorf("Stop made %q, want %q", got, want)
	}
	// A second stop finds no pod in the cache and asks the API server.
	if err := s.Stop(ctx, StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); len(got) != 1 || got[0] != "GET /api/v1/namespaces/"+ns+"/pods/"+s.State().PodName {
		t.Errorf("a stop of a stopped server made %q, want one GET", got)
	}
}
