package gatewaymetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/routing"
)

// Stage is how a request routed to a decode server had its prefill served: the value of
// usher_pd_requests_total's decision label.
type Stage uint8

const (
	// Aggregated: the decode server prefilled the request itself (the decider's choice).
	Aggregated Stage = iota
	// Disaggregated: a prefill server prefilled it and the decode server pulled its KV.
	Disaggregated
	// Fallback: disaggregation was chosen but no prefill server answered; the decode server
	// served the request whole.
	Fallback
	numStages
)

var stageLabels = [numStages]string{"aggregated", "disaggregated", "fallback"}

// PrefillResult is how a prefill step sent to a prefill server ended: the value of
// usher_pd_prefill_attempts_total's result label.
type PrefillResult uint8

const (
	// PrefillOK: the prefill server answered with the KV-transfer parameters.
	PrefillOK PrefillResult = iota
	// PrefillFailed: the server failed or gave no KV-transfer parameters.
	PrefillFailed
	// PrefillCancelled: the client left.
	PrefillCancelled
	numPrefillResults
)

var prefillLabels = [numPrefillResults]string{"ok", "failed", "cancelled"}

// Roles of backends, the values of usher_role_inflight_requests's role label, indexed by
// routing.Role.
var roleLabels = [...]string{routing.RoleBoth: "both", routing.RolePrefill: "prefill", routing.RoleDecode: "decode"}

// pdSeries are the series of disaggregated serving.
type pdSeries struct {
	stages   *prometheus.CounterVec
	decided  [numStages]prometheus.Counter
	prefill  prometheus.Histogram
	decode   prometheus.Histogram
	roleVec  *prometheus.GaugeVec
	roleIn   [len(roleLabels)]prometheus.Gauge
	prefills *prometheus.CounterVec
	results  [numPrefillResults]prometheus.Counter
	planned  *prometheus.GaugeVec // the role planner's roles, by backend and role
	changes  prometheus.Counter   // and its role changes
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
		planned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_pd_planned_role", ConstLabels: cl,
			Help: "The role planner's current role of each kv_both backend: 1 for its role (prefill or both), 0 for the others."}, []string{"backend", "role"}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_pd_role_changes_total", ConstLabels: cl,
			Help: "Role changes the role planner made to kv_both backends."}),
	}
	for i, d := range stageLabels {
		s.decided[i] = s.stages.WithLabelValues(d)
	}
	for i, r := range roleLabels {
		s.roleIn[i] = s.roleVec.WithLabelValues(r)
	}
	for i, r := range prefillLabels {
		s.results[i] = s.prefills.WithLabelValues(r)
	}
	return s
}

// ObserveStage counts a request's stage decision (a value outside the three is ignored).
// O(1), no allocation.
func (u *Recorder) ObserveStage(decision Stage) {
	if decision < numStages {
		u.pd.decided[decision].Inc()
	}
}

// ObservePrefill records one prefill step: its result and, when [PrefillOK], how long it took.
// O(1), no allocation.
func (u *Recorder) ObservePrefill(result PrefillResult, took time.Duration) {
	if result >= numPrefillResults {
		return
	}
	u.pd.results[result].Inc()
	if result == PrefillOK {
		u.pd.prefill.Observe(took.Seconds())
	}
}

// ObserveDecodeFirstToken records, for a streamed disaggregated request, the time from its prefill
// step's answer to its decode step's first token.
func (u *Recorder) ObserveDecodeFirstToken(took time.Duration) { u.pd.decode.Observe(took.Seconds()) }

// SetRoleInFlight sets the requests in flight on the backends of a role (a role without a
// label value is ignored). O(1), no allocation.
func (u *Recorder) SetRoleInFlight(role routing.Role, requests int64) {
	if int(role) < len(roleLabels) {
		u.pd.roleIn[role].Set(float64(requests))
	}
}

// SetPlannedRole sets the role planner's role of a backend (a role without a label value is
// ignored). O(roles); it allocates the series of a backend not seen before.
func (u *Recorder) SetPlannedRole(backend string, role routing.Role) {
	if int(role) >= len(roleLabels) {
		return
	}
	for r, l := range roleLabels {
		v := 0.0
		if routing.Role(r) == role {
			v = 1
		}
		u.pd.planned.WithLabelValues(backend, l).Set(v)
	}
}

// AddRoleChanges counts n role changes of the role planner. O(1), no allocation.
func (u *Recorder) AddRoleChanges(n int) {
	if n > 0 {
		u.pd.changes.Add(float64(n))
	}
}

func (s *pdSeries) describe(ch chan<- *prometheus.Desc) {
	s.planned.Describe(ch)
	s.changes.Describe(ch)
	s.stages.Describe(ch)
	s.prefill.Describe(ch)
	s.decode.Describe(ch)
	s.roleVec.Describe(ch)
	s.prefills.Describe(ch)
}

func (s *pdSeries) collect(ch chan<- prometheus.Metric) {
	s.planned.Collect(ch)
	s.changes.Collect(ch)
	s.stages.Collect(ch)
	s.prefill.Collect(ch)
	s.decode.Collect(ch)
	s.roleVec.Collect(ch)
	s.prefills.Collect(ch)
}
