package replica

import "github.com/prometheus/client_golang/prometheus"

var (
	descConnected = prometheus.NewDesc("usher_replica_sync_connected",
		"1 if this replica's last Redis round trip succeeded, 0 if it is going on alone.", []string{"replica"}, nil)
	descPeers = prometheus.NewDesc("usher_replica_sync_peers",
		"Other gateway replicas seen alive (reported within the peer TTL).", []string{"replica"}, nil)
	descLag = prometheus.NewDesc("usher_replica_sync_lag_seconds",
		"Age of the newest peer change applied, when it was applied.", []string{"replica"}, nil)
	descShare = prometheus.NewDesc("usher_replica_sync_limit_share",
		"This replica's share of the global concurrency limit (0: none configured).", []string{"replica"}, nil)
	descRecords = prometheus.NewDesc("usher_replica_sync_records_total",
		"Replicated records (prefix chains, session placements, usage deltas), by direction.", []string{"replica", "direction"}, nil)
	descErrors = prometheus.NewDesc("usher_replica_sync_errors_total",
		"Replication errors: redis (failed round trips), rejected (data that did not decode), unknown_backend (records naming a backend this replica lacks), dropped (local changes lost to a full buffer, or kept through an outage past their bound).",
		[]string{"replica", "kind"}, nil)
	descResyncs = prometheus.NewDesc("usher_replica_sync_resyncs_total",
		"Times Redis came back after being unreachable.", []string{"replica"}, nil)
)

// Describe implements prometheus.Collector.
func (r *Replica) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnected, descPeers, descLag, descShare, descRecords, descErrors, descResyncs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the Stats as usher_replica_sync_* series.
func (r *Replica) Collect(ch chan<- prometheus.Metric) {
	s := r.Stats()
	id := r.o.ID
	conn := 0.0
	if s.Connected {
		conn = 1
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{id}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{id}, labels...)...)
	}
	gauge(descConnected, conn)
	gauge(descPeers, float64(s.Peers))
	gauge(descLag, s.Lag.Seconds())
	gauge(descShare, float64(s.Share))
	counter(descRecords, s.Sent, "sent")
	counter(descRecords, s.Applied, "applied")
	counter(descErrors, s.Errors, "redis")
	counter(descErrors, s.Rejected, "rejected")
	counter(descErrors, s.Unknown, "unknown_backend")
	counter(descErrors, s.Dropped, "dropped")
	counter(descResyncs, s.Resyncs)
}
