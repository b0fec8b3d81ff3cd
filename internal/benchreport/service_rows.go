package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

const (
	// apfDispatched counts the requests API Priority and Fairness let
	// through, by flow schema; serviceFlowSchema is the measured
	// service's (serviceKubeconfig).
	apfDispatched     = "apiserver_flowcontrol_dispatched_requests_total"
	serviceFlowSchema = "service-accounts"
	// startPhases is the Manager's histogram of a start's phases.
	startPhases = "spawnkit_manager_start_phase_duration_seconds"
)

// creationResult is one burst: its rate, and where a start's time went.
// Times are means per start in milliseconds.
type creationResult struct {
	QPS          float64 // the service's -kube-api-qps (0: none)
	Seconds      float64 // from the first start sent until all are ready
	StartsPerSec float64
	// RequestsPerStart are the API requests the service made during
	// the burst per start (flow-control count, watches included).
	RequestsPerStart float64
	// Ceiling is the rate the client-side limit allows,
	// QPS/RequestsPerStart (0 without a limit).
	Ceiling float64
	// Phases are the Manager's own (spawnkit_manager_start_phase_*):
	// slot_wait is the queue behind ConcurrentSpawnLimit, objects the
	// creates (client limiter and API server), scheduling the pod's
	// create to its binding, container_start and readiness kwok's.
	Phases map[string]float64
	// APIPostSecret and APIPostPod are the API server's latencies of
	// those creates (apiserver_request_duration_seconds); APFWait is its
	// flow-control queueing of the service's requests.
	APIPostSecret, APIPostPod, APFWait float64
	// Limiter is the objects phase minus the API server's time for the
	// two creates: the wait in client-go's token bucket, and the
	// client's own work and the network (what is left of it without a
	// limit is those).
	Limiter float64
	// Limit names what bounded the rate (the largest share of a start
	// slot's time), with the shares.
	Limit string
}

// measureCreation starts n servers through p at most inFlight at once,
// as a hub does, until every one is ready and the service lists them all
// running, and reads where the time went from the service's metrics and
// the API server's.
func measureCreation(ctx context.Context, env *Env, p *svcProc, n, inFlight int, qps float64) (creationResult, error) {
	res := creationResult{QPS: qps}
	if err := p.waitReady(ctx, serviceStartTimeout); err != nil {
		return res, err
	}
	a0, err := apiServerMetrics(ctx, env.Cluster.Client)
	if err != nil {
		return res, err
	}
	c := newSvcClient(p, inFlight)
	defer c.close()
	begin := time.Now()
	if err := c.burst(ctx, n, inFlight); err != nil {
		return res, err
	}
	elapsed := time.Since(begin)
	running, err := c.countRunning(ctx)
	if err != nil {
		return res, err
	}
	if running != n {
		return res, fmt.Errorf("the service lists %d servers running after the burst, want %d", running, n)
	}
	a1, err := apiServerMetrics(ctx, env.Cluster.Client)
	if err != nil {
		return res, err
	}
	s, err := p.metrics(ctx)
	if err != nil {
		return res, err
	}
	res.Seconds, res.StartsPerSec = elapsed.Seconds(), float64(n)/elapsed.Seconds()
	r0, _ := a0.sum(apfDispatched, "flow_schema", serviceFlowSchema)
	r1, _ := a1.sum(apfDispatched, "flow_schema", serviceFlowSchema)
	res.RequestsPerStart = (r1 - r0) / float64(n)
	if qps > 0 && res.RequestsPerStart > 0 {
		res.Ceiling = qps / res.RequestsPerStart
	}
	res.Phases = map[string]float64{}
	for _, ph := range []string{"slot_wait", "plan", "objects", "scheduling", "container_start", "readiness"} {
		sum, count := s.sum(startPhases, "phase", ph)
		if count > 0 {
			res.Phases[ph] = sum / count * 1000
		}
	}
	res.APIPostSecret, _ = meanDelta(a0, a1, "apiserver_request_duration_seconds", "verb", "POST", "resource", "secrets", "subresource", "")
	res.APIPostPod, _ = meanDelta(a0, a1, "apiserver_request_duration_seconds", "verb", "POST", "resource", "pods", "subresource", "")
	res.APFWait, _ = meanDelta(a0, a1, "apiserver_flowcontrol_request_wait_duration_seconds", "flow_schema", serviceFlowSchema, "execute", "true")
	res.Limiter = max(0, res.Phases["objects"]-res.APIPostSecret-res.APIPostPod)
	res.Limit = creationLimit(res)
	fmt.Fprintf(os.Stderr, "service: %d starts (qps %g) in %.1f s: %.1f starts/s (client-side ceiling %.1f), %.2f API requests per start; per start: %s; API server POST secret %.1f ms, POST pod %.1f ms, flow-control wait %.1f ms; limit: %s\n",
		n, qps, res.Seconds, res.StartsPerSec, res.Ceiling, res.RequestsPerStart, phaseLine(res.Phases),
		res.APIPostSecret, res.APIPostPod, res.APFWait, res.Limit)
	return res, nil
}

// creationLimit names what bounded a burst. A rate within 20% of the
// client-side limit's ceiling is that limit's. Otherwise: starts beyond
// the Manager's ConcurrentSpawnLimit wait in its queue (slot_wait), so by
// Little's law the rate is the slots over the time a start holds one,
// and whatever takes most of that time is the limit. The time splits
// into the client side (the limiter, the client's work, the network),
// the API server (both creates), the scheduler and kwok's simulated
// kubelet (container start and readiness).
func creationLimit(r creationResult) string {
	shares := []struct {
		name string
		ms   float64
	}{
		{"client side (-kube-api-qps limiter, client, network)", r.Limiter},
		{"API server", r.APIPostSecret + r.APIPostPod},
		{"scheduler", r.Phases["scheduling"]},
		{"kubelet (kwok)", r.Phases["container_start"] + r.Phases["readiness"]},
		{"spawnkit (plan)", r.Phases["plan"]},
	}
	total, best := 0.0, 0
	for i, s := range shares {
		total += s.ms
		if s.ms > shares[best].ms {
			best = i
		}
	}
	if total == 0 {
		return "unknown (no phase observed)"
	}
	var parts []string
	for _, s := range shares {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", s.name, 100*s.ms/total))
	}
	limit := shares[best].name
	if r.Ceiling > 0 && r.StartsPerSec >= 0.8*r.Ceiling {
		limit = fmt.Sprintf("client-side limiter (%.0f%% of its ceiling of %.1f starts/s)", 100*r.StartsPerSec/r.Ceiling, r.Ceiling)
	}
	return fmt.Sprintf("%s (of a start slot's time: %s; queued for a slot %.0f ms)", limit, strings.Join(parts, ", "), r.Phases["slot_wait"])
}

func phaseLine(p map[string]float64) string {
	var parts []string
	for _, ph := range []string{"slot_wait", "plan", "objects", "scheduling", "container_start", "readiness"} {
		parts = append(parts, fmt.Sprintf("%s %.1f ms", ph, p[ph]))
	}
	return strings.Join(parts, ", ")
}

// serviceDetail is one repeat of the service rows, in the JSON.
type serviceDetail struct {
	Repeat             int
	UnlimitedNote      string `json:",omitempty"`
	Default, Unlimited creationResult
	RSSAfterBurst      float64 // MiB, right after the burst
	MemAfterBurst      map[string]float64
	Settled            rssSamples // after the burst
	MemSettled         map[string]float64
	Steady             *steadyResult // nil: not measured
	Poll               *pollWindow
	RestartMs          float64 // the restarted process's exec to all listed running
	RestartLogLines    int     // lines the restarted service logged until ready
	RawRecoveryMs      float64
	RestartSettled     rssSamples
	MemAfterRestart    map[string]float64
}

// serviceRows are the service group's rows, filled a repeat at a time.
type serviceRows struct {
	rows []*Measure
	// fill gives a row's values of a repeat: spawnkit's, or spawnkit's
	// and raw's; none when that part of the repeat did not run.
	fill    []func(d serviceDetail) []float64
	details []serviceDetail
}

func newServiceRows(o ServiceOptions, unlimited []string) *serviceRows {
	r := &serviceRows{}
	n := count(o.Servers)
	add := func(m Measure, fill func(d serviceDetail) []float64) {
		r.rows, r.fill = append(r.rows, &m), append(r.fill, fill)
	}
	// own is a row of the service's values alone, when ran says that
	// part of the repeat ran.
	own := func(ran func(d serviceDetail) bool, f func(d serviceDetail) float64) func(d serviceDetail) []float64 {
		return func(d serviceDetail) []float64 {
			if !ran(d) {
				return nil
			}
			return []float64{f(d)}
		}
	}
	burst := func(d serviceDetail) bool { return d.RSSAfterBurst > 0 }
	settled := func(d serviceDetail) bool { return d.Settled.Final > 0 }
	steady := func(d serviceDetail) bool { return d.Steady != nil }
	polled := func(d serviceDetail) bool { return d.Poll != nil }
	for _, v := range []struct {
		flags string
		pick  func(d serviceDetail) creationResult
	}{
		{"-kube-api-qps 50 (the former default)", func(d serviceDetail) creationResult { return d.Default }},
		{strings.Join(unlimited, " "), func(d serviceDetail) creationResult { return d.Unlimited }},
	} {
		add(Measure{Name: fmt.Sprintf("service: creation of %s servers, %d in flight, %s", n, o.InFlight, v.flags), Unit: "starts/s", Better: Higher},
			own(func(d serviceDetail) bool { return v.pick(d).Seconds > 0 }, func(d serviceDetail) float64 { return v.pick(d).StartsPerSec }))
		for _, part := range []struct {
			name string
			f    func(c creationResult) float64
		}{
			{"queued for a start slot", func(c creationResult) float64 { return c.Phases["slot_wait"] }},
			{"creates outside the API server (client-side limiter, client, network)", func(c creationResult) float64 { return c.Limiter }},
			{"API server (POST Secret + POST pod)", func(c creationResult) float64 { return c.APIPostSecret + c.APIPostPod }},
			{"scheduling", func(c creationResult) float64 { return c.Phases["scheduling"] }},
		} {
			add(Measure{Name: fmt.Sprintf("  per start, %s (%s)", part.name, v.flags), Unit: "ms", Better: Lower},
				own(func(d serviceDetail) bool { return v.pick(d).Seconds > 0 }, func(d serviceDetail) float64 { return part.f(v.pick(d)) }))
		}
	}
	add(Measure{Name: fmt.Sprintf("service: RSS right after the burst of %s", n), Unit: "MiB", Better: Lower},
		own(burst, func(d serviceDetail) float64 { return d.RSSAfterBurst }))
	add(Measure{Name: fmt.Sprintf("service: steady RSS %v after the burst", o.Settle), Unit: "MiB", Better: Lower,
		Goal: &Goal{Of: "spawnkit", Value: 150}}, own(settled, func(d serviceDetail) float64 { return d.Settled.Final }))
	add(Measure{Name: "service: steady RSS after the burst vs after a restart on the same servers", Unit: "MiB", Better: Lower,
		Goal: &Goal{Of: "ratio", Value: 1.2}}, func(d serviceDetail) []float64 {
		if d.RestartSettled.Final == 0 {
			return nil
		}
		return []float64{d.Settled.Final, d.RestartSettled.Final}
	})
	// VmRSS counts the binary's mapped pages (RssFile, about 45-50 MiB,
	// the same in both): the anonymous part is what the burst left.
	add(Measure{Name: "  anonymous part of it (RssAnon)", Unit: "MiB", Better: Lower}, func(d serviceDetail) []float64 {
		if d.MemSettled["rss_anon_mib"] <= 0 || d.MemAfterRestart["rss_anon_mib"] <= 0 {
			return nil
		}
		return []float64{d.MemSettled["rss_anon_mib"], d.MemAfterRestart["rss_anon_mib"]}
	})
	add(Measure{Name: fmt.Sprintf("service: steady CPU, %s servers idle for %v", n, o.Window), Unit: "% core", Better: Lower},
		own(steady, func(d serviceDetail) float64 { return d.Steady.CPUPercent }))
	add(Measure{Name: "service: steady API requests (flow-control count)", Unit: "req/min", Better: Lower},
		own(steady, func(d serviceDetail) float64 { return d.Steady.RequestsPerMin }))
	add(Measure{Name: fmt.Sprintf("service: restart to ready on %s servers (process start to all listed vs informer sync+map)", n), Unit: "ms", Better: Lower},
		func(d serviceDetail) []float64 {
			if d.RawRecoveryMs == 0 {
				return nil
			}
			return []float64{d.RestartMs, d.RawRecoveryMs}
		})
	rate := "servers/30 s"
	if o.PollRate > 0 {
		rate = fmt.Sprintf("%g/s", o.PollRate)
	}
	add(Measure{Name: fmt.Sprintf("service: CPU under a hub's polls (%s for %v)", rate, o.Window), Unit: "% core", Better: Lower,
		Goal: &Goal{Of: "spawnkit", Value: 10}}, own(polled, func(d serviceDetail) float64 { return d.Poll.CPUPercent }))
	add(Measure{Name: "  poll latency p50", Unit: "ms", Better: Lower}, own(polled, func(d serviceDetail) float64 { return ms(d.Poll.P50) }))
	add(Measure{Name: "  poll latency p99", Unit: "ms", Better: Lower, Goal: &Goal{Of: "spawnkit", Value: 5}},
		own(polled, func(d serviceDetail) float64 { return ms(d.Poll.P99) }))
	return r
}

// add records a repeat: a row gets a value only when its part of the
// repeat ran (a repeat that failed half-way keeps the values it made).
func (r *serviceRows) add(d serviceDetail) {
	r.details = append(r.details, d)
	for i, m := range r.rows {
		switch v := r.fill[i](d); len(v) {
		case 1:
			m.Spawnkit = append(m.Spawnkit, v[0])
		case 2:
			m.Add(v[0], v[1])
		}
	}
}

func (r *serviceRows) fail(why string) {
	fmt.Fprintln(os.Stderr, "benchreport:", why)
	for _, m := range r.rows {
		m.Failed = append(m.Failed, why)
	}
}

func (r *serviceRows) list() []Measure {
	out := make([]Measure, len(r.rows))
	for i, m := range r.rows {
		out[i] = *m
	}
	out[0].Detail = r.details
	return out
}
