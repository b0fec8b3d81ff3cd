package orphan

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/reflector"
)

// podLists counts the pod LISTs sent through a transport: plain ones, and
// the watches with sendInitialEvents that an informer lists by (client-go's
// WatchListClient); and, apart, every pod watch the server accepted.
type podLists struct {
	next           http.RoundTripper
	lists, watches *atomic.Int64
}

func (c podLists) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/pods") &&
		(q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true") {
		c.lists.Add(1)
	}
	resp, err := c.next.RoundTrip(req)
	// A watch the API server accepted (a server that refuses streaming
	// lists, as 1.33's, answers the first one 422).
	if err == nil && resp.StatusCode == http.StatusOK &&
		req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/pods") && q.Get("watch") == "true" {
		c.watches.Add(1)
	}
	return resp, err
}

func TestListFromRegistry(t *testing.T) {
	testcluster.Require(t, cluster)
	ns, oldNS, _, known := scenario(t)
	var lists, watches atomic.Int64
	cfg := rest.CopyConfig(cluster.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return podLists{next: rt, lists: &lists, watches: &watches}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := List(t.Context(), known, Options{Client: cluster.Client})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		held       []string // namespaces of the pod informers held; "" is all
		namespaces []string // Options.Namespaces
		lists      bool     // whether the pods must be LISTed
	}{
		{name: "all-namespaces informer, no namespace given", held: []string{metav1.NamespaceAll}},
		{name: "all-namespaces informer, namespaces given", held: []string{metav1.NamespaceAll}, namespaces: []string{ns, oldNS}},
		{name: "namespace informers, namespaces given", held: []string{ns, oldNS}, namespaces: []string{ns, oldNS}},
		{name: "namespace informer, no namespace given", held: []string{ns}, lists: true},
		{name: "no informer held", lists: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r, err := reflector.New(reflector.Options{Config: cfg, PodLabelSelector: DefaultSelector})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, h := range tc.held {
				pods, err := r.Pods(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				defer pods.Release()
				if err := pods.WaitForSync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Where the server does not stream the initial list (1.33),
			// an informer watches only after it has synced: wait for
			// each held one's watch before counting List's requests.
			for watches.Load() < int64(len(tc.held)) {
				select {
				case <-ctx.Done():
					t.Fatalf("%d pod watches for %d informers held", watches.Load(), len(tc.held))
				case <-time.After(10 * time.Millisecond):
				}
			}
			lists.Store(0)
			watches.Store(0)
			got, err := List(ctx, known, Options{Client: client, Namespaces: tc.namespaces, Registry: r})
			if err != nil {
				t.Fatal(err)
			}
			if n := lists.Load(); (n > 0) != tc.lists {
				t.Errorf("%d pod LISTs; want them: %v", n, tc.lists)
			}
			if n := watches.Load(); n != 0 {
				t.Errorf("%d pod watches: List must never start an informer", n)
			}
			if a, b := summary(got, ns, oldNS), summary(want, ns, oldNS); !slices.Equal(a, b) || len(a) == 0 {
				t.Errorf("with the registry %v, by LIST %v", a, b)
			}
			if status := r.Status(); len(status) != len(tc.held) {
				t.Errorf("List left %d informers running, want the %d held: %v", len(status), len(tc.held), status)
			}
		})
	}
}
