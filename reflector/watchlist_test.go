package reflector

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestWatchListWhereServed: informers ask for a streaming initial list
// (WatchList) where the API server serves it (1.32, 1.34 on, by default)
// and list where it does not (1.33, whose WatchList gate is off): there
// the first refusal is no failure (no watch error, healthy) and no
// informer made afterwards asks again. make test-matrix runs this on
// every supported minor.
func TestWatchListWhereServed(t *testing.T) {
	c := testcluster.Require(t, cluster)
	minor, err := strconv.Atoi(c.ServerVersion.Minor)
	if err != nil {
		t.Fatalf("server minor %q: %v", c.ServerVersion.Minor, err)
	}
	served := minor != 33
	var streamed, refused atomic.Int64
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if req.URL.Query().Get("sendInitialEvents") == "true" {
				streamed.Add(1)
				if err == nil && resp.StatusCode == http.StatusUnprocessableEntity {
					refused.Add(1)
				}
			}
			return resp, err
		})
	})
	reg, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "watchlist-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := reg.Pods(ctx, ns.Name)
		if err != nil {
			t.Fatal(err)
		}
		defer pods.Release()
		if err := pods.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		if st := pods.Status(); st.WatchErrors != 0 || !st.Healthy() {
			t.Errorf("informer %d on %s: %+v; want healthy with no watch error", i, c.ServerVersion.GitVersion, st)
		}
	}
	t.Logf("%s: %d streaming list requests, %d refused", c.ServerVersion.GitVersion, streamed.Load(), refused.Load())
	if served {
		if streamed.Load() < 3 || refused.Load() != 0 || reg.noWatchList.Load() {
			t.Errorf("%s serves WatchList: %d streaming requests (%d refused), noWatchList %v; want one per informer, none refused",
				c.ServerVersion.GitVersion, streamed.Load(), refused.Load(), reg.noWatchList.Load())
		}
	} else if streamed.Load() != 1 || refused.Load() != 1 || !reg.noWatchList.Load() {
		t.Errorf("%s does not serve WatchList: %d streaming requests (%d refused), noWatchList %v; want exactly one, refused",
			c.ServerVersion.GitVersion, streamed.Load(), refused.Load(), reg.noWatchList.Load())
	}
}
