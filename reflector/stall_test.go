package reflector

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// stallProxy forwards loopback TCP connections to the API server. Once
// stall is called, the connections open then stop forwarding in both
// directions (their bytes are held, the sockets stay open: a NAT that
// lost its state), while connections made afterwards work.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	gen     int // connections of a generation below stalledBelow are stalled
	stalled int
	closed  bool
	wg      sync.WaitGroup
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		gen := p.gen
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(gen, up, c)
		go p.pipe(gen, c, up)
	}
}

// pipe copies from src to dst, holding what it read while gen is stalled.
func (p *stallProxy) pipe(gen int, dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for gen < p.stalled && !p.closed {
			p.cond.Wait()
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stall stops the connections open now; later ones work.
func (p *stallProxy) stall() {
	p.mu.Lock()
	p.gen++
	p.stalled = p.gen
	p.mu.Unlock()
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// TestWatchStallIsDetectedAndHealed: the informers' one connection stops
// forwarding (new connections still work). A pod change made during the
// stall reaches the cache within 20 s (client-go's defaults: 45 s), the
// informer's health records the broken watch, and it is healthy again
// after: nothing is lost, only delayed.
func TestWatchStallIsDetectedAndHealed(t *testing.T) {
	c := testcluster.Require(t, cluster)
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newStallProxy(t, u.Host)
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = "https://" + proxy.ln.Addr().String()
	r := newRegistry(t, Options{Config: cfg})
	defer r.Close()
	ns := newNamespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	pods, err := r.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Release()
	if err := pods.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, ns, "stalled", nil)
	waitCached(t, ctx, pods, pod.Namespace, pod.Name, func(*Pod) bool { return true })
	before := pods.Status()

	// The watch is stalled from here on, and nothing says so: the change
	// below is made during the stall.
	proxy.stall()
	changed := time.Now()
	// Through the test's own client (not the proxy): the change the
	// stalled watch must not lose, as a server's end is.
	deletePod(t, ns, pod.Name)
	seen := waitGone(t, ctx, pods, ns, pod.Name)
	took := seen.Sub(changed)
	t.Logf("a change made during the stall reached the cache after %s (client-go's defaults: about 45 s)", took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("the stall was healed after %s, want within 20 s", took)
	}
	after := pods.Status()
	if after.WatchErrors <= before.WatchErrors || after.LastErrorTime.Before(changed.Add(-2*time.Second)) {
		t.Errorf("the broken watch was not reported: watch errors %d before, %d after; last error %v at %s",
			before.WatchErrors, after.WatchErrors, after.LastError, after.LastErrorTime)
	}
	testutil.EventuallyEvery(t, 100*time.Millisecond, 10*time.Second, "healthy again after the stall", func() error {
		if st := pods.Status(); !st.Healthy() {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
}

// waitCached waits until the cache holds ns/name satisfying cond and
// returns when it saw it.
func waitCached(t *testing.T, ctx context.Context, pods *Pods, ns, name string, cond func(*Pod) bool) time.Time {
	t.Helper()
	return waitCache(t, ctx, pods, ns, name, func(p *Pod, ok bool) bool { return ok && cond(p) })
}

// waitGone waits until the cache no longer holds ns/name.
func waitGone(t *testing.T, ctx context.Context, pods *Pods, ns, name string) time.Time {
	t.Helper()
	return waitCache(t, ctx, pods, ns, name, func(_ *Pod, ok bool) bool { return !ok })
}

// waitCache waits, as long as ctx allows, until cond holds for what the
// cache has of ns/name, and returns when it saw it.
func waitCache(t *testing.T, ctx context.Context, pods *Pods, ns, name string, cond func(*Pod, bool) bool) time.Time {
	t.Helper()
	d := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	testutil.EventuallyEvery(t, 50*time.Millisecond, d, "pod "+ns+"/"+name+" as wanted in the cache", func() error {
		p, ok, err := pods.Get(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if !cond(p, ok) {
			return fmt.Errorf("cached: %t", ok)
		}
		return nil
	})
	return time.Now()
}
