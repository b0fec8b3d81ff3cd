package spawner

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// watchCounter counts watch requests by resource and by whether they are
// namespaced.
type watchCounter struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

// countingTransport counts the watch requests it passes on to next.
type countingTransport struct {
	c    *watchCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	if req.URL.Query().Get("watch") == "true" {
		path := req.URL.Path // /api/v1[/namespaces/<ns>]/<resource>
		key := path[strings.LastIndex(path, "/")+1:]
		if strings.Contains(path, "/namespaces/") {
			key += " (namespaced)"
		}
		c.mu.Lock()
		c.n[key]++
		c.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}

func (c *watchCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// TestUserNamespacesWatchOnce starts servers for 200 users, each in its
// own namespace (each start reporting progress), through one registry,
// and counts the registry's watch requests: one pod watch and one event
// watch for all of them (two allowed for a watch that client-go
// restarts), none per namespace.
func TestUserNamespacesWatchOnce(t *testing.T) {
	c := testcluster.Require(t, cluster)
	const users = 200
	counter := &watchCounter{n: map[string]int{}}
	cfg := rest.CopyConfig(c.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{c: counter, next: rt} }
	reg, err := reflector.New(reflector.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	base := baseConfig("uns" + rand.String(5))
	base.EnableUserNamespaces = true
	spawners := make([]*Spawner, users)
	for i := range spawners {
		s, err := New(naming.Server{Username: fmt.Sprintf("user%d", i)}, Options{Client: c.Client, Registry: reg, Config: base})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		spawners[i] = s
	}
	ctx := ctxTimeout(t, 300*time.Second)
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(25)
	for _, s := range spawners {
		g.Go(func() error {
			// Each start reports progress, as a hub's do, so that the
			// event informer is needed too.
			opts := hubStart()
			opts.OnProgress = func(ProgressEvent) {}
			if _, err := s.Start(gctx, opts); err != nil {
				return fmt.Errorf("%s: %w", s.State().Namespace, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Starts in %d user namespaces: %s", users, users, time.Since(begin).Round(time.Millisecond))
	for _, s := range spawners {
		if st, err := s.Poll(ctx); err != nil || !st.Running {
			t.Fatalf("Poll of %s = %+v, %v", s.State().Namespace, st, err)
		}
	}
	got := counter.counts()
	t.Logf("watch requests: %v", got)
	for _, res := range []string{"pods", "events"} {
		if n := got[res]; n < 1 || n > 2 {
			t.Errorf("%d cluster-wide %s watches for %d users, want 1 (2 if restarted)", n, res, users)
		}
		if n := got[res+" (namespaced)"]; n != 0 {
			t.Errorf("%d namespaced %s watches, want none", n, res)
		}
	}

	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(25)
	for _, s := range spawners {
		g.Go(func() error { return s.Stop(gctx, StopOptions{Now: true}) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
