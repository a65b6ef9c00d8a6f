package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stage decisions of disaggregated serving, the values of usher_pd_requests_total's
// decision label.
const (
	// StageAggregated: the decode server prefilled the request itself (the decider's choice).
	StageAggregated = "aggregated"
	// StageDisaggregated: a prefill server prefilled it and the decode server pulled its KV.
	StageDisaggregated = "disaggregated"
	// StageFallback: disaggregation was chosen but no prefill server answered; the decode
	// server served the request whole.
	StageFallback = "fallback"
)

// Roles of backends, the values of usher_role_inflight_requests's role label
// (routing.Role's names).
var roleLabels = []string{"both", "prefill", "decode"}

// pdSeries are the series of disaggregated serving.
type pdSeries struct {
	stages   *prometheus.CounterVec
	decided  [3]prometheus.Counter // aggregated, disaggregated, fallback
	prefill  prometheus.Histogram
	decode   prometheus.Histogram
	roleVec  *prometheus.GaugeVec
	roleIn   [3]prometheus.Gauge
	prefills *prometheus.CounterVec
}

func newPDSeries(cl prometheus.Labels) pdSeries {
	s := pdSeries{
		stages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_pd_requests_total", ConstLabels: cl,
			Help: "Requests routed to a decode server, by how their prefill was served: aggregated (by the decode server, as the decider chose), disaggregated (by a prefill server), fallback (disaggregation chosen, no prefill server answered)."}, []string{"decision"}),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "usher_pd_prefill_seconds", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
			Help: "Time of the prefill step of disaggregated requests, from sending it to a prefill server to its answer with the KV-transfer parameters; the decode server's pull of the KV follows."}),
		decode: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "usher_pd_decode_first_token_seconds", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
			Help: "Time of streamed disaggregated requests from the prefill step's answer to the decode step's first token: the decode server's pull of the KV, its queue and its first step, as the gateway sees them."}),
		roleVec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_role_inflight_requests", ConstLabels: cl,
			Help: "Requests this gateway has in flight on backends of each role (prefill, decode, both), prefill steps included."}, []string{"role"}),
		prefills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_pd_prefill_attempts_total", ConstLabels: cl,
			Help: "Prefill steps sent to prefill servers, by result: ok, failed (the server failed or gave no KV-transfer parameters), cancelled (the client left)."}, []string{"result"}),
	}
	for i, d := range []string{StageAggregated, StageDisaggregated, StageFallback} {
		s.decided[i] = s.stages.WithLabelValues(d)
	}
	for i, r := range roleLabels {
		s.roleIn[i] = s.roleVec.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "failed", "cancelled"} {
		s.prefills.WithLabelValues(r)
	}
	return s
}

// ObserveStage counts a request's stage decision: StageAggregated, StageDisaggregated or
// StageFallback (others are ignored). O(1), no allocation.
func (u *Gateway) ObserveStage(decision string) {
	switch decision {
	case StageAggregated:
		u.pd.decided[0].Inc()
	case StageDisaggregated:
		u.pd.decided[1].Inc()
	case StageFallback:
		u.pd.decided[2].Inc()
	}
}

// ObservePrefill records one prefill step: its result ("ok", "failed" or "cancelled") and,
// when ok, how long it took.
func (u *Gateway) ObservePrefill(result string, took time.Duration) {
	if c, err := u.pd.prefills.GetMetricWithLabelValues(result); err == nil {
		c.Inc()
	}
	if result == "ok" {
		u.pd.prefill.Observe(took.Seconds())
	}
}

// ObserveDecodeFirstToken records, for a streamed disaggregated request, the time from its prefill
// step's answer to its decode step's first token.
func (u *Gateway) ObserveDecodeFirstToken(took time.Duration) { u.pd.decode.Observe(took.Seconds()) }

// SetRoleInFlight sets the requests in flight on the backends of a role ("both", "prefill"
// or "decode"; others are ignored).
func (u *Gateway) SetRoleInFlight(role string, requests int64) {
	for i, r := range roleLabels {
		if r == role {
			u.pd.roleIn[i].Set(float64(requests))
		}
	}
}

func (s *pdSeries) describe(ch chan<- *prometheus.Desc) {
	s.stages.Describe(ch)
	s.prefill.Describe(ch)
	s.decode.Describe(ch)
	s.roleVec.Describe(ch)
	s.prefills.Describe(ch)
}

func (s *pdSeries) collect(ch chan<- prometheus.Metric) {
	s.stages.Collect(ch)
	s.prefill.Collect(ch)
	s.decode.Collect(ch)
	s.roleVec.Collect(ch)
	s.prefills.Collect(ch)
}
