package service

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics count and time the API's requests by route (the mux's
// pattern, never a user's name), method and code; nil-safe without a
// Registerer.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics(r prometheus.Registerer) (*requestMetrics, error) {
	if r == nil {
		return nil, nil
	}
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_service_http_requests_total",
			Help: "API requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "spawnkit_service_http_request_duration_seconds",
			Help: "Time to answer an API request (a progress stream: until it ends), by route pattern and method.",
			// 1 ms to about 2 minutes: a stop waits for the pod to go.
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := r.Register(c); err != nil {
			return nil, errors.Join(errors.New("service: registering the request metrics"), err)
		}
	}
	return m, nil
}

// instrument wraps next; mux gives the route of a request (without
// serving it), so that paths with user names collapse into their
// pattern and unknown paths into "other".
func (m *requestMetrics) instrument(mux *http.ServeMux, next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw, ok := w.(*statusWriter)
		if !ok {
			sw = &statusWriter{ResponseWriter: w, code: http.StatusOK}
		}
		next.ServeHTTP(sw, r)
		route := "other"
		// The router set r.Pattern when it served the request; only a
		// request refused before it (a wrong token) is routed again.
		pattern := r.Pattern
		if pattern == "" {
			_, pattern = mux.Handler(r)
		}
		if pattern != "" {
			route = pattern
			if _, path, ok := cutMethod(pattern); ok {
				route = path
			}
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodOptions:
		default:
			method = "other" // a client's invented method must not grow the label set
		}
		m.requests.WithLabelValues(route, method, strconv.Itoa(sw.code)).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// cutMethod splits "GET /path" into its method and path.
func cutMethod(pattern string) (method, path string, ok bool) {
	for i := range len(pattern) {
		if pattern[i] == ' ' {
			return pattern[:i], pattern[i+1:], true
		}
	}
	return "", pattern, false
}
