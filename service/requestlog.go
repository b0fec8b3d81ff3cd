package service

// The request log and the request's trace context: the wrappers around
// the API that see every request, answered or refused.

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/propagation"

	"github.com/spawnkit/spawnkit/internal/phase"
)

// logRequests logs one line per request once it is answered, and hands
// the logger on in the request's context. A read that succeeded is
// logged at V(1) (requestLevel); everything else at V(0).
func logRequests(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		inner := r.WithContext(logr.NewContext(r.Context(), log))
		next.ServeHTTP(sw, inner)
		line := log.V(requestLevel(inner, sw.code))
		if !line.Enabled() {
			return
		}
		kv := []any{"method", r.Method, "path", r.URL.EscapedPath(), "query", queryKeys(r.URL),
			"status", sw.code, "bytes", sw.bytes, "duration", time.Since(start).Round(time.Microsecond).String(),
			"remote", r.RemoteAddr}
		if id := phase.TraceID(r.Context()); id != "" {
			kv = append(kv, "trace_id", id)
		}
		line.Info("request", kv...)
	})
}

// requestLevel is the verbosity of a request's log line: a successful
// read (GET or HEAD answered below 400: a hub's poll of a server, a list,
// a health check) is V(1), because a hub polls every server every 30 s
// (333 lines a second at 10,000 servers, nothing in them to act on, and
// the request metrics count them); a change (POST, PUT, DELETE), a
// progress stream (one per start, its trace id worth keeping) and every
// error are V(0). r is the request the router saw (its Pattern set).
func requestLevel(r *http.Request, code int) int {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	if read && code < http.StatusBadRequest && !strings.HasSuffix(r.Pattern, "/progress") {
		return 1
	}
	return 0
}

// traceContext puts the W3C trace context a client sent (traceparent,
// tracestate) into the request's context, whether or not this process
// exports spans: the Manager's spans become its children, and the trace
// id goes into the log lines and the progress events either way. A
// malformed traceparent is ignored, as the specification says.
func traceContext(next http.Handler) http.Handler {
	var tc propagation.TraceContext
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") != "" {
			r = r.WithContext(tc.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// queryKeys is the query string with every value replaced by "...": the
// request log shows which parameters came (now, forever) but never their
// values, so a token a client put in the query string is never logged.
func queryKeys(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil && len(q) == 0 {
		return "(unparsable)"
	}
	keys := slices.Sorted(maps.Keys(q))
	for i, k := range keys {
		keys[i] = url.QueryEscape(k) + "=..."
	}
	return strings.Join(keys, "&")
}

// statusWriter records what was answered. Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	code        int
	bytes       int64
	wroteHeader bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wroteHeader = true
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
