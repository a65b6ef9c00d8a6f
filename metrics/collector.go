package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/routing"
)

var (
	descScrapeErrors = prometheus.NewDesc("usher_scrape_errors_total",
		"Failed scrapes of a model server, by reason (timeout, transport, status, too_large, parse, health).",
		[]string{"backend", "reason"}, nil)
	descScrapes = prometheus.NewDesc("usher_scrapes_total",
		"Completed scrape attempts of a model server.",
		[]string{"backend"}, nil)
	descStale = prometheus.NewDesc("usher_backend_stale",
		"1 if the model server's last good metrics scrape is older than the staleness limit.",
		[]string{"backend"}, nil)
	descHealthy = prometheus.NewDesc("usher_backend_healthy",
		"1 if the model server is healthy (see State.Health), 0 if unhealthy or unknown.",
		[]string{"backend"}, nil)
	descLastGood = prometheus.NewDesc("usher_backend_last_scrape_timestamp_seconds",
		"Unix time of the model server's last good metrics scrape (0 if none).",
		[]string{"backend"}, nil)
)

// Describe implements prometheus.Collector. The Scraper exports, with the label "backend"
// (bounded by its targets) and "reason" (a closed set):
//
//	usher_scrape_errors_total{backend,reason}           counter
//	usher_scrapes_total{backend}                        counter
//	usher_backend_stale{backend}                        gauge 0/1
//	usher_backend_healthy{backend}                      gauge 0/1
//	usher_backend_last_scrape_timestamp_seconds{backend} gauge
//	usher_scrape_duration_seconds                       histogram
func (s *Scraper) Describe(ch chan<- *prometheus.Desc) {
	ch <- descScrapeErrors
	ch <- descScrapes
	ch <- descStale
	ch <- descHealthy
	ch <- descLastGood
	s.durations.Describe(ch)
}

// Collect implements prometheus.Collector. It reads the published snapshots without locking.
// O(backends).
func (s *Scraper) Collect(ch chan<- prometheus.Metric) {
	for _, b := range s.fleet.Load().list {
		st := b.state.Load()
		for r := range numReasons {
			ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.CounterValue,
				float64(b.errs[r].Load()), b.name, reasonNames[r])
		}
		ch <- prometheus.MustNewConstMetric(descScrapes, prometheus.CounterValue, float64(b.scrapes.Load()), b.name)
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, boolFloat(st.Stale), b.name)
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, boolFloat(st.Health == routing.Healthy), b.name)
		var ts float64
		if !st.Updated.IsZero() {
			ts = float64(st.Updated.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descLastGood, prometheus.GaugeValue, ts, b.name)
	}
	s.durations.Collect(ch)
}

var _ prometheus.Collector = (*Scraper)(nil)

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
