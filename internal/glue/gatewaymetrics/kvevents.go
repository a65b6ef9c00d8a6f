package gatewaymetrics

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KVEvents holds the KV-event feed's series, one of each per source (the gateway's name for a
// publisher's backend) plus "other":
//
//	usher_kvevents_connected{source}                        gauge
//	usher_kvevents_batches_total{source}                    counter
//	usher_kvevents_lost_batches_total{source}               counter
//	usher_kvevents_resets_total{source}                     counter
//	usher_kvevents_reconnects_total{source}                 counter
//	usher_kvevents_events_total{source}                     counter
//	usher_kvevents_stale_probes_total{source}               counter
//	usher_kvevents_delivered_batches_total{source,via}      counter   via: live, replay
//	usher_kvevents_late_batches_total{source}               counter
//	usher_kvevents_decode_errors_total{source}              counter
//	usher_kvevents_apply_errors_total{source}               counter
//	usher_kvevents_last_batch_timestamp_seconds{source}     gauge
//
// Every method is safe for concurrent use (atomics); Set does not allocate. A KVEvents is a
// prometheus.Collector, registered by whatever follows the KV events.
type KVEvents struct {
	// Immutable after NewKVEvents.
	index       map[string]int // source name to its index in kv
	labels      []string       // [source+other]
	kv          []kvSeries     // [source+other]
	descConn    *prometheus.Desc
	descBatch   *prometheus.Desc
	descLost    *prometheus.Desc
	descReset   *prometheus.Desc
	descRecon   *prometheus.Desc
	descEvent   *prometheus.Desc
	descStale   *prometheus.Desc
	descDeliv   *prometheus.Desc
	descLate    *prometheus.Desc
	descDecode  *prometheus.Desc
	descApply   *prometheus.Desc
	descLastBat *prometheus.Desc
}

// kvSeries holds what Set last recorded for one source label; the counters only grow.
type kvSeries struct {
	connected                            atomic.Bool
	batches, lost, resets, reconnects    atomic.Uint64
	events, stale, decodeErrs, applyErrs atomic.Uint64
	live, replayOnly, late               atomic.Uint64
	lastBatch                            atomic.Int64 // UnixNano; 0: never
}

// KVStatus is what the KV-event subscriber reports about one source; the feed copies a
// kvevents.SourceStatus into one and calls [KVEvents.Set]. Counters are cumulative.
type KVStatus struct {
	Connected  bool   // the source's event connection is up
	Batches    uint64 // batches applied, live and replayed, cumulative
	Lost       uint64 // batches no replay recovered, cumulative
	Resets     uint64 // publisher restarts detected, cumulative
	Reconnects uint64 // connections after the first, cumulative
	Events     uint64 // events applied, cumulative
	Stale      uint64 // idle probes that found batches the connection missed, cumulative
	// Live and ReplayOnly count batches the live connection delivered and batches only a
	// replay delivered; Late those counted replay-only that arrived live afterwards.
	Live, ReplayOnly, Late uint64
	// DecodeErrors and ApplyErrors count malformed messages and events the index refused.
	DecodeErrors, ApplyErrors uint64
	// LastBatch is when the source's last batch arrived; zero: never.
	LastBatch time.Time
}

// NewKVEvents returns the series of sources (each gets its own "source" label value; any
// other source is counted as "other"), every one created at 0, with constLabels added to each.
// It fails with [ErrInvalidOptions] if a source is empty, "other" or repeated.
func NewKVEvents(sources []string, constLabels prometheus.Labels) (*KVEvents, error) {
	if err := distinctLabels("KV source", sources); err != nil {
		return nil, err
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"source"}, constLabels)
	}
	k := &KVEvents{
		index:     make(map[string]int, len(sources)),
		labels:    append(slices.Clone(sources), OtherLabel),
		kv:        make([]kvSeries, len(sources)+1),
		descConn:  desc("usher_kvevents_connected", "1 if the KV-event subscriber is connected to the source, 0 if not."),
		descBatch: desc("usher_kvevents_batches_total", "KV-event batches applied from the source, live and replayed."),
		descLost:  desc("usher_kvevents_lost_batches_total", "KV-event batches of the source that no replay recovered."),
		descReset: desc("usher_kvevents_resets_total", "Restarts of the source's publisher detected, each clearing its backend."),
		descRecon: desc("usher_kvevents_reconnects_total", "Connections to the source after the first."),
		descEvent: desc("usher_kvevents_events_total", "KV events applied from the source."),
		descStale: desc("usher_kvevents_stale_probes_total", "Idle probes of the source that found batches its live connection had missed."),
		descDeliv: prometheus.NewDesc("usher_kvevents_delivered_batches_total",
			"KV-event batches of the source by how they arrived: via=live, the live connection delivered them (even just after a replay); via=replay, only a replay did.",
			[]string{"source", "via"}, constLabels),
		descLate:    desc("usher_kvevents_late_batches_total", "Batches of the source counted via=replay that the live connection delivered afterwards, later than the subscriber's grace."),
		descDecode:  desc("usher_kvevents_decode_errors_total", "Malformed messages from the source."),
		descApply:   desc("usher_kvevents_apply_errors_total", "Events of the source that the prefix index refused."),
		descLastBat: desc("usher_kvevents_last_batch_timestamp_seconds", "Unix time of the source's last batch; 0 if none came."),
	}
	for i, name := range sources {
		k.index[name] = i
	}
	return k, nil
}

// Set records the KV-event subscriber's state of one source: s holds cumulative counters, as
// kvevents.SourceStatus reports them.
//
// The counters are exported as Prometheus counters and never go down: a value lower than the
// one recorded (a new subscriber counting from zero again) leaves the higher one in place,
// so they stay flat until the new count passes the old. A source outside the configured set
// is recorded under "other", where by the same rule each counter is the highest value any
// unknown source reported (exact for one unknown source, a lower bound of their sum for
// several) and connected is what the last call said. A nil *KVEvents is a no-op.
// Allocation-free; O(1).
func (u *KVEvents) Set(source string, s KVStatus) {
	if u == nil {
		return
	}
	i, ok := u.index[source]
	if !ok {
		i = len(u.kv) - 1
	}
	k := &u.kv[i]
	k.connected.Store(s.Connected)
	storeMax(&k.batches, s.Batches)
	storeMax(&k.lost, s.Lost)
	storeMax(&k.resets, s.Resets)
	storeMax(&k.reconnects, s.Reconnects)
	storeMax(&k.events, s.Events)
	storeMax(&k.stale, s.Stale)
	storeMax(&k.live, s.Live)
	storeMax(&k.replayOnly, s.ReplayOnly)
	storeMax(&k.late, s.Late)
	storeMax(&k.decodeErrs, s.DecodeErrors)
	storeMax(&k.applyErrs, s.ApplyErrors)
	if !s.LastBatch.IsZero() {
		if t := s.LastBatch.UnixNano(); t > k.lastBatch.Load() {
			k.lastBatch.Store(t)
		}
	}
}

// storeMax raises a to v if v is higher.
func storeMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Describe implements prometheus.Collector.
func (u *KVEvents) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{u.descConn, u.descBatch, u.descLost, u.descReset, u.descRecon,
		u.descEvent, u.descStale, u.descDeliv, u.descLate, u.descDecode, u.descApply, u.descLastBat} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. O(sources).
func (u *KVEvents) Collect(ch chan<- prometheus.Metric) {
	for i := range u.kv {
		k, l := &u.kv[i], u.labels[i]
		conn := 0.0
		if k.connected.Load() {
			conn = 1
		}
		ch <- prometheus.MustNewConstMetric(u.descConn, prometheus.GaugeValue, conn, l)
		ch <- prometheus.MustNewConstMetric(u.descBatch, prometheus.CounterValue, float64(k.batches.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descLost, prometheus.CounterValue, float64(k.lost.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descReset, prometheus.CounterValue, float64(k.resets.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descRecon, prometheus.CounterValue, float64(k.reconnects.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descEvent, prometheus.CounterValue, float64(k.events.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descStale, prometheus.CounterValue, float64(k.stale.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descDeliv, prometheus.CounterValue, float64(k.live.Load()), l, "live")
		ch <- prometheus.MustNewConstMetric(u.descDeliv, prometheus.CounterValue, float64(k.replayOnly.Load()), l, "replay")
		ch <- prometheus.MustNewConstMetric(u.descLate, prometheus.CounterValue, float64(k.late.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descDecode, prometheus.CounterValue, float64(k.decodeErrs.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descApply, prometheus.CounterValue, float64(k.applyErrs.Load()), l)
		ch <- prometheus.MustNewConstMetric(u.descLastBat, prometheus.GaugeValue, float64(k.lastBatch.Load())/1e9, l)
	}
}

var _ prometheus.Collector = (*KVEvents)(nil)
