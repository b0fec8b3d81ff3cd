package manager

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spawnkit/spawnkit/spawner"
)

// The Manager's metrics (with Options.Registerer):
//
//	spawnkit_manager_starts_total{kind,cluster}                     starts ("start") and resumed starts ("resume") begun
//	spawnkit_manager_spawn_duration_seconds{kind,outcome,cluster} histogram: start/resume to its end; outcome ready, failed, cancelled (Stop) or detached (the term ended)
//	spawnkit_manager_failures_total{reason,cluster}                 starts that failed and servers that exited, by reason
//	spawnkit_manager_servers{phase,cluster}                         servers by phase (as Status reports it: unknown too)
//	spawnkit_manager_cluster_up{cluster}                            1 while the cluster is available, 0 while it is not
//	spawnkit_manager_split_brains_total                             servers found in more than one cluster at once
//
// cluster is "" for a Manager without Options.Clusters.
//
//	spawnkit_manager_start_phase_duration_seconds{phase,cluster}  histogram: each phase of a start (slot_wait, plan, objects, scheduling, image_pull, container_start, readiness)
//	spawnkit_manager_stops_total{outcome,cluster}                 stops that ended, stopped or failed
//	spawnkit_manager_stop_duration_seconds{outcome,cluster}       histogram: Stop to the pod gone, or failed
//	spawnkit_manager_leading                                      1 while this Manager leads, else 0
//
//	spawnkit_manager_spawns_in_flight                       starts running or queued
//	spawnkit_manager_queue_depth{queue}                     "reconcile": the workqueue; "start": starts waiting for a slot
//	spawnkit_manager_untrusted_pods_total                   pods that claim a server where its configuration does not put it (ignored)
type metrics struct {
	m              *Manager
	starts         *prometheus.CounterVec
	spawnDuration  *prometheus.HistogramVec
	failures       *prometheus.CounterVec
	spawnsInFlight prometheus.Gauge
	phase          *prometheus.HistogramVec
	stops          *prometheus.CounterVec
	stopDuration   *prometheus.HistogramVec
	leading        prometheus.Gauge
	untrusted      prometheus.Counter
	splitBrains    prometheus.Counter
	up             *prometheus.GaugeVec
	servers        *prometheus.Desc
	queueDepth     *prometheus.Desc
}

func newMetrics(m *Manager) *metrics {
	return &metrics{
		m: m,
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_manager_starts_total",
			Help: "Starts begun: kind start for Spawn, resume for a start a new leader or a restarted Manager took over.",
		}, []string{"kind", "cluster"}),
		spawnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spawnkit_manager_spawn_duration_seconds",
			Help:    "Time from a start (or resume) to its pod being ready or the start failing.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"kind", "outcome", "cluster"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_manager_failures_total",
			Help: "Failed starts and exited servers, by reason.",
		}, []string{"reason", "cluster"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "spawnkit_manager_start_phase_duration_seconds",
			Help: "Time a start spent in each phase: slot_wait, plan, objects, scheduling, image_pull (each image the node pulled), container_start, readiness; phases that ended only.",
			// 1 ms (plan) to about 27 minutes (a big image's pull).
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16),
		}, []string{"phase", "cluster"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawnkit_manager_stops_total",
			Help: "Stops that ended: outcome stopped (the pod is gone) or failed.",
		}, []string{"outcome", "cluster"}),
		stopDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spawnkit_manager_stop_duration_seconds",
			Help:    "Time from a Stop to its pod gone (or the stop failing).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12),
		}, []string{"outcome", "cluster"}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spawnkit_manager_leading",
			Help: "1 while this Manager leads (starts, stops and resumes servers), 0 while it stands by.",
		}),
		spawnsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spawnkit_manager_spawns_in_flight",
			Help: "Starts running or waiting for a start slot.",
		}),
		untrusted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spawnkit_manager_untrusted_pods_total",
			Help: "Pods ignored because they claim a server (owner annotations) outside the namespace or under another name than its configuration gives it; each counted once.",
		}),
		splitBrains: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spawnkit_manager_split_brains_total",
			Help: "Servers found with pods in more than one cluster at once (left alone until all but one are gone); each change of what was found counts once.",
		}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spawnkit_manager_cluster_up",
			Help: "1 while the cluster's informers are healthy, 0 while the cluster is unavailable (its servers are reported unknown).",
		}, []string{"cluster"}),
		servers:    prometheus.NewDesc("spawnkit_manager_servers", "Managed servers by phase, as Status reports them.", []string{"phase", "cluster"}, nil),
		queueDepth: prometheus.NewDesc("spawnkit_manager_queue_depth", "Items waiting: the reconcile workqueue, and starts waiting for a slot.", []string{"queue"}, nil),
	}
}

func (mm *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{mm.starts, mm.spawnDuration, mm.failures, mm.spawnsInFlight, mm.untrusted, mm.splitBrains, mm.up, mm,
		mm.phase, mm.stops, mm.stopDuration, mm.leading} {
		errs = append(errs, r.Register(c))
	}
	// The outcomes exist at zero from the start: an alert on
	// increase() sees the first failed stop after a restart too.
	for _, c := range mm.m.cells {
		for _, o := range []string{"stopped", "failed"} {
			mm.stops.WithLabelValues(o, c.name)
		}
	}
	return errors.Join(errs...)
}

// observeSpawn times a start that ended. A start cancelled (by Stop) or
// detached (the term ended: the next leader resumes it) did not fail a
// user, and has an outcome of its own, so that a failure ratio over
// outcome="failed" is not raised by a rollout.
func (mm *metrics) observeSpawn(kind opKind, outcome string, reason spawner.Reason, d time.Duration, cluster string) {
	if outcome == "failed" && reason != spawner.ReasonDetached {
		mm.failures.WithLabelValues(string(reason), cluster).Inc()
	}
	switch {
	case outcome != "failed":
	case reason == spawner.ReasonDetached:
		outcome = "detached"
	case reason == spawner.ReasonCancelled:
		outcome = "cancelled"
	}
	mm.spawnDuration.WithLabelValues(string(kind), outcome, cluster).Observe(d.Seconds())
}

// phaseObserver observes a start's phases in cluster.
func (mm *metrics) phaseObserver(cluster string) func(spawner.PhaseTiming) {
	return func(p spawner.PhaseTiming) {
		mm.phase.WithLabelValues(p.Phase, cluster).Observe(p.Duration.Seconds())
	}
}

func (mm *metrics) observeStop(err error, d time.Duration, cluster string) {
	outcome := "stopped"
	if err != nil {
		outcome = "failed"
	}
	mm.stops.WithLabelValues(outcome, cluster).Inc()
	mm.stopDuration.WithLabelValues(outcome, cluster).Observe(d.Seconds())
}

func (mm *metrics) leadingNow(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	mm.leading.Set(v)
}

func (mm *metrics) clusterUp(cluster string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	mm.up.WithLabelValues(cluster).Set(v)
}

// Describe and Collect make the phase and queue gauges, computed at
// scrape time.
func (mm *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- mm.servers
	ch <- mm.queueDepth
}

func (mm *metrics) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		phase   Phase
		cluster string
	}
	counts := map[key]int{}
	for _, c := range mm.m.cells {
		for _, p := range []Phase{PhaseStopped, PhaseStarting, PhaseRunning, PhaseStopping, PhaseFailed} {
			counts[key{p, c.name}] = 0
		}
		if mm.m.multi {
			counts[key{PhaseUnknown, c.name}] = 0
		}
	}
	for _, st := range mm.m.List() {
		counts[key{st.Phase, st.Cluster}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(mm.servers, prometheus.GaugeValue, float64(n), string(k.phase), k.cluster)
	}
	mm.m.mu.Lock()
	q := mm.m.queue
	mm.m.mu.Unlock()
	depth := 0
	if q != nil {
		depth = q.Len()
	}
	ch <- prometheus.MustNewConstMetric(mm.queueDepth, prometheus.GaugeValue, float64(depth), "reconcile")
	mm.m.waitingMu.Lock()
	waiting := len(mm.m.waiting)
	mm.m.waitingMu.Unlock()
	ch <- prometheus.MustNewConstMetric(mm.queueDepth, prometheus.GaugeValue, float64(waiting), "start")
}
