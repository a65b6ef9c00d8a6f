package inferencepool

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a Prometheus collector of the Source's Stats, the series an endpoint
// picker exports about its pool watch: usher_epp_pool_connected (the last list or watch call
// succeeded), usher_epp_pool_found (the pool exists and is usable),
// usher_epp_pool_last_sync_timestamp_seconds, usher_epp_pool_sync_errors_total and
// usher_epp_pool_endpoints (the size of the set last reported). Each scrape reads Stats once,
// O(1); the collector is safe for concurrent use. Register it once per registry.
func (s *Source) Collector() prometheus.Collector { return poolCollector{s} }

// poolCollector is the Source as a Prometheus collector.
type poolCollector struct{ s *Source }

var (
	poolConnectedDesc = prometheus.NewDesc("usher_epp_pool_connected", "1 when the last list or watch call of the InferencePool watch succeeded.", nil, nil)
	poolFoundDesc     = prometheus.NewDesc("usher_epp_pool_found", "1 when the InferencePool exists and is usable.", nil, nil)
	poolLastSyncDesc  = prometheus.NewDesc("usher_epp_pool_last_sync_timestamp_seconds", "When a list or watch call of the InferencePool watch last succeeded.", nil, nil)
	poolErrorsDesc    = prometheus.NewDesc("usher_epp_pool_sync_errors_total", "List and watch calls of the InferencePool watch that failed.", nil, nil)
	poolEndpointsDesc = prometheus.NewDesc("usher_epp_pool_endpoints", "Endpoints in the set the InferencePool watch last reported.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolConnectedDesc, poolFoundDesc, poolLastSyncDesc, poolErrorsDesc, poolEndpointsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	last := 0.0
	if !st.LastSync.IsZero() {
		last = float64(st.LastSync.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(poolConnectedDesc, prometheus.GaugeValue, b(st.Connected))
	ch <- prometheus.MustNewConstMetric(poolFoundDesc, prometheus.GaugeValue, b(st.PoolFound))
	ch <- prometheus.MustNewConstMetric(poolLastSyncDesc, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(poolErrorsDesc, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(poolEndpointsDesc, prometheus.GaugeValue, float64(st.Endpoints))
}
