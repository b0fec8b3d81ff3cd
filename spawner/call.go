package spawner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/spawnkit/spawnkit/internal/retry"
)

// call runs one API request under spawnkit's retry policy: each try is
// bounded by k8s_api_request_timeout, all of them by
// k8s_api_request_retry_timeout (and ctx), with exponential backoff and
// jitter in between, and only errors on the retryable allow-list are
// tried again.
func (s *Spawner) call(ctx context.Context, op func(ctx context.Context) error) error {
	cfg := &s.b.cfg
	base := cfg.K8sAPIRequestTimeout.Duration()
	timeout := base
	attempt := func(ctx context.Context) error {
		reqCtx, cancel := s.b.requestContext(ctx, timeout)
		defer cancel()
		err := op(reqCtx)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(reqCtx), context.DeadlineExceeded) {
			err = timedOut(&timeout, base, err)
		}
		return err
	}
	// The first try is made here, not in retry.Do: every request of a
	// start goes through call, and the create's encoding is the deepest
	// path of a start's goroutine, whose stack keeps that size while
	// the start waits. retry.DoAfter continues exactly as Do would.
	start := time.Now()
	if err := attempt(ctx); err != nil {
		return retry.DoAfter(ctx, retry.Options{
			MaxElapsed: cfg.K8sAPIRequestRetryTimeout.Duration(),
			Retryable:  retryable,
		}, attempt, start, err)
	}
	return nil
}

// timedOut is the error of a try that ran out of *timeout, which it
// doubles for the next try: a server too slow for one try is as slow for
// the next, and a fixed timeout would fail every try of a create that
// takes 3.5 s on an overloaded API server. The timeout grows up to
// maxTimeoutGrowth times k8s_api_request_timeout (base).
//
// A function of its own, so that its formatting's frame is not under
// every request's.
func timedOut(timeout *time.Duration, base time.Duration, err error) error {
	err = fmt.Errorf("%w after %s (k8s_api_request_timeout): %w", errRequestTimeout, *timeout, err)
	*timeout = min(2**timeout, maxTimeoutGrowth*base)
	return err
}

// maxTimeoutGrowth caps how far call lets the per-request timeout grow.
const maxTimeoutGrowth = 4

// requestContext bounds one request by timeout, counted from the moment
// the request leaves the client rather than from the call. client-go
// waits in its client-side rate limiter inside the request's context, so
// a plain timeout also counts time queued behind a burst of other
// requests: under 1,000 concurrent starts a create that the API server
// handled in 20 ms "timed out" after 3 s in the queue. The clock starts
// when net/http asks for a connection (httptrace GetConn), which happens
// after client-go's throttle; the time in the queue is bounded by the
// retry budget (ctx) instead. A client that does not go through net/http
// (a fake clientset) never fires the hook, so the timeout then starts
// at once.
func (b *Factory) requestContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if !b.httpClient {
		return context.WithTimeout(ctx, timeout)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var (
		once  sync.Once
		timer *time.Timer
		mu    sync.Mutex // guards timer
	)
	start := func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			timer = time.AfterFunc(timeout, func() { cancel(context.DeadlineExceeded) })
		})
	}
	trace := &httptrace.ClientTrace{GetConn: func(string) { start() }}
	return httptrace.WithClientTrace(ctx, trace), func() {
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// errRequestTimeout marks a try that ran out of k8s_api_request_timeout.
var errRequestTimeout = errors.New("the request timed out")

// retryable is the allow-list of errors worth another try: the server
// asked for one (429, or any error suggesting a client delay), it was
// overloaded or failed internally (500, 503, 504), the request timed out,
// or the connection failed. Anything else (invalid, forbidden, not found,
// conflict, a ctx that ended) is final.
func retryable(err error) bool {
	if _, retry := apierrors.SuggestsClientDelay(err); retry {
		return true
	}
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, errReplaced), errors.Is(err, errClaimDeleting):
		return true
	case errors.Is(err, errRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		// The per-request timeout; the caller's own ctx ending is caught
		// before this predicate is asked.
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
