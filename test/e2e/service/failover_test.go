package service

// The failover test of issue 26: two replicas of the command with
// -leader-elect behind a proxy that routes by readiness (proxy_test.go),
// servers starting while the leader is killed or terminated, and the
// cluster checked by pod UID.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// The election's timing, short so that five crashes fit in the test, and
// within client-go's rules (lease > renew > 1.2 × retry).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// crashBound is how long after a SIGKILL of the leader the standby must
// be ready: the standby sees the leader's last renewal at most one
// jittered retry period late (client-go waits RetryPeriod × (1 + up to
// 1.2) between tries), the Lease expires leaseDuration after that, and
// the standby's next try comes at most one jittered retry period later.
// The margin covers the new leader's resync before its /readyz turns 200
// and a race-instrumented build on two cores.
const crashBound = leaseDuration + 2*2200*retryPeriod/1000 + 2*time.Second

// termExitBound is how long a SIGTERMed leader may take to exit: stops in
// flight may finish within max(lease − renew, 1 s), the Lease is given
// back within renewDeadline, and the idle HTTP servers close at once;
// the rest is margin.
const termExitBound = time.Second + renewDeadline + 5*time.Second

// opTimeout bounds one API operation through the proxy, retries
// included, and each wait on the cluster.
const opTimeout = 60 * time.Second

// TestFailover runs two replicas on one Lease behind a readiness-routing
// proxy and, 5 times each (interleaved), kills the leader with SIGKILL
// and with SIGTERM while servers start through the proxy. Every round
// starts its own users' default servers (20 in every round, rounds 2-5
// included: on two cores the ten rounds take under a minute), signals
// the leader once half of the POSTs were accepted, and then checks that
// the other replica leads within crashBound (after a SIGTERM: within
// leaseDuration, the Lease given back rather than left to expire, and
// the signalled process exits 0 within termExitBound), that every start
// finishes running through the proxy, that each server had exactly one
// pod UID ever and that pod is still Running, and that no pod was
// deleted. A start the old leader accepted (202) but the new one does
// not know, with no pod on the cluster, is an error (a lost start); the
// test starts it again so that the round, and the measurements, go on.
// The signalled replica is restarted (a new identity on the same
// addresses) and the round's servers stopped through the proxy before
// the next round.
//
// Throughout, the proxy records who answered each request (it forwards
// each one once, to one replica) and a watch records the Lease's
// holders: a replica answered anything but 503 (NotLeader, or NotReady
// while shutting down, with Retry-After) only while it held the Lease,
// and no readiness poll ever found both replicas ready.
func TestFailover(t *testing.T) {
	c := testcluster.Require(t, cluster)
	f := newFailover(t, c)
	rounds := 5
	servers := 20
	var crash, term []time.Duration
	for i := 1; i <= rounds; i++ {
		crash = append(crash, f.round(t, syscall.SIGKILL, fmt.Sprintf("kill%d", i), servers))
		term = append(term, f.round(t, syscall.SIGTERM, fmt.Sprintf("term%d", i), servers))
	}
	t.Logf("failover SIGKILL: %s over %d rounds (bound %s)", summary(crash), rounds, crashBound)
	t.Logf("failover SIGTERM: %s over %d rounds (bound %s)", summary(term), rounds, leaseDuration)
	if median(term) >= median(crash) {
		t.Errorf("SIGTERM hand-over median %s is not faster than SIGKILL's %s: the Lease was not given back", median(term), median(crash))
	}
	t.Logf("starts lost in a hand-over: %d of %d", f.lost, len(f.users))
	f.checkPodsPerServer(t)
	f.checkAnswers(t)
}

// failover is the test's setup: the namespace, the two replicas, the
// proxy and the watches.
type failover struct {
	c        *testcluster.Cluster
	ns       string
	token    string
	replicas []*replica
	lb       *lbProxy
	pods     *podWatch
	lease    *leaseWatch
	users    []string // every server started, in order
	lost     int      // starts lost in a hand-over
}

const leaseName = "spawnkit-failover"

func newFailover(t *testing.T, c *testcluster.Cluster) *failover {
	t.Helper()
	ns, err := c.Client.CoreV1().Namespaces().Create(t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "failover-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "namespace: %s\nimage: quay.io/jupyter/base-notebook:2024-01-01\n", ns.Name), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &failover{c: c, ns: ns.Name, token: "failover-token"}
	// Both watches begin before any replica runs, so they see every pod
	// and every holder.
	f.pods = watchPods(t, c, ns.Name)
	f.lease = watchLease(t, c, ns.Name)
	for _, name := range []string{"a", "b"} {
		tokenFile := filepath.Join(dir, name+".token")
		if err := os.WriteFile(tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &replica{name: name, listen: freeAddr(t), probeListen: freeAddr(t)}
		r.args = []string{
			"-kubeconfig", c.Kubeconfig, "-config", config, "-token-file", tokenFile,
			"-listen", r.listen, "-probe-listen", r.probeListen,
			"-leader-elect", "-leader-elect-namespace", ns.Name, "-leader-elect-name", leaseName,
			"-leader-elect-lease-duration", leaseDuration.String(),
			"-leader-elect-renew-deadline", renewDeadline.String(),
			"-leader-elect-retry-period", retryPeriod.String(),
		}
		r.start(t)
		f.replicas = append(f.replicas, r)
	}
	f.lb = newProxy(t, f.replicas...)
	return f
}

// replica is one of the two slots: fixed addresses, and the process
// serving them now (a new one, with a new identity, after each signal).
type replica struct {
	name                string
	listen, probeListen string
	args                []string
	gen                 int
	p                   *proc
}

func (r *replica) start(t *testing.T) {
	t.Helper()
	r.gen++
	identity := fmt.Sprintf("%s-%d", r.name, r.gen)
	r.p = startProc(t, identity, nil, append(r.args, "-leader-elect-identity", identity)...)
}

// readyz is the replica's /readyz, asked directly (not through the
// proxy).
func (r *replica) readyz(ctx context.Context) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return get(ctx, probeClient, "http://"+r.probeListen+"/readyz", "")
}

var probeClient = httpClient(nil)

// roles waits until the proxy routes to exactly one replica and the
// other stands by warm (recovered, informers synced), and returns them.
func (f *failover) roles(t *testing.T) (leader, standby *replica) {
	t.Helper()
	testutil.EventuallyEvery(t, poll, opTimeout, "one leader and one warm standby", func() error {
		ready := f.lb.readyReplicas()
		if len(ready) != 1 {
			return fmt.Errorf("the proxy routes to %v", ready)
		}
		for _, r := range f.replicas {
			if r.name == ready[0] {
				leader = r
			} else {
				standby = r
			}
		}
		code, body := standby.readyz(t.Context())
		warm := code == http.StatusServiceUnavailable && strings.Contains(body, "[+]manager ok") &&
			strings.Contains(body, "[+]informers ok") && strings.Contains(body, "standing by")
		return pending(warm, fmt.Sprintf("standby %s: %d %q", standby.name, code, body))
	})
	return leader, standby
}

// round starts n servers for users tag-uNN, signals the leader while
// they start, and checks the hand-over and the cluster; it returns the
// time from the signal to the other replica's /readyz 200.
func (f *failover) round(t *testing.T, sig syscall.Signal, tag string, n int) time.Duration {
	t.Helper()
	leader, standby := f.roles(t)
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("%s-u%02d", tag, i)
	}
	f.users = append(f.users, users...)

	accepted := make(chan struct{}, n)
	var acceptedBy sync.Map // user → the replica that answered its POST
	g, gctx := errgroup.WithContext(t.Context())
	for _, u := range users {
		g.Go(func() error {
			r, err := f.call(gctx, http.MethodPost, serverPath(u))
			if err != nil {
				return err
			}
			if r.code != http.StatusAccepted && r.code != http.StatusOK {
				return fmt.Errorf("POST %s: %d %s, want 202 or 200", serverPath(u), r.code, r.body)
			}
			acceptedBy.Store(u, r.replica)
			accepted <- struct{}{}
			return nil
		})
	}
	for range n / 2 {
		select {
		case <-accepted:
		case <-gctx.Done():
			t.Fatalf("%s: starting servers: %v", tag, g.Wait())
		}
	}
	readyAtSignal := f.pods.readyCount(users)
	signalled := time.Now()
	leader.p.signal(sig)
	testutil.EventuallyEvery(t, poll, crashBound, fmt.Sprintf("%s: replica %s leading after the %s of %s", tag, standby.name, signalName[sig], leader.name), func() error {
		code, body := standby.readyz(t.Context())
		return pending(code == http.StatusOK, fmt.Sprintf("%d %q", code, body))
	})
	took := time.Since(signalled)
	if err := g.Wait(); err != nil {
		t.Fatalf("%s: %v", tag, err)
	}

	exitErr := leader.p.wait(t, termExitBound)
	exited := time.Since(signalled)
	if sig == syscall.SIGTERM {
		if exitErr != nil {
			t.Errorf("%s: the SIGTERMed leader exited with %v, want 0", tag, exitErr)
		}
		if lines := leader.p.lines("gave the Lease back"); len(lines) == 0 {
			t.Errorf("%s: the SIGTERMed leader did not log giving the Lease back", tag)
		}
		if took >= leaseDuration {
			t.Errorf("%s: SIGTERM hand-over took %s, not under the lease duration %s: the Lease expired instead of being given back", tag, took, leaseDuration)
		}
	}

	statuses, lost := f.waitRunning(t, users)
	if len(lost) > 0 {
		var by []string
		for _, u := range lost {
			r, _ := acceptedBy.Load(u)
			by = append(by, fmt.Sprintf("%s (202 from %s)", u, r))
		}
		t.Errorf("%s: %d of %d starts accepted before the %s of %s were lost: the new leader %s answered 404 NotFound and the cluster never had a pod of them (the test started them again): %s",
			tag, len(lost), n, signalName[sig], leader.name, standby.name, strings.Join(by, ", "))
	}
	f.lost += len(lost)
	f.checkRound(t, tag, users, statuses)
	t.Logf("%s: %s of %s with %d of %d POSTs accepted and %d pods ready; %s led after %s; the signalled process exited after %s; all %d servers running, one pod each",
		tag, signalName[sig], leader.name, n/2, n, readyAtSignal, standby.name, took.Round(time.Millisecond), exited.Round(time.Millisecond), n)

	leader.start(t)
	f.stopAll(t, users)
	return took
}

var signalName = map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}

func serverPath(user string) string { return "/v1/users/" + user + "/server" }

// apiClient has no keep-alives (each request a new connection, routed
// afresh by the proxy).
var apiClient = httpClient(nil)

// call makes one request through the proxy, retried while no replica
// can answer it (503 NotLeader/NotReady, no ready replica, or 502 from a
// replica that died under it), bounded by opTimeout. A hub honours
// Retry-After; the test retries every 100 ms so that the hand-over, not
// the client, sets the pace.
func (f *failover) call(ctx context.Context, method, path string) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, method, f.lb.URL+path, nil)
		if err != nil {
			return reply{}, err
		}
		req.Header.Set("Authorization", "Bearer "+f.token)
		var r reply
		if resp, err := apiClient.Do(req); err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r = reply{code: resp.StatusCode, body: string(data), replica: resp.Header.Get(replicaHeader)}
		}
		if r.code != http.StatusServiceUnavailable && r.code != http.StatusBadGateway && r.code != 0 {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%s %s: still %d %s after %s", method, path, r.code, r.body, opTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reply is the answer call settled on, and the replica that gave it.
type reply struct {
	code          int
	body, replica string
}

// status is the part of a ServerStatus the test reads.
type status struct {
	Phase string `json:"phase"`
	Ready bool   `json:"ready"`
	State struct {
		PodName   string `json:"pod_name"`
		Namespace string `json:"namespace"`
	} `json:"state"`
}

// waitRunning polls each server's status through the proxy until it is
// running and ready. A server that the leader does not know (404) and
// that never had a pod is a start lost in the hand-over: it is started
// again, as its user would, so that the round goes on, and returned in
// lost.
func (f *failover) waitRunning(t *testing.T, users []string) (statuses map[string]status, lost []string) {
	t.Helper()
	var mu sync.Mutex // guards out and lost
	out := map[string]status{}
	g, ctx := errgroup.WithContext(t.Context())
	for _, u := range users {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			restarted := false
			for {
				r, err := f.call(ctx, http.MethodGet, serverPath(u))
				if err != nil {
					return err
				}
				var st status
				if r.code == http.StatusOK && json.Unmarshal([]byte(r.body), &st) == nil && st.Phase == "running" && st.Ready {
					mu.Lock()
					out[u] = st
					mu.Unlock()
					return nil
				}
				switch {
				case r.code == http.StatusNotFound && !restarted && len(f.pods.byUser()[u]) == 0:
					restarted = true
					mu.Lock()
					lost = append(lost, u)
					mu.Unlock()
					if r, err := f.call(ctx, http.MethodPost, serverPath(u)); err != nil || r.code != http.StatusAccepted {
						return fmt.Errorf("POST %s again: %d %s %v, want 202", serverPath(u), r.code, r.body, err)
					}
				case r.code != http.StatusOK || st.Phase != "starting":
					return fmt.Errorf("GET %s: %d %s from %s, want a starting or running server (pods seen: %v)",
						serverPath(u), r.code, r.body, r.replica, f.pods.byUser()[u])
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("GET %s: still %s after %s", serverPath(u), r.body, opTimeout)
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("every start finishes: %v", err)
	}
	slices.Sort(lost)
	return out, lost
}

// checkRound checks the cluster for one round: each server has had
// exactly one pod UID, the one its status names, Running on the API
// server and never deleted.
func (f *failover) checkRound(t *testing.T, tag string, users []string, statuses map[string]status) {
	t.Helper()
	seen := f.pods.byUser()
	for _, u := range users {
		pods := seen[u]
		if len(pods) != 1 {
			t.Errorf("%s: server %s had %d pods: %v, want exactly 1", tag, u, len(pods), pods)
			continue
		}
		p := pods[0]
		if p.deleted {
			t.Errorf("%s: the pod %s of %s (UID %s) was deleted during the failover", tag, p.name, u, p.uid)
		}
		st := statuses[u]
		if st.State.PodName != p.name || st.State.Namespace != f.ns {
			t.Errorf("%s: %s's status names pod %s/%s, the cluster has %s/%s", tag, u, st.State.Namespace, st.State.PodName, f.ns, p.name)
		}
		pod, err := f.c.Client.CoreV1().Pods(f.ns).Get(t.Context(), p.name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("%s: %s's pod: %v", tag, u, err)
		case pod.UID != p.uid || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil:
			t.Errorf("%s: %s's pod %s: UID %s (first %s), phase %s, deleting %v; want the first pod, Running", tag, u, p.name, pod.UID, p.uid, pod.Status.Phase, pod.DeletionTimestamp)
		}
	}
}

// stopAll stops the round's servers through the proxy and waits until
// their pods are gone.
func (f *failover) stopAll(t *testing.T, users []string) {
	t.Helper()
	g, ctx := errgroup.WithContext(t.Context())
	for _, u := range users {
		g.Go(func() error {
			r, err := f.call(ctx, http.MethodDelete, serverPath(u))
			if err != nil {
				return err
			}
			if r.code != http.StatusOK {
				return fmt.Errorf("DELETE %s: %d %s, want 200", serverPath(u), r.code, r.body)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("stopping the round's servers: %v", err)
	}
	testutil.EventuallyEvery(t, poll, opTimeout, "the round's pods gone", func() error {
		seen := f.pods.byUser()
		for _, u := range users {
			for _, p := range seen[u] {
				if !p.gone {
					return errors.New(p.name + " still exists")
				}
			}
		}
		return nil
	})
}

// checkPodsPerServer checks, over every round, that each server had
// exactly one pod UID ever, and logs how many pods each had.
func (f *failover) checkPodsPerServer(t *testing.T) {
	t.Helper()
	f.pods.mu.Lock()
	ended := f.pods.ended
	f.pods.mu.Unlock()
	if ended {
		t.Error("the pod watch ended before the test did: pods may have been missed")
	}
	seen := f.pods.byUser()
	perServer := map[int]int{}
	for _, u := range f.users {
		perServer[len(seen[u])]++
	}
	t.Logf("pods per server after failover: %v (pod UIDs ever seen → servers; %d servers in all)", perServer, len(f.users))
	if perServer[1] != len(f.users) {
		t.Errorf("pods per server %v, want exactly 1 for all %d servers", perServer, len(f.users))
	}
}

// podSeen is what the watch saw of one pod.
type podSeen struct {
	uid        types.UID
	name, user string
	ready      bool // its Ready condition was true at the last event
	deleted    bool // a deletion timestamp or a Deleted event was seen
	gone       bool // a Deleted event was seen
}

func (p podSeen) String() string {
	return fmt.Sprintf("%s (UID %s, deleted %v)", p.name, p.uid, p.deleted)
}

// podWatch records every pod of the namespace the API server reports,
// from before the first replica starts. Safe for concurrent use.
type podWatch struct {
	mu    sync.Mutex // guards pods, order and ended
	pods  map[types.UID]*podSeen
	order []types.UID
	ended bool // the watch ended before the test stopped it
}

func watchPods(t *testing.T, c *testcluster.Cluster, ns string) *podWatch {
	t.Helper()
	w, err := c.Client.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{pods: map[types.UID]*podSeen{}}
	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by the test: its cleanup stops the watch and waits
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			pw.see(ev.Type, pod)
		}
		select {
		case <-stopped:
		default:
			pw.mu.Lock()
			pw.ended = true
			pw.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stopped)
		w.Stop()
		<-done
	})
	return pw
}

func (pw *podWatch) see(typ watch.EventType, pod *corev1.Pod) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	p := pw.pods[pod.UID]
	if p == nil {
		p = &podSeen{uid: pod.UID, name: pod.Name, user: pod.Annotations[naming.AnnotationUsername]}
		pw.pods[pod.UID] = p
		pw.order = append(pw.order, pod.UID)
	}
	p.ready = slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
	if typ == watch.Deleted {
		p.deleted, p.gone = true, true
	}
	if pod.DeletionTimestamp != nil {
		p.deleted = true
	}
}

// byUser is every pod seen, by the user its annotation names, in the
// order they appeared.
func (pw *podWatch) byUser() map[string][]podSeen {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	out := map[string][]podSeen{}
	for _, uid := range pw.order {
		p := pw.pods[uid]
		out[p.user] = append(out[p.user], *p)
	}
	return out
}

// readyCount is how many of users' pods are Ready now.
func (pw *podWatch) readyCount(users []string) int {
	n := 0
	for u, pods := range pw.byUser() {
		if slices.Contains(users, u) {
			for _, p := range pods {
				if p.ready {
					n++
				}
			}
		}
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %s median %s max %s", r(s[0]), r(median(s)), r(s[len(s)-1]))
}
