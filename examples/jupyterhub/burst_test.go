package jupyterhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

const (
	// burstUsers start at once in TestJupyterHubBurst.
	burstUsers = 300
	// burstReady bounds the wait until all of them are ready.
	burstReady = 150 * time.Second
)

// burstConfig is the burst's hub configuration on top of the test's: the
// example's own timeouts (start_timeout 300, as zero-to-jupyterhub), its
// default poll interval, INFO logs, and a concurrent_spawn_limit that
// lets all of them start (JupyterHub's default of 100 would answer the
// rest with 429).
var burstConfig = fmt.Sprintf(`
c.Spawner.start_timeout = 300
c.Spawner.poll_interval = 30
c.JupyterHub.log_level = "INFO"
c.JupyterHub.concurrent_spawn_limit = %d
`, burstUsers)

// TestJupyterHubBurst: 300 users start their servers at once through
// JupyterHub's REST API, as a class starting together does; every one
// becomes ready, none fails. It logs the time from the first start
// request until all are ready, then stops them all.
func TestJupyterHubBurst(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	s := newStack(t, tl, c, stackOptions{hubConfig: burstConfig})

	users := make([]string, burstUsers)
	for i := range users {
		users[i] = fmt.Sprintf("burst-%03d", i)
	}
	s.mustAPI(ctx, t, http.MethodPost, "/users", map[string][]string{"usernames": users}, http.StatusCreated)

	begin := time.Now()
	accepted := make([]time.Duration, len(users))
	errs := make([]error, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data, err := s.api(ctx, http.MethodPost, serverPath(u, ""), map[string]string{"profile": "default"})
			accepted[i] = time.Since(begin)
			if err == nil && code != http.StatusCreated && code != http.StatusAccepted {
				err = fmt.Errorf("starting %s = %d %s", u, code, data)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	lastAccepted := slices.Max(accepted)

	var allReady time.Duration
	testutil.EventuallyEvery(t, time.Second, burstReady, "every burst server ready", func() error {
		n, err := s.countServers(ctx)
		if err != nil {
			return err
		}
		if n.failed > 0 {
			t.Fatalf("%d of %d starts failed (%d ready, %d pending)\n%s", n.failed, burstUsers, n.ready, n.pending, hubFailures(s))
		}
		if n.ready < burstUsers {
			return fmt.Errorf("%d of %d servers ready, %d pending, after %s", n.ready, burstUsers, n.pending, time.Since(begin).Round(time.Second))
		}
		allReady = time.Since(begin)
		return nil
	})
	hubLog := s.logPath("jupyterhub")
	if f := hubFailures(s); f != "" {
		t.Errorf("JupyterHub logged failed starts:\n%s", f)
	}
	t.Logf("%d users starting at once through JupyterHub: all ready %s after the first start request (JupyterHub accepted the last one after %s); 0 failed; the Spawner sent %d start requests again",
		burstUsers, allReady.Round(100*time.Millisecond), lastAccepted.Round(100*time.Millisecond), logCount(hubLog, "spawnkit: starting burst-"))

	// Stop them all at once, and wait until their pods are gone: the
	// package's other tests expect an empty namespace.
	begin = time.Now()
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data, err := s.api(ctx, http.MethodDelete, serverPath(u, ""), nil)
			if err == nil && code != http.StatusNoContent && code != http.StatusAccepted {
				err = fmt.Errorf("stopping %s = %d %s", u, code, data)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyEvery(t, time.Second, 2*time.Minute, "every pod gone after the stops", func() error {
		list, err := s.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left in %s after stopping every server", len(list.Items), namespace)
		}
		return nil
	})
	t.Logf("all %d stopped and their pods gone %s after the first stop request", burstUsers, time.Since(begin).Round(100*time.Millisecond))
}

// serverCounts is how the users' default servers stand in JupyterHub.
type serverCounts struct{ ready, pending, failed int }

// countServers reads every user from JupyterHub's API, a page (at most
// 200, JupyterHub's api_page_max_limit) at a time: a server that is
// neither ready nor pending has failed (JupyterHub drops it).
func (s *stack) countServers(ctx context.Context) (serverCounts, error) {
	const page = 200
	var n serverCounts
	for offset := 0; ; offset += page {
		path := fmt.Sprintf("/users?offset=%d&limit=%d", offset, page)
		code, data, err := s.api(ctx, http.MethodGet, path, nil)
		if err != nil {
			return n, err
		}
		if code != http.StatusOK {
			return n, fmt.Errorf("GET %s = %d %.300s", path, code, data)
		}
		var users []struct {
			Name    string               `json:"name"`
			Servers map[string]hubServer `json:"servers"`
		}
		if err := json.Unmarshal(data, &users); err != nil {
			return n, fmt.Errorf("GET %s: %w", path, err)
		}
		for _, u := range users {
			if !strings.HasPrefix(u.Name, "burst-") {
				continue
			}
			hs, ok := u.Servers[""]
			switch {
			case ok && hs.Ready:
				n.ready++
			case ok && hs.Pending != nil:
				n.pending++
			default:
				n.failed++
			}
		}
		if len(users) < page {
			return n, nil
		}
	}
}

// hubFailures is what JupyterHub's log says about failed starts.
func hubFailures(s *stack) string {
	var out []string
	for _, what := range []string{"Unhandled error starting", "failed to start", "never showed up", "Spawn failed"} {
		if n := logCount(s.logPath("jupyterhub"), what); n > 0 {
			out = append(out, fmt.Sprintf("%d lines with %q", n, what))
		}
	}
	return strings.Join(out, "\n")
}
