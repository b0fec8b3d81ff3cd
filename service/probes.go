package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
)

// ProbeOptions configure Probes. Manager is required.
type ProbeOptions struct {
	// Manager is the Manager the API serves.
	Manager *manager.Manager
	// Ping asks the API server a question that any identity may ask
	// (cmd/spawnkit-service asks for its version: GET /version is open
	// to every authenticated client by Kubernetes' default RBAC), bounded
	// by its ctx. Nil: readiness does not check the API server.
	Ping func(ctx context.Context) error
	// PingTimeout bounds Ping; a readiness probe also reuses an answer
	// younger than PingTimeout, so that probes (which need no token)
	// cannot be used to flood the API server. Default: 5 s.
	PingTimeout time.Duration
	// Namespaces reports, bounded by its ctx, whether the namespaces new
	// servers start in exist (cmd/spawnkit-service asks with a dry-run
	// create in each: a missing namespace would fail every start there,
	// while the pod informer of that namespace syncs, empty, as if all
	// were well). failed makes /readyz fail (the configured namespace is
	// missing: no start can succeed); degraded is printed as
	// "[!]namespaces degraded" and the replica stays ready (a profile's
	// namespace, another cluster's: the rest works). An error wrapping
	// ErrNotChecked (the API server did not say) is shown as degraded
	// and not reused. Other answers are reused for NamespacesEvery, a
	// failure for PingTimeout. Nil: not checked.
	Namespaces func(ctx context.Context) (failed, degraded error)
	// NamespacesEvery is how long a success of Namespaces is reused (a
	// failure, PingTimeout). Default: 30 s.
	NamespacesEvery time.Duration
	// Gatherer serves /metrics (prometheus.DefaultGatherer for the
	// process's runtime metrics plus what was registered there). Nil: no
	// /metrics.
	Gatherer prometheus.Gatherer
}

// Probes returns the handler for Kubernetes' probes and Prometheus,
// meant for an address of its own, without the API's token (they carry no
// user data: no names, no URLs, no options):
//
//	GET /livez    200 while the process serves and the Manager's loops turn
//	              (Manager.Live); 500 naming what is wedged
//	GET /readyz   200 once the Manager has recovered the cluster's servers,
//	              its pod informer has synced, it leads (with election), and
//	              the API server answered Ping within PingTimeout, and
//	              Namespaces finds the configured namespace ("[-]namespaces
//	              failed: namespace \"x\" does not exist ..."; a profile's
//	              missing namespace is "[!]namespaces degraded"); else 503.
//	              With several clusters, one line per cluster
//	              ("cluster/<name>"): 200 while one of them serves, the
//	              others printed "[!]cluster/<name> degraded: why" (their
//	              servers are unknown, their starts fail fast); Ping is
//	              the default cluster's
//	GET /metrics  Prometheus text format, from Gatherer
//
// The bodies follow the API server's own /readyz: one "[+]name ok" or
// "[-]name failed: reason" line per check, then a verdict.
func Probes(opts ProbeOptions) (http.Handler, error) {
	if opts.Manager == nil {
		return nil, errors.New("service: ProbeOptions.Manager is required")
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = 5 * time.Second
	}
	if opts.NamespacesEvery <= 0 {
		opts.NamespacesEvery = 30 * time.Second
	}
	p := &probes{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", p.livez)
	mux.HandleFunc("GET /readyz", p.readyz)
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux, nil
}

type probes struct {
	opts ProbeOptions
	// mu guards the last ping's outcome; a probe that finds it fresh
	// reuses it.
	mu      sync.Mutex
	pinged  time.Time
	pingErr error
	// nsMu guards the last namespace check's outcome likewise.
	nsMu                 sync.Mutex
	nsChecked            time.Time
	nsFailed, nsDegraded error
}

// ErrNotChecked marks a ProbeOptions.Namespaces answer that says nothing
// about the namespaces (the API server did not answer in time): shown,
// never reused.
var ErrNotChecked = errors.New("not checked")

type check struct {
	name string
	err  error
	// degraded: err is printed ("[!]name degraded: err") but does not
	// fail the probe.
	degraded bool
}

func (p *probes) livez(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	writeChecks(w, http.StatusInternalServerError, "livez", []check{{name: "manager", err: p.opts.Manager.Live(ctx)}})
}

func (p *probes) readyz(w http.ResponseWriter, r *http.Request) {
	h := p.opts.Manager.Health()
	checks := []check{{name: "manager"}}
	if !h.Running {
		checks[0].err = errors.New("has not recovered the cluster's servers yet, or has stopped")
	}
	if len(h.Clusters) > 1 {
		checks = append(checks, p.clusterChecks(r.Context(), h)...)
	} else {
		checks = append(checks, check{name: "informers", err: podsErr(h.Pods)})
	}
	if h.Electing {
		c := check{name: "leader"}
		switch {
		case h.Leading:
		case h.LeaseError != nil:
			c.err = fmt.Errorf("cannot reach the Lease since %s: %w", h.LeaseErrorSince.UTC().Format(time.RFC3339), h.LeaseError)
		default:
			c.err = errors.New("standing by: another replica holds the Lease")
		}
		checks = append(checks, c)
	}
	// The namespace check runs beside the ping, so that the two fit in
	// one PingTimeout (a probe's own timeout is little more).
	var ns check
	var wg sync.WaitGroup
	if p.opts.Namespaces != nil && h.Running {
		wg.Go(func() { ns = p.namespaces(r.Context()) })
	}
	if p.opts.Ping != nil && len(h.Clusters) <= 1 {
		checks = append(checks, check{name: "apiserver", err: p.ping(r.Context())})
	}
	wg.Wait()
	if ns.name != "" {
		checks = append(checks, ns)
	}
	writeChecks(w, http.StatusServiceUnavailable, "readyz", checks)
}

// namespaces runs Namespaces, or reuses an answer younger than
// NamespacesEvery (a failure: PingTimeout); concurrent probes share one
// call. The call is not cut short by a probe that goes away, so that
// its answer is one the API server gave.
func (p *probes) namespaces(ctx context.Context) check {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	reuse := p.opts.NamespacesEvery
	if p.nsFailed != nil || p.nsDegraded != nil {
		reuse = p.opts.PingTimeout // a namespace created to mend it counts at the next probes
	}
	if p.nsChecked.IsZero() || time.Since(p.nsChecked) >= reuse {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.PingTimeout)
		defer cancel()
		failed, degraded := p.opts.Namespaces(ctx)
		if errors.Is(failed, ErrNotChecked) || errors.Is(degraded, ErrNotChecked) {
			p.nsChecked = time.Time{}
			return check{name: "namespaces", err: errors.Join(failed, degraded), degraded: true}
		}
		p.nsChecked, p.nsFailed, p.nsDegraded = time.Now(), failed, degraded
	}
	switch {
	case p.nsFailed != nil:
		return check{name: "namespaces", err: errors.Join(p.nsFailed, p.nsDegraded)}
	case p.nsDegraded != nil:
		return check{name: "namespaces", err: p.nsDegraded, degraded: true}
	}
	return check{name: "namespaces"}
}

// clusterChecks are a Manager's with several clusters: one check per
// cluster ("cluster/<name>": its informers, whether the Manager holds it
// unavailable, and for the default cluster Ping). A replica with one
// cluster serving is ready, as Health.Ready says: the others' failures
// are printed as degraded ("[!]") and fail the probe only when no
// cluster serves.
func (p *probes) clusterChecks(ctx context.Context, h manager.Health) []check {
	checks := make([]check, len(h.Clusters))
	serving := false
	for i, c := range h.Clusters {
		err := podsErr(c.Pods)
		if err == nil {
			err = c.Err()
		}
		if err == nil && i == 0 && p.opts.Ping != nil {
			err = p.ping(ctx)
		}
		checks[i] = check{name: "cluster/" + c.Name, err: err}
		serving = serving || err == nil
	}
	if serving {
		for i := range checks {
			checks[i].degraded = checks[i].err != nil
		}
	}
	return checks
}

func podsErr(pods reflector.Status) error {
	switch {
	case !pods.Synced && pods.LastError != nil:
		return fmt.Errorf("the pod informer has not synced; last list or watch error: %w", pods.LastError)
	case !pods.Synced:
		return errors.New("the pod informer has not synced")
	case pods.Denied != nil:
		return fmt.Errorf("the pod informer is refused by the API server: %w", pods.Denied)
	}
	return nil
}

// ping asks the API server, or reuses an answer younger than
// PingTimeout. Concurrent probes share one call (the lock is held
// through it).
func (p *probes) ping(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pinged.IsZero() && time.Since(p.pinged) < p.opts.PingTimeout {
		return p.pingErr
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.PingTimeout)
	defer cancel()
	err := p.opts.Ping(ctx)
	if err != nil {
		err = fmt.Errorf("the API server did not answer within %s: %w", p.opts.PingTimeout, err)
	}
	p.pinged, p.pingErr = time.Now(), err
	return err
}

func writeChecks(w http.ResponseWriter, failCode int, name string, checks []check) {
	var b strings.Builder
	failed := false
	var degraded []string
	for _, c := range checks {
		if c.err != nil && c.degraded {
			degraded = append(degraded, c.name)
			fmt.Fprintf(&b, "[!]%s degraded: %s\n", c.name, oneLine(c.err))
		} else if c.err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.name, oneLine(c.err))
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	code := http.StatusOK
	if failed {
		code = failCode
		fmt.Fprintf(&b, "%s check failed\n", name)
	} else if len(degraded) > 0 {
		fmt.Fprintf(&b, "%s check passed, degraded: %s\n", name, strings.Join(degraded, ", "))
	} else {
		fmt.Fprintf(&b, "%s check passed\n", name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
