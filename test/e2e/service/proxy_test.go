package service

// The failover test's load balancer: a loopback reverse proxy that sends
// each request to a replica whose /readyz answers 200, as a Kubernetes
// Service does with readiness, and records who answered what; and the
// check of that record against the Lease's holders.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// replicaHeader names, on every answer of the proxy, the replica that
// answered ("none" when no replica was ready).
const replicaHeader = "X-Failover-Replica"

// readyPoll is how often the proxy asks each replica's /readyz, as a
// kubelet's readiness probe with periodSeconds would (faster here, so
// that the measured failover is the election's, not the probe's).
const readyPoll = 100 * time.Millisecond

// backend is one replica as the proxy sees it: fixed addresses, whatever
// process serves them now.
type backend struct {
	name      string
	api       *url.URL
	probeURL  string
	forwarder *httputil.ReverseProxy
}

// answer is one request the proxy forwarded, or refused for want of a
// ready replica.
type answer struct {
	seq        int
	replica    string // "" when no replica was ready
	method     string
	path       string
	code       int    // 502 when the replica did not answer (killed)
	reason     string // the error body's reason, for 503s
	retryAfter string
	sent, recv time.Time
}

// lbProxy is the load balancer. Safe for concurrent use; close stops its
// poller and its server.
type lbProxy struct {
	URL      string
	backends []*backend
	srv      *httptest.Server
	stop     context.CancelFunc
	polled   chan struct{} // closed when the poller has returned
	probes   *http.Client

	mu        sync.Mutex // guards everything below
	ready     []bool     // by backend, from the last poll
	next      int        // round-robin among the ready ones
	answers   []answer
	bothReady []string // polls that found more than one replica ready
}

// newProxy starts the proxy in front of the replicas' addresses; the
// test's cleanup stops it.
func newProxy(t *testing.T, replicas ...*replica) *lbProxy {
	p := &lbProxy{ready: make([]bool, len(replicas)),
		probes: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}}
	for _, r := range replicas {
		b := &backend{name: r.name, api: &url.URL{Scheme: "http", Host: r.listen}, probeURL: "http://" + r.probeListen + "/readyz"}
		b.forwarder = &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(b.api) },
			Transport: &http.Transport{DisableKeepAlives: true},
			ModifyResponse: func(resp *http.Response) error {
				a := answer{replica: b.name, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
				if resp.StatusCode == http.StatusServiceUnavailable {
					body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
					resp.Body.Close()
					if err != nil {
						return err
					}
					var e struct{ Reason string }
					_ = json.Unmarshal(body, &e)
					a.reason = e.Reason
					resp.Body = io.NopCloser(bytes.NewReader(body))
				}
				resp.Header.Set(replicaHeader, b.name)
				p.record(resp.Request, a)
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				p.record(r, answer{replica: b.name, code: http.StatusBadGateway, reason: err.Error()})
				w.Header().Set(replicaHeader, b.name)
				w.WriteHeader(http.StatusBadGateway)
			},
		}
		p.backends = append(p.backends, b)
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	ctx, cancel := context.WithCancel(t.Context())
	p.stop, p.polled = cancel, make(chan struct{})
	p.pollOnce(ctx)
	go func() { // owned by p: close cancels ctx and waits
		defer close(p.polled)
		tick := time.NewTicker(readyPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				p.pollOnce(ctx)
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *lbProxy) close() {
	p.stop()
	<-p.polled
	p.srv.Close()
}

// sentKey carries the time the proxy received a request to its record.
type sentKey struct{}

func (p *lbProxy) serve(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), sentKey{}, time.Now()))
	p.mu.Lock()
	var ready []*backend
	for i, b := range p.backends {
		if p.ready[i] {
			ready = append(ready, b)
		}
	}
	var b *backend
	if len(ready) > 0 {
		b = ready[p.next%len(ready)]
		p.next++
	}
	p.mu.Unlock()
	if b == nil {
		p.record(r, answer{code: http.StatusServiceUnavailable, reason: "NoReadyReplica"})
		w.Header().Set(replicaHeader, "none")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"no replica is ready","reason":"NoReadyReplica"}`)
		return
	}
	b.forwarder.ServeHTTP(w, r)
}

func (p *lbProxy) record(r *http.Request, a answer) {
	a.method, a.path, a.recv = r.Method, r.URL.Path, time.Now()
	a.sent, _ = r.Context().Value(sentKey{}).(time.Time)
	p.mu.Lock()
	defer p.mu.Unlock()
	a.seq = len(p.answers)
	p.answers = append(p.answers, a)
}

// pollOnce asks every replica's /readyz at once, as independent kubelet
// probes would, and routes by the answers from then on.
func (p *lbProxy) pollOnce(ctx context.Context) {
	ready := make([]bool, len(p.backends))
	var wg sync.WaitGroup
	for i, b := range p.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := get(ctx, p.probes, b.probeURL, "")
			ready[i] = code == http.StatusOK
		}()
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = ready
	var names []string
	for i, ok := range ready {
		if ok {
			names = append(names, p.backends[i].name)
		}
	}
	if len(names) > 1 {
		p.bothReady = append(p.bothReady, fmt.Sprintf("%s: %v", time.Now().Format(time.RFC3339Nano), names))
	}
}

// readyReplicas is what the last poll found ready.
func (p *lbProxy) readyReplicas() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for i, ok := range p.ready {
		if ok {
			names = append(names, p.backends[i].name)
		}
	}
	return names
}

// log returns every answer so far and every poll that found more than
// one replica ready.
func (p *lbProxy) log() ([]answer, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]answer(nil), p.answers...), append([]string(nil), p.bothReady...)
}

// checkAnswers holds the proxy's record against the Lease's: an answer
// other than 503 came from a replica that held the Lease at some moment
// between the proxy sending the request and receiving the answer; a 503
// from a replica is NotLeader or NotReady with Retry-After; and no
// readiness poll found both replicas ready.
func (f *failover) checkAnswers(t *testing.T) {
	t.Helper()
	answers, both := f.lb.log()
	if len(both) > 0 {
		t.Errorf("the proxy found both replicas ready at %v", both)
	}
	terms := f.lease.terms(t, time.Now())
	count := map[string]int{}
	for _, a := range answers {
		switch {
		case a.replica == "":
			count["no ready replica"]++
		case a.code == http.StatusBadGateway:
			count["502 from "+a.replica]++
		case a.code == http.StatusServiceUnavailable:
			count["503 "+a.reason+" from "+a.replica]++
			if a.reason != "NotLeader" && a.reason != "NotReady" || a.retryAfter == "" {
				t.Errorf("request %d %s %s: replica %s answered 503 %s with Retry-After %q, want NotLeader or NotReady with Retry-After", a.seq, a.method, a.path, a.replica, a.reason, a.retryAfter)
			}
		default:
			count[fmt.Sprintf("%d from %s", a.code, a.replica)]++
			if !slices.ContainsFunc(terms[a.replica], func(tm term) bool { return !a.recv.Before(tm.from) && !a.sent.After(tm.to) }) {
				t.Errorf("request %d %s %s: replica %s answered %d between %s and %s, while it did not hold the Lease (its terms: %v)",
					a.seq, a.method, a.path, a.replica, a.code, a.sent.Format(time.RFC3339Nano), a.recv.Format(time.RFC3339Nano), terms[a.replica])
			}
		}
	}
	t.Logf("the proxy's %d answers: %v; Lease terms: %v", len(answers), count, terms)
}

// holder is one change of the Lease's holder as the watch saw it.
type holder struct {
	identity string    // "" when given back
	acquired time.Time // the Lease's acquireTime, written by the holder before its write
	seen     time.Time // when the watch delivered it
}

// leaseWatch records the Lease's holders. Safe for concurrent use.
type leaseWatch struct {
	mu      sync.Mutex // guards holders
	holders []holder
}

func watchLease(t *testing.T, c *testcluster.Cluster, ns string) *leaseWatch {
	t.Helper()
	w, err := c.Client.CoordinationV1().Leases(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + leaseName})
	if err != nil {
		t.Fatal(err)
	}
	lw := &leaseWatch{}
	done := make(chan struct{})
	go func() { // owned by the test: its cleanup stops the watch and waits
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			h := holder{seen: time.Now()}
			if l.Spec.HolderIdentity != nil {
				h.identity = *l.Spec.HolderIdentity
			}
			if l.Spec.AcquireTime != nil {
				h.acquired = l.Spec.AcquireTime.Time
			}
			lw.mu.Lock()
			if n := len(lw.holders); n == 0 || lw.holders[n-1].identity != h.identity {
				lw.holders = append(lw.holders, h)
			}
			lw.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return lw
}

// term is one replica process's hold of the Lease, widened so that it
// contains the real one: from the acquireTime the replica wrote (before
// its write succeeded) to when the watch saw the next holder (after that
// write).
type term struct {
	identity string
	from, to time.Time
}

func (tm term) String() string {
	return fmt.Sprintf("%s %s–%s", tm.identity, tm.from.Format("15:04:05.000"), tm.to.Format("15:04:05.000"))
}

// terms are the Lease's terms by replica slot (identity "a-3" is slot
// a); a term still held ends at now.
func (lw *leaseWatch) terms(t *testing.T, now time.Time) map[string][]term {
	t.Helper()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	out := map[string][]term{}
	for i, h := range lw.holders {
		if h.identity == "" {
			continue
		}
		if h.acquired.IsZero() {
			t.Errorf("the Lease held by %s has no acquireTime", h.identity)
		}
		tm := term{identity: h.identity, from: h.acquired, to: now}
		if i+1 < len(lw.holders) {
			tm.to = lw.holders[i+1].seen
		}
		slot, _, _ := strings.Cut(h.identity, "-")
		out[slot] = append(out[slot], tm)
	}
	return out
}
