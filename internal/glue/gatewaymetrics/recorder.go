// Package gatewaymetrics holds usher's own Prometheus series for a gateway built on package
// proxy (the Handler and the ext_proc server): admission, queue, picks, in-flight requests,
// the prefix index, passive health, disaggregated serving, latency targets, and the KV-event
// feed's state. Every name is prefixed "usher_"; every label value comes from a set fixed by
// configuration plus "other", so the number of series is bounded whatever the traffic.
//
// The series' names, labels and meanings are a contract with the dashboards and alerts in
// kube/deploy/monitoring: change them only together.
package gatewaymetrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/flowcontrol"
)

// ErrInvalidOptions reports a malformed Options or KV-event source set.
var ErrInvalidOptions = errors.New("gatewaymetrics: invalid options")

// DefaultOutcomes are the admission outcome label values a Recorder knows when
// Options.Outcomes is nil: the names flowcontrol's Outcome.String returns.
var DefaultOutcomes = []string{
	"dispatched", "rejected_capacity", "rejected_closed", "rejected_invalid", "expired", "cancelled", "rejected_wait",
}

// WaitedOutcomes are the outcomes the admission wait histogram records: those a request
// waits in the queue for. Rejections are decided on arrival, so their waits (zero) would
// only multiply the histogram's series; usher_admissions_total counts them.
var WaitedOutcomes = []string{"dispatched", "expired", "cancelled"}

// OtherLabel is the label value that any outcome, band, backend or KV-event source outside the
// configured sets is counted under, so that no input can grow the number of series.
const OtherLabel = "other"

// Options configures a Recorder. The zero value of every field is a documented default.
type Options struct {
	// Bands are the priority bands that get their own "band" label value. Nil means bands
	// 0 through 7. Any other band is counted as "other".
	Bands []int
	// Outcomes are the admission outcomes that get their own "outcome" label value. Nil
	// means DefaultOutcomes. Any other outcome is counted as "other".
	Outcomes []string
	// Backends are the backends that get their own "backend" label value in the pick
	// counter (any other backend is counted as "other") and the in-flight gauge (any other
	// backend is dropped; see SetInFlight). SetBackends replaces the set.
	Backends []string
	// WaitBuckets are the upper bounds, in seconds, of the admission wait histogram. Nil
	// means 1ms doubling up to 131s (18 buckets).
	WaitBuckets []float64
	// ConstLabels are added to every metric (for example the gateway's instance name).
	ConstLabels prometheus.Labels
}

// IndexStats is what the prefix index reports about itself; the gateway copies its index's
// statistics into one and calls Recorder.SetIndexStats. Counters are cumulative.
type IndexStats struct {
	Blocks        int64  // blocks stored
	Bytes         int64  // bytes used (the budget is bounded by configuration)
	Evictions     uint64 // blocks evicted, cumulative
	QueriedBlocks uint64 // blocks looked up by matches, cumulative
	MatchedBlocks uint64 // blocks found by matches, cumulative
}

// Recorder holds usher's own Prometheus metrics, every name prefixed "usher_":
//
//	usher_admissions_total{band,outcome}                    counter    ObserveAdmission
//	usher_admission_wait_seconds{band,outcome}              histogram  ObserveAdmission (WaitedOutcomes)
//	usher_queue_requests{band}                              gauge      SetQueue
//	usher_queue_bytes{band}                                 gauge      SetQueue
//	usher_flows                                             gauge      SetFlows
//	usher_inflight_requests                                 gauge      SetInFlightTotal
//	usher_picks_total{backend}                              counter    ObservePick
//	usher_backend_inflight_requests{backend}                gauge      SetInFlight
//	usher_backend_inflight_dropped_total                    counter    SetInFlight
//	usher_prefix_index_blocks                               gauge      SetIndexStats
//	usher_prefix_index_bytes                                gauge      SetIndexStats
//	usher_prefix_index_evictions_total                      counter    SetIndexStats
//	usher_prefix_index_queried_blocks_total                 counter    SetIndexStats
//	usher_prefix_index_matched_blocks_total                 counter    SetIndexStats
//	usher_backend_ejections_total{backend}                  counter    SetPassiveHealth
//	usher_backend_probes_total{backend}                     counter    SetPassiveHealth
//	usher_backend_ejected{backend}                          gauge      SetPassiveHealth
//	usher_backend_restorations_total{backend}               counter    SetPassiveHealth
//	usher_health_probes_total{backend,result}               counter    ObserveProbe
//	usher_stall_moves_total{backend}                        counter    ObserveStallMove
//	usher_slo_requests_total{band,result}                   counter    ObserveSLO
//	usher_latency_prediction_error_seconds{target}          histogram  ObservePrediction
//	usher_retries_total{reason,outcome}                     counter    ObserveRetry
//
// The KV-event feed's series are a [KVEvents], the router's clamped scores [ClampedScores]; scrape errors and staleness of model servers
// are exported by metrics.Scraper. Every label value comes from a set fixed by configuration (bands,
// outcomes, backends) plus "other": a flow, a session or a tenant never
// becomes a label, so the number of series is bounded whatever the traffic. The in-flight
// gauge per backend is the one series without "other" (SetInFlight says why).
//
// The Observe and Set methods are plain calls the gateway makes where things happen; they
// do not allocate and are safe for concurrent use (atomics; SetIndexStats takes a short
// lock). A nil *Gateway is a valid no-op, so a gateway can run without metrics. Register an
// Recorder with a prometheus.Registerer: it is a prometheus.Collector.
type Recorder struct {
	// Immutable after New.
	bands       []int
	outcomes    []string
	admissions  prometheus.Collector // *CounterVec
	waits       prometheus.Collector // *HistogramVec
	queueReqs   prometheus.Collector // *GaugeVec
	queueBytes  prometheus.Collector // *GaugeVec
	picksVec    *prometheus.CounterVec
	inflightVec *prometheus.GaugeVec
	dropped     prometheus.Counter // SetInFlight calls for unknown backends
	inflight    prometheus.Gauge
	flows       prometheus.Gauge
	admitted    [][]prometheus.Counter  // [band+other][outcome+other]
	waited      [][]prometheus.Observer // [band+other][outcome]: nil for outcomes decided at arrival
	queueN      []prometheus.Gauge      // [band+other]
	queueB      []prometheus.Gauge      // [band+other]
	descBlocks  *prometheus.Desc
	descBytes   *prometheus.Desc
	descEvicted *prometheus.Desc
	descQueried *prometheus.Desc
	descMatched *prometheus.Desc
	descEject   *prometheus.Desc
	descProbe   *prometheus.Desc
	descEjected *prometheus.Desc
	descRestore *prometheus.Desc
	descHProbe  *prometheus.Desc
	descMoves   *prometheus.Desc

	backends atomic.Pointer[map[string]backendSeries] // copy on write by SetBackends
	other    prometheus.Counter                       // picks of unknown backends
	// otherHealth counts the probes and stall moves of backends outside the configured set.
	otherHealth healthSeries

	pd      pdSeries    // disaggregated serving
	slo     sloSeries   // latency targets and predictions
	retries retrySeries // retries before the first byte

	mu    sync.Mutex // guards the fields below and serialises SetBackends
	index IndexStats
}

// backendSeries are the series of one configured backend.
type backendSeries struct {
	picks    prometheus.Counter
	inflight prometheus.Gauge
	health   *healthSeries
}

// New validates opts and returns a Recorder with every configured series created (at 0).
func New(opts Options) (*Recorder, error) {
	bands := slices.Clone(opts.Bands)
	if bands == nil {
		bands = []int{0, 1, 2, 3, 4, 5, 6, 7}
	}
	outcomes := slices.Clone(opts.Outcomes)
	if outcomes == nil {
		outcomes = slices.Clone(DefaultOutcomes)
	}
	buckets := slices.Clone(opts.WaitBuckets)
	if buckets == nil {
		buckets = prometheus.ExponentialBuckets(0.001, 2, 18)
	}
	if err := distinct("band", bands); err != nil {
		return nil, err
	}
	if err := distinctLabels("outcome", outcomes); err != nil {
		return nil, err
	}
	if err := distinctLabels("backend", opts.Backends); err != nil {
		return nil, err
	}
	for i, b := range buckets {
		if math.IsNaN(b) || (i > 0 && b <= buckets[i-1]) {
			return nil, fmt.Errorf("%w: WaitBuckets must increase", ErrInvalidOptions)
		}
	}

	cl := opts.ConstLabels
	admissions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_admissions_total", ConstLabels: cl,
		Help: "Admission decisions by priority band and outcome.",
	}, []string{"band", "outcome"})
	waits := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "usher_admission_wait_seconds", ConstLabels: cl, Buckets: buckets,
		Help: "Time from enqueue to dispatch, expiry or cancellation, by priority band and outcome.",
	}, []string{"band", "outcome"})
	queueReqs := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "usher_queue_requests", ConstLabels: cl,
		Help: "Requests waiting for admission, by priority band.",
	}, []string{"band"})
	queueBytes := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "usher_queue_bytes", ConstLabels: cl,
		Help: "Bytes of requests waiting for admission, by priority band.",
	}, []string{"band"})
	picks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_picks_total", ConstLabels: cl,
		Help: "Requests routed to each backend.",
	}, []string{"backend"})
	inflight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "usher_backend_inflight_requests", ConstLabels: cl,
		Help: "Requests routed to each backend and not finished.",
	}, []string{"backend"})

	u := &Recorder{
		bands: bands, outcomes: outcomes,
		admissions: admissions, waits: waits, queueReqs: queueReqs, queueBytes: queueBytes,
		picksVec:    picks,
		inflightVec: inflight,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_backend_inflight_dropped_total", ConstLabels: cl,
			Help: "In-flight updates dropped because their backend is not in the configured set.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_inflight_requests", ConstLabels: cl,
			Help: "Requests routed to a backend and not finished.",
		}),
		flows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_flows", ConstLabels: cl,
			Help: "Live flows (with requests waiting or in flight) in the admission queue.",
		}),
		descBlocks:  prometheus.NewDesc("usher_prefix_index_blocks", "Blocks stored in the prefix index.", nil, cl),
		descBytes:   prometheus.NewDesc("usher_prefix_index_bytes", "Bytes used by the prefix index.", nil, cl),
		descEvicted: prometheus.NewDesc("usher_prefix_index_evictions_total", "Blocks evicted from the prefix index.", nil, cl),
		descQueried: prometheus.NewDesc("usher_prefix_index_queried_blocks_total", "Prompt blocks looked up in the prefix index.", nil, cl),
		descMatched: prometheus.NewDesc("usher_prefix_index_matched_blocks_total", "Prompt blocks found in the prefix index.", nil, cl),
		descEject: prometheus.NewDesc("usher_backend_ejections_total",
			"Ejections of each backend by passive health (its requests failed).", []string{"backend"}, cl),
		descProbe: prometheus.NewDesc("usher_backend_probes_total",
			"User requests sent to each ejected backend as its probe back into rotation (passive health alone; 0 with active health checks).", []string{"backend"}, cl),
		descEjected: prometheus.NewDesc("usher_backend_ejected",
			"1 while passive health keeps the backend out of rotation (ejected or half-open), else 0.", []string{"backend"}, cl),
		descRestore: prometheus.NewDesc("usher_backend_restorations_total",
			"Returns of each backend to rotation by a successful probe (the active health checks' own, or with passive health alone a user request's).", []string{"backend"}, cl),
		descHProbe: prometheus.NewDesc("usher_health_probes_total",
			"Active health probes (the gateway's own requests) of each backend by result: ok, or failed (refused, stalled, timed out, an error status); their sum is the probes sent and ended.", []string{"backend", "result"}, cl),
		descMoves: prometheus.NewDesc("usher_stall_moves_total",
			"Requests moved off each backend because it sent no first byte within the stall limit: cancelled there before any byte reached the client and retried elsewhere.", []string{"backend"}, cl),
	}
	bandLabels := make([]string, len(bands)+1)
	for i, b := range bands {
		bandLabels[i] = strconv.Itoa(b)
	}
	bandLabels[len(bands)] = OtherLabel
	outcomeLabels := append(slices.Clone(outcomes), OtherLabel)
	u.admitted = make([][]prometheus.Counter, len(bandLabels))
	u.waited = make([][]prometheus.Observer, len(bandLabels))
	u.queueN = make([]prometheus.Gauge, len(bandLabels))
	u.queueB = make([]prometheus.Gauge, len(bandLabels))
	for i, bl := range bandLabels {
		u.admitted[i] = make([]prometheus.Counter, len(outcomeLabels))
		u.waited[i] = make([]prometheus.Observer, len(outcomeLabels))
		for j, ol := range outcomeLabels {
			u.admitted[i][j] = admissions.WithLabelValues(bl, ol)
			if slices.Contains(WaitedOutcomes, ol) {
				u.waited[i][j] = waits.WithLabelValues(bl, ol)
			}
		}
		u.queueN[i] = queueReqs.WithLabelValues(bl)
		u.queueB[i] = queueBytes.WithLabelValues(bl)
	}
	u.other = picks.WithLabelValues(OtherLabel)
	u.pd = newPDSeries(cl)
	u.slo = newSLOSeries(cl, bandLabels)
	u.retries = newRetrySeries(cl)
	u.SetBackends(opts.Backends)
	return u, nil
}

func distinct(what string, vals []int) error {
	seen := make(map[int]bool, len(vals))
	for _, v := range vals {
		if seen[v] {
			return fmt.Errorf("%w: duplicate %s %d", ErrInvalidOptions, what, v)
		}
		seen[v] = true
	}
	return nil
}

func distinctLabels(what string, vals []string) error {
	seen := make(map[string]bool, len(vals))
	for _, v := range vals {
		if v == "" || v == OtherLabel || seen[v] {
			return fmt.Errorf("%w: %s label %q is empty, reserved or repeated", ErrInvalidOptions, what, v)
		}
		seen[v] = true
	}
	return nil
}

// bandIndex returns the index of band in u.bands, or the "other" index. O(bands).
func (u *Recorder) bandIndex(band int) int {
	for i, b := range u.bands {
		if b == band {
			return i
		}
	}
	return len(u.bands)
}

// outcomeIndex returns the index of outcome's name in u.outcomes, or the "other" index.
// O(outcomes).
func (u *Recorder) outcomeIndex(outcome flowcontrol.Outcome) int {
	name := outcome.String()
	for i, o := range u.outcomes {
		if o == name {
			return i
		}
	}
	return len(u.outcomes)
}

// ObserveAdmission counts one admission outcome in a band and records how long the request
// waited for it. Outcomes and bands outside the configured sets count as "other".
// Allocation-free; O(bands + outcomes).
func (u *Recorder) ObserveAdmission(outcome flowcontrol.Outcome, band int, wait time.Duration) {
	if u == nil {
		return
	}
	b, o := u.bandIndex(band), u.outcomeIndex(outcome)
	u.admitted[b][o].Inc()
	if h := u.waited[b][o]; h != nil {
		h.Observe(max(wait, 0).Seconds())
	}
}

// SetQueue sets the number of requests and bytes waiting in a band. Several unconfigured
// bands share "other", where the last call wins. Allocation-free; O(bands).
func (u *Recorder) SetQueue(band int, requests int, bytes int64) {
	if u == nil {
		return
	}
	b := u.bandIndex(band)
	u.queueN[b].Set(float64(requests))
	u.queueB[b].Set(float64(bytes))
}

// SetFlows sets the number of live flows in the admission queue: flows with requests
// waiting or in flight. Allocation-free; O(1).
func (u *Recorder) SetFlows(n int) {
	if u == nil {
		return
	}
	u.flows.Set(float64(n))
}

// SetInFlightTotal sets the number of requests the gateway has routed to a backend and not
// finished, over all backends. Allocation-free; O(1).
func (u *Recorder) SetInFlightTotal(n int) {
	if u == nil {
		return
	}
	u.inflight.Set(float64(n))
}

// ObservePick counts one request routed to backend; a backend outside the configured set
// counts as "other". Allocation-free; O(1).
func (u *Recorder) ObservePick(backend string) {
	if u == nil {
		return
	}
	if bs, ok := (*u.backends.Load())[backend]; ok {
		bs.picks.Inc()
		return
	}
	u.other.Inc()
}

// SetInFlight sets the number of requests routed to backend and not finished.
//
// A backend outside the configured set is not exported: its value is dropped and the call
// counted in usher_backend_inflight_dropped_total. There is no "other" in-flight series
// because a gauge that several backends set cannot be merged into one series: the last call
// would win (one arbitrary backend's value, read as a total), and summing would need each
// unknown backend's last value, state that grows with the names passed in. The usual unknown
// backend is one SetBackends removed while its requests drain; they remain in
// usher_inflight_requests. Allocation-free; O(1).
func (u *Recorder) SetInFlight(backend string, requests int64) {
	if u == nil {
		return
	}
	if bs, ok := (*u.backends.Load())[backend]; ok {
		bs.inflight.Set(float64(requests))
		return
	}
	u.dropped.Inc()
}

// healthSeries is one backend's health: passive health as last set, active probes and stall
// moves as counted.
type healthSeries struct {
	ejections, probes, restorations atomic.Uint64
	ejected                         atomic.Bool
	probesOK, probesFailed, moves   atomic.Uint64
}

// PassiveHealth is one backend's passive-health counters, as outlier.Detector's BackendStats
// reports them.
type PassiveHealth struct {
	Ejections    uint64 // ejections so far
	Probes       uint64 // user requests sent as half-open probes so far
	Restorations uint64 // returns to rotation by a successful probe so far
	Ejected      bool   // out of rotation now
}

// SetPassiveHealth records a configured backend's passive-health counters. The counters only
// move forward. Allocation-free; O(1); a backend outside the configured set is ignored.
func (u *Recorder) SetPassiveHealth(backend string, h PassiveHealth) {
	if u == nil {
		return
	}
	bs, ok := (*u.backends.Load())[backend]
	if !ok {
		return
	}
	raise(&bs.health.ejections, h.Ejections)
	raise(&bs.health.probes, h.Probes)
	raise(&bs.health.restorations, h.Restorations)
	bs.health.ejected.Store(h.Ejected)
}

// health returns backend's health series, or the "other" one. Allocation-free; O(1).
func (u *Recorder) health(backend string) *healthSeries {
	if bs, ok := (*u.backends.Load())[backend]; ok {
		return bs.health
	}
	return &u.otherHealth
}

// ObserveProbe counts one active health probe of backend that ended, ok or failed; a backend
// outside the configured set counts as "other". Allocation-free; O(1).
func (u *Recorder) ObserveProbe(backend string, ok bool) {
	if u == nil {
		return
	}
	if h := u.health(backend); ok {
		h.probesOK.Add(1)
	} else {
		h.probesFailed.Add(1)
	}
}

// ObserveStallMove counts one request moved off backend for a stall; a backend outside the
// configured set counts as "other". Allocation-free; O(1).
func (u *Recorder) ObserveStallMove(backend string) {
	if u == nil {
		return
	}
	u.health(backend).moves.Add(1)
}

// raise stores v in a if it is larger.
func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// SetBackends replaces the set of backends the per-backend series are kept for (the endpoint
// picker's set changes at run time): a new name gets its series, a name no longer listed has
// its pick and in-flight series deleted, and a kept name keeps its counts. Empty names and
// OtherLabel are ignored. O(len(names)); safe for concurrent use with every other method.
func (u *Recorder) SetBackends(names []string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	next := make(map[string]backendSeries, len(names))
	for _, n := range names {
		if n == "" || n == OtherLabel {
			continue
		}
		health := new(healthSeries)
		if prev := u.backends.Load(); prev != nil {
			if old, ok := (*prev)[n]; ok {
				health = old.health
			}
		}
		next[n] = backendSeries{picks: u.picksVec.WithLabelValues(n), inflight: u.inflightVec.WithLabelValues(n), health: health}
	}
	if prev := u.backends.Load(); prev != nil {
		for n := range *prev {
			if _, keep := next[n]; !keep {
				u.picksVec.DeleteLabelValues(n)
				u.inflightVec.DeleteLabelValues(n)
			}
		}
	}
	u.backends.Store(&next)
}

// SetIndexStats records the prefix index's statistics. The hit rate is left to PromQL, over
// the window the reader chooses: rate(usher_prefix_index_matched_blocks_total[5m]) /
// rate(usher_prefix_index_queried_blocks_total[5m]). Allocation-free; O(1).
func (u *Recorder) SetIndexStats(s IndexStats) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.index = s
}

// Describe implements prometheus.Collector.
func (u *Recorder) Describe(ch chan<- *prometheus.Desc) {
	u.admissions.Describe(ch)
	u.waits.Describe(ch)
	u.queueReqs.Describe(ch)
	u.queueBytes.Describe(ch)
	u.picksVec.Describe(ch)
	u.inflightVec.Describe(ch)
	u.dropped.Describe(ch)
	u.inflight.Describe(ch)
	u.flows.Describe(ch)
	u.pd.describe(ch)
	u.slo.describe(ch)
	u.retries.vec.Describe(ch)
	for _, d := range []*prometheus.Desc{u.descBlocks, u.descBytes, u.descEvicted, u.descQueried, u.descMatched,
		u.descEject, u.descProbe, u.descEjected, u.descRestore, u.descHProbe, u.descMoves} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. O(series).
func (u *Recorder) Collect(ch chan<- prometheus.Metric) {
	u.admissions.Collect(ch)
	u.waits.Collect(ch)
	u.queueReqs.Collect(ch)
	u.queueBytes.Collect(ch)
	u.picksVec.Collect(ch)
	u.inflightVec.Collect(ch)
	u.dropped.Collect(ch)
	u.inflight.Collect(ch)
	u.flows.Collect(ch)
	u.pd.collect(ch)
	u.slo.collect(ch)
	u.retries.vec.Collect(ch)
	if bs := u.backends.Load(); bs != nil {
		for name, b := range *bs {
			ejected := 0.0
			if b.health.ejected.Load() {
				ejected = 1
			}
			ch <- prometheus.MustNewConstMetric(u.descEject, prometheus.CounterValue, float64(b.health.ejections.Load()), name)
			ch <- prometheus.MustNewConstMetric(u.descProbe, prometheus.CounterValue, float64(b.health.probes.Load()), name)
			ch <- prometheus.MustNewConstMetric(u.descEjected, prometheus.GaugeValue, ejected, name)
			ch <- prometheus.MustNewConstMetric(u.descRestore, prometheus.CounterValue, float64(b.health.restorations.Load()), name)
			u.collectHealth(ch, name, b.health)
		}
	}
	u.collectHealth(ch, OtherLabel, &u.otherHealth)
	u.mu.Lock()
	s := u.index
	u.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(u.descBlocks, prometheus.GaugeValue, float64(s.Blocks))
	ch <- prometheus.MustNewConstMetric(u.descBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(u.descEvicted, prometheus.CounterValue, float64(s.Evictions))
	ch <- prometheus.MustNewConstMetric(u.descQueried, prometheus.CounterValue, float64(s.QueriedBlocks))
	ch <- prometheus.MustNewConstMetric(u.descMatched, prometheus.CounterValue, float64(s.MatchedBlocks))
}

var _ prometheus.Collector = (*Recorder)(nil)

// collectHealth sends the probe and stall-move series of one backend (or of "other").
func (u *Recorder) collectHealth(ch chan<- prometheus.Metric, name string, h *healthSeries) {
	ch <- prometheus.MustNewConstMetric(u.descHProbe, prometheus.CounterValue, float64(h.probesOK.Load()), name, "ok")
	ch <- prometheus.MustNewConstMetric(u.descHProbe, prometheus.CounterValue, float64(h.probesFailed.Load()), name, "failed")
	ch <- prometheus.MustNewConstMetric(u.descMoves, prometheus.CounterValue, float64(h.moves.Load()), name)
}
