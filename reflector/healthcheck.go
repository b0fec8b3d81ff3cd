package reflector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// The HTTP/2 health check DetectStalls sets: a connection that has read
// nothing for StallReadIdle is pinged, and dropped when the ping is not
// answered within StallPingTimeout. client-go's defaults are 30 s and
// 15 s, so a connection that stops forwarding silently (a NAT or load
// balancer that lost its state, a half-dead node) stalls every watch on
// it for up to 45 s; with these, within 10 s, after which client-go's
// reflectors watch again on a new connection from the resourceVersion
// they had, so no change is lost, only delayed.
//
// The cost on the API server: one HTTP/2 PING frame (17 bytes each way,
// answered by the server's HTTP/2 layer, not by a handler, with no
// request, no authentication and no etcd read) per idle connection every
// 5 s; a busy connection is never pinged.
const (
	StallReadIdle    = 5 * time.Second
	StallPingTimeout = 5 * time.Second
)

// DetectStalls returns a copy of cfg whose client checks its HTTP/2
// connections every StallReadIdle (StallPingTimeout for the answer), for
// the informers' watches, which otherwise wait for client-go's 45 s.
// reflector.New applies it to Options.Config; a hub that passes its own
// Client builds it from DetectStalls(cfg) to have the same.
//
// It needs to build the transport itself, so a cfg that already has a
// Transport, an exec or auth-provider plugin (whose credentials hook into
// client-go's own transport) is returned unchanged, with client-go's
// defaults; so is a cfg whose TLS settings cannot be read (the error says
// why). Client certificate and CA files are read once, here (client-go
// would reload rotated certificate files); a bearer token file is still
// re-read, as client-go's wrappers do.
func DetectStalls(cfg *rest.Config) (*rest.Config, error) {
	out := rest.CopyConfig(cfg)
	if cfg.Transport != nil || cfg.ExecProvider != nil || cfg.AuthProvider != nil {
		return out, nil
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return out, fmt.Errorf("reflector: reading the TLS settings: %w", err)
	}
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	proxy := cfg.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	// As client-go's transport.New builds it (SetOldTransportDefaults:
	// idle connections, TLS handshake timeout), but with our own HTTP/2
	// health check instead of configureHTTP2Transport's.
	t := utilnet.SetOldTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSClientConfig:     tlsCfg,
		DialContext:         dial,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		DisableCompression:  cfg.DisableCompression,
	})
	t2, err := http2.ConfigureTransports(t)
	if err != nil {
		return rest.CopyConfig(cfg), fmt.Errorf("reflector: configuring HTTP/2: %w", err)
	}
	t2.ReadIdleTimeout, t2.PingTimeout = StallReadIdle, StallPingTimeout
	out.Transport = lostWatches{t}
	// The transport carries them now; client-go refuses both.
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Dial, out.Proxy = nil, nil
	return out, nil
}

// watchHealthKey carries an informer's health in its watch requests'
// context, so that lostWatches can report a watch whose connection broke.
type watchHealthKey struct{}

// withWatchHealth is ctx for a watch request of the informer of h.
func withWatchHealth(ctx context.Context, h *health) context.Context {
	return context.WithValue(ctx, watchHealthKey{}, h)
}

// lostWatches reports, to the informer's health, a watch whose response
// body ends in an error other than its normal end (io.EOF) while the
// watch was not cancelled: a connection dropped by the health check, or
// reset. client-go's watch decoder takes such an end for an ordinary
// one and watches again without telling the informer's error handler,
// so without this a stall would never show in Status.
type lostWatches struct{ next http.RoundTripper }

func (l lostWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	if h, ok := req.Context().Value(watchHealthKey{}).(*health); ok {
		resp.Body = &reportingBody{ReadCloser: resp.Body, ctx: req.Context(), h: h}
	}
	return resp, nil
}

// reportingBody is a watch response body that reports its broken end.
type reportingBody struct {
	io.ReadCloser
	ctx    context.Context
	h      *health
	once   sync.Once
	closed atomic.Bool // set by Close, which another goroutine than the reader's may call
}

func (b *reportingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !b.closed.Load() && b.ctx.Err() == nil {
		b.once.Do(func() { b.h.attempt(callWatch, fmt.Errorf("the watch's connection was lost: %w", err)) })
	}
	return n, err
}

func (b *reportingBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// healthWatch passes a watch's events on, recording an error event (410
// Gone after a compaction, above all) in the informer's health: client-go
// then ends the watch and relists after a backoff without telling the
// informer's error handler, and until that relist succeeds the cache is
// stale and Status must say so. Its goroutine is owned by the watch: it
// ends when the underlying watch's channel closes or Stop is called.
type healthWatch struct {
	w    watch.Interface
	h    *health
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func watchWithHealth(w watch.Interface, h *health) watch.Interface {
	hw := &healthWatch{w: w, h: h, ch: make(chan watch.Event), done: make(chan struct{})}
	go hw.run()
	return hw
}

func (hw *healthWatch) run() {
	defer close(hw.ch)
	for ev := range hw.w.ResultChan() {
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			hw.h.attempt(callWatch, fmt.Errorf("the watch ended with an error event: %w", err))
		}
		select {
		case hw.ch <- ev:
		case <-hw.done:
			return
		}
	}
}

func (hw *healthWatch) ResultChan() <-chan watch.Event { return hw.ch }

func (hw *healthWatch) Stop() {
	hw.once.Do(func() { close(hw.done) })
	hw.w.Stop()
}
