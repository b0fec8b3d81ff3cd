package reflector

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	objectsDesc = prometheus.NewDesc("spawnkit_reflector_objects",
		"Objects cached by a shared informer.", []string{"resource", "namespace", "selector"}, nil)
	errorsDesc = prometheus.NewDesc("spawnkit_reflector_watch_errors_total",
		"List and watch errors of a shared informer.", []string{"resource", "namespace", "selector"}, nil)
	ageDesc = prometheus.NewDesc("spawnkit_reflector_last_success_age_seconds",
		"Seconds since a shared informer's last successful list or watch call.", []string{"resource", "namespace", "selector"}, nil)
	healthyDesc = prometheus.NewDesc("spawnkit_reflector_healthy",
		"1 when a shared informer has synced and its latest list or watch call succeeded.", []string{"resource", "namespace", "selector"}, nil)
)

// collector reports the registry's informers at scrape time, so metrics
// cost nothing between scrapes and never outlive their informer.
type collector struct{ r *Registry }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- errorsDesc
	ch <- ageDesc
	ch <- healthyDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	now := c.r.clock.Now()
	for k, s := range c.r.Status() {
		labels := []string{string(k.Resource), k.Namespace, k.LabelSelector + k.FieldSelector}
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(s.Objects), labels...)
		ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(s.WatchErrors), labels...)
		if !s.LastSuccess.IsZero() {
			ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, now.Sub(s.LastSuccess).Seconds(), labels...)
		}
		healthy := 0.0
		if s.Healthy() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy, labels...)
	}
}
