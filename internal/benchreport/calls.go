package main

import (
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"
)

// callCounter counts API requests by verb and resource. It is safe for
// concurrent use.
type callCounter struct {
	mu     sync.Mutex // guards counts and created
	counts map[string]int
	// created are the times pod creates were answered, for phase timings.
	created []time.Time
}

func newCallCounter() *callCounter { return &callCounter{counts: map[string]int{}} }

// wrap is a rest.Config.WrapTransport: every request through rt is
// counted before it is sent.
func (c *callCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		key := callKey(req)
		c.mu.Lock()
		c.counts[key]++
		c.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if key == "POST pods" && err == nil {
			now := time.Now()
			c.mu.Lock()
			c.created = append(c.created, now)
			c.mu.Unlock()
		}
		return resp, err
	})
}

// createdSince returns the times pod creates were answered since begin,
// as durations from begin.
func (c *callCounter) createdSince(begin time.Time) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.created {
		if !t.Before(begin) {
			out = append(out, t.Sub(begin))
		}
	}
	return out
}

// snapshot returns a copy of the counts so far.
func (c *callCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// callKey is "VERB resource" for a request to the API server: the verb is
// the HTTP method, except that a GET is LIST on a collection and WATCH
// with ?watch; the resource includes a subresource ("pods/status").
// Anything else (discovery, /healthz) is "VERB path".
func callKey(req *http.Request) string {
	verb := req.Method
	path := strings.Trim(req.URL.Path, "/")
	var rest []string
	switch parts := strings.Split(path, "/"); {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:] // api/v1/...
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:] // apis/group/version/...
	default:
		return verb + " /" + path
	}
	// namespaces/<ns>/<resource>/... is namespaced; namespaces/<ns> alone
	// is the namespace itself.
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return verb + " /" + path
	}
	resource := rest[0]
	named := len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	if verb == http.MethodGet && !named {
		verb = "LIST"
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			verb = "WATCH"
		}
	}
	if verb == http.MethodDelete && !named {
		verb = "DELETECOLLECTION"
	}
	return verb + " " + resource
}

// perSpawn is (after - before) / spawns for every key that changed.
func perSpawn(before, after map[string]int, spawns int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = float64(d) / float64(spawns)
		}
	}
	return out
}

// total sums a per-spawn breakdown.
func total(calls map[string]float64) float64 {
	var t float64
	for _, v := range calls {
		t += v
	}
	return t
}
