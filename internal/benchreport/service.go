package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ServiceOptions shape the service rows (-service-* flags).
type ServiceOptions struct {
	// Servers is how many servers the service runs (10,000).
	Servers int
	// Repeats is how many times the rows are measured (3; -repeats
	// would make a default report last hours).
	Repeats int
	// InFlight bounds the hub's starts in flight during the burst
	// (1,000).
	InFlight int
	// Settle is how long the service is left alone after the burst, and
	// after its restart, before its steady RSS is read (5 minutes).
	Settle time.Duration
	// Window is the length of the steady window and of the polling
	// window (5 minutes).
	Window time.Duration
	// PollRate is the polls per second of the polling window (0: a hub
	// polling every server every 30 s, Servers/30).
	PollRate float64
	// Profile, when set, is the path prefix of the service's heap
	// profiles once the burst has settled and once the restart has, and
	// of its CPU profile of the polling window (a build with a pprof
	// endpoint: diagnostics, off in a report).
	Profile string
	// skipQuiet skips the wait for a quiet machine between the bursts
	// (tests: their cluster is small and their timing is not read).
	skipQuiet bool
}

// serviceStartTimeout bounds the service's start to ready (a restart on
// 10,000 servers takes seconds).
const serviceStartTimeout = 5 * time.Minute

// measureService measures one cmd/spawnkit-service process, built as a
// platform team builds it and run against the cluster's API server with
// an identity of its own (serviceKubeconfig), as a hub drives it. Each
// repeat: a burst of Servers starts with the client limit the service
// had by default before issue 47 (-kube-api-qps 50 -kube-api-burst
// 100), in a namespace then deleted; the same burst with no client-side
// limit (-kube-api-qps -1, today's default), after
// which the service settles, idles for a window, serves a hub's polls
// for a window, and is restarted on the same servers: restart to ready
// against a raw informer sync and map (recovery.go), then it settles
// again. See serviceRows for the rows.
func measureService(ctx context.Context, env *Env, _ int) ([]Measure, error) {
	o := env.Service
	repeats := max(o.Repeats, 1) // -service-repeats, not -repeats
	dir, err := os.MkdirTemp("", "benchreport-service-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building cmd/spawnkit-service...")
	bin, err := buildService(ctx, dir, o.Profile != "")
	if err != nil {
		return nil, err
	}
	if _, err := serviceKubeconfig(ctx, env.Cluster, dir); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(serviceToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	unlimited, note := unlimitedArgs(ctx, bin, dir)
	if note != "" {
		fmt.Fprintln(os.Stderr, "service:", note)
	}
	rows := newServiceRows(o, unlimited)
	for r := range repeats {
		d := serviceDetail{Repeat: r + 1, UnlimitedNote: note}
		if err := serviceRepeat(ctx, env, &svcRun{bin: bin, dir: dir, n: o.Servers, o: o, unlimited: unlimited, repeat: r}, &d); err != nil {
			rows.fail(fmt.Sprintf("service repeat %d: %v", r+1, err))
			if ctx.Err() != nil {
				break
			}
		}
		rows.add(d)
	}
	return rows.list(), nil
}

// unlimitedArgs are the flags that turn the client-side limit off:
// -kube-api-qps -1 (client-go builds no token bucket unless QPS > 0).
// When the service refuses a negative QPS (its flag check), it says so
// and falls back on a limit no burst reaches.
func unlimitedArgs(ctx context.Context, bin, dir string) ([]string, string) {
	args := []string{"-kube-api-qps", "-1"}
	out, err := exec.CommandContext(ctx, bin, "-check", "-kubeconfig", filepath.Join(dir, "kubeconfig"),
		"-token-file", filepath.Join(dir, "token"), "-kube-api-qps", "-1").CombinedOutput()
	if err == nil {
		return args, ""
	}
	fallback := []string{"-kube-api-qps", "1000000", "-kube-api-burst", "1000000"}
	return fallback, fmt.Sprintf("spawnkit-service refuses -kube-api-qps -1 (%s); measuring with %s instead",
		strings.TrimSpace(string(out)), strings.Join(fallback, " "))
}

// svcRun is one repeat's fixed inputs.
type svcRun struct {
	bin, dir  string
	n         int
	o         ServiceOptions
	unlimited []string
	repeat    int
}

// config writes the service's configuration: servers in ns, the image
// and command of the spawn rows.
func (run *svcRun) config(ns string) error {
	cfg := fmt.Sprintf("namespace: %s\nimage: %s\ncmd: [jupyterhub-singleuser]\n", ns, image)
	return os.WriteFile(filepath.Join(run.dir, "config.yaml"), []byte(cfg), 0o600)
}

// serviceRepeat runs one repeat into d.
func serviceRepeat(ctx context.Context, env *Env, run *svcRun, d *serviceDetail) error {
	// The burst with the former default limit, given explicitly, in a
	// namespace of its own.
	ns, err := env.NewNamespace(ctx, "svc")
	if err != nil {
		return err
	}
	if err := run.config(ns); err != nil {
		return err
	}
	p, err := startService(run.bin, run.dir, fmt.Sprintf("r%d-default", run.repeat+1), false, "-kube-api-qps", "50", "-kube-api-burst", "100")
	if err != nil {
		return err
	}
	d.Default, err = measureCreation(ctx, env, p, run.n, run.o.InFlight, 50)
	p.stop()
	cleanupNamespace(ctx, env, ns)
	if err != nil {
		return fmt.Errorf("burst with the default limit: %w", err)
	}
	if !run.o.skipQuiet {
		if err := awaitQuiet(ctx, "the service's unlimited burst", quietBetweenRuns); err != nil {
			return err
		}
	}

	// The burst without a client-side limit; this service then settles,
	// idles, is polled and restarted.
	if ns, err = env.NewNamespace(ctx, "svc"); err != nil {
		return err
	}
	defer cleanupNamespace(ctx, env, ns)
	if err := run.config(ns); err != nil {
		return err
	}
	pprof := run.o.Profile != ""
	p, err = startService(run.bin, run.dir, fmt.Sprintf("r%d-unlimited", run.repeat+1), pprof, run.unlimited...)
	if err != nil {
		return err
	}
	defer func() {
		if p != nil {
			p.stop() // the restarted one, once there is one
		}
	}()
	if d.Unlimited, err = measureCreation(ctx, env, p, run.n, run.o.InFlight, 0); err != nil {
		return fmt.Errorf("burst without a client-side limit: %w", err)
	}
	if d.RSSAfterBurst, err = p.rssMiB(); err != nil {
		return err
	}
	d.MemAfterBurst = memstats(ctx, p)
	fmt.Fprintf(os.Stderr, "service: RSS right after the burst %.0f MiB %v\n", d.RSSAfterBurst, d.MemAfterBurst)
	if d.Settled, err = settleRSS(ctx, p, run.o.Settle, "after the burst"); err != nil {
		return err
	}
	d.MemSettled = memstats(ctx, p)
	if err := saveProfile(ctx, p, run, "burst"); err != nil {
		return err
	}
	steady, err := measureSteady(ctx, env, p, run.o.Window)
	if err != nil {
		return err
	}
	d.Steady = &steady
	poll, err := measurePolling(ctx, p, run.n, run.o, profilePath(run, "poll.cpu"))
	if err != nil {
		return err
	}
	d.Poll = &poll

	// The restart on the same servers, against a raw informer sync.
	p.stop()
	begin := time.Now()
	p, err = startService(run.bin, run.dir, fmt.Sprintf("r%d-restart", run.repeat+1), pprof, run.unlimited...)
	if err != nil {
		p = nil
		return err
	}
	if err := p.waitReady(ctx, serviceStartTimeout); err != nil {
		return err
	}
	c := newSvcClient(p, 1)
	running, err := c.countRunning(ctx)
	d.RestartMs = ms(time.Since(begin))
	d.RestartLogLines = strings.Count(p.tail(-1), "\n") + 1
	c.close()
	if err != nil {
		return err
	}
	if running != run.n {
		return fmt.Errorf("the restarted service lists %d servers running, want %d", running, run.n)
	}
	raw, err := rawRecovery(ctx, env.Client, ns, run.n)
	if err != nil {
		return err
	}
	d.RawRecoveryMs = ms(raw)
	fmt.Fprintf(os.Stderr, "service: restart to ready %.0f ms (raw informer sync and map: %.0f ms); it logged %d lines\n", d.RestartMs, d.RawRecoveryMs, d.RestartLogLines)
	if d.RestartSettled, err = settleRSS(ctx, p, run.o.Settle, "after the restart"); err != nil {
		return err
	}
	d.MemAfterRestart = memstats(ctx, p)
	return saveProfile(ctx, p, run, "restart")
}

// rssSamples are RSS readings over a settle window, in MiB.
type rssSamples struct {
	Min, Median, Final float64
	Samples            []float64 `json:",omitempty"`
}

// settleRSS leaves the service alone for d, reading its RSS about 60 times
// (at most once a second).
func settleRSS(ctx context.Context, p *svcProc, d time.Duration, what string) (rssSamples, error) {
	every := max(time.Second, d/60)
	var xs []float64
	for end := time.Now().Add(d); ; {
		rss, err := p.rssMiB()
		if err != nil {
			return rssSamples{}, err
		}
		xs = append(xs, rss)
		if !time.Now().Before(end) {
			break
		}
		select {
		case <-ctx.Done():
			return rssSamples{}, context.Cause(ctx)
		case <-time.After(min(every, time.Until(end))):
		}
	}
	s := summarize(xs)
	r := rssSamples{Min: s.Min, Median: s.Median, Final: xs[len(xs)-1], Samples: xs}
	fmt.Fprintf(os.Stderr, "service: RSS over %v %s: min %.0f, median %.0f, final %.0f MiB\n", d, what, r.Min, r.Median, r.Final)
	return r, nil
}

// memstats are the Go runtime's memory gauges from the service's
// /metrics, in MiB (goroutines as a count).
func memstats(ctx context.Context, p *svcProc) map[string]float64 {
	m, err := p.metrics(ctx)
	if err != nil {
		return map[string]float64{"error": -1}
	}
	out := map[string]float64{}
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_heap_idle_bytes",
		"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes"} {
		v, _ := m.sum(name)
		out[strings.TrimSuffix(strings.TrimPrefix(name, "go_memstats_"), "_bytes")+"_mib"] = v / (1 << 20)
	}
	out["goroutines"], _ = m.sum("go_goroutines")
	out["rss_anon_mib"], _ = p.status("RssAnon")
	out["rss_file_mib"], _ = p.status("RssFile")
	return out
}

// profilePath is where a profile of the repeat goes ("" for none).
func profilePath(run *svcRun, what string) string {
	if run.o.Profile == "" {
		return ""
	}
	return fmt.Sprintf("%s-r%d-%s.pprof", run.o.Profile, run.repeat+1, what)
}

// saveProfile writes the service's heap profile, then (a diagnostic
// beside it) says what its RSS is once debug.FreeOSMemory has returned
// every free page: the RSS above that is the runtime's to give back.
func saveProfile(ctx context.Context, p *svcProc, run *svcRun, when string) error {
	path := profilePath(run, when)
	if path == "" {
		return nil
	}
	defer func() {
		if err := p.freeOSMemory(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "service: FreeOSMemory:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "service: %s, after debug.FreeOSMemory: %v\n", when, memstats(ctx, p))
	}()
	if err := p.profile(ctx, "heap?gc=1", path); err != nil {
		return fmt.Errorf("the service's heap profile %s: %w", when, err)
	}
	fmt.Fprintln(os.Stderr, "service: wrote", path)
	return nil
}

// steadyResult is the service idle: its CPU and its API requests.
type steadyResult struct {
	CPUPercent     float64 // of one core
	RequestsPerMin float64
}

// measureSteady reads the service's CPU time and its API requests (the
// API server's flow-control count for the service-accounts schema,
// which holds the service's requests alone) over window.
func measureSteady(ctx context.Context, env *Env, p *svcProc, window time.Duration) (steadyResult, error) {
	a0, err := apiServerMetrics(ctx, env.Cluster.Client)
	if err != nil {
		return steadyResult{}, err
	}
	cpu0, err := p.cpu()
	if err != nil {
		return steadyResult{}, err
	}
	begin := time.Now()
	select {
	case <-ctx.Done():
		return steadyResult{}, context.Cause(ctx)
	case <-time.After(window):
	}
	cpu1, err := p.cpu()
	if err != nil {
		return steadyResult{}, err
	}
	elapsed := time.Since(begin)
	a1, err := apiServerMetrics(ctx, env.Cluster.Client)
	if err != nil {
		return steadyResult{}, err
	}
	r0, _ := a0.sum(apfDispatched, "flow_schema", serviceFlowSchema)
	r1, _ := a1.sum(apfDispatched, "flow_schema", serviceFlowSchema)
	res := steadyResult{CPUPercent: 100 * float64(cpu1-cpu0) / float64(elapsed), RequestsPerMin: (r1 - r0) / elapsed.Minutes()}
	fmt.Fprintf(os.Stderr, "service: steady over %v: CPU %.2f%% of a core, %.1f API requests/min\n", window, res.CPUPercent, res.RequestsPerMin)
	return res, nil
}

// pollWindow is the polling load's outcome.
type pollWindow struct {
	pollResult
	Rate       float64 // polls per second asked for
	CPUPercent float64 // the service's, of one core
}

// measurePolling drives a hub's polls (GET of each server's status, the
// Python spawner's poll) at o.PollRate for o.Window and reads the
// service's CPU over it; with cpuProfile, it writes the service's CPU
// profile of the window there.
func measurePolling(ctx context.Context, p *svcProc, n int, o ServiceOptions, cpuProfile string) (pollWindow, error) {
	w := pollWindow{Rate: o.PollRate}
	if w.Rate <= 0 {
		w.Rate = float64(n) / 30
	}
	c := newSvcClient(p, maxPollsInFlight)
	defer c.close()
	cpu0, err := p.cpu()
	if err != nil {
		return w, err
	}
	var profiled chan error
	if cpuProfile != "" {
		profiled = make(chan error, 1)
		go func() {
			profiled <- p.profile(ctx, fmt.Sprintf("profile?seconds=%d", max(1, int(o.Window.Seconds())-1)), cpuProfile)
		}()
	}
	begin := time.Now()
	res, err := c.pollLoad(ctx, n, w.Rate, o.Window)
	cpu1, cerr := p.cpu()
	if profiled != nil {
		cerr = errors.Join(cerr, <-profiled)
	}
	w.pollResult, w.CPUPercent = res, 100*float64(cpu1-cpu0)/float64(time.Since(begin))
	if err := errors.Join(err, cerr); err != nil {
		return w, err
	}
	fmt.Fprintf(os.Stderr, "service: %d polls at %.0f/s over %v: CPU %.2f%% of a core, p50 %v, p99 %v, %d late\n",
		res.Sent, w.Rate, o.Window, w.CPUPercent, res.P50, res.P99, res.Late)
	return w, nil
}
