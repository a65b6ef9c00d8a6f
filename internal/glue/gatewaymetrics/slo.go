package gatewaymetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/routing"
)

// SLOResult is how a request with latency targets ended: the value of
// usher_slo_requests_total's result label.
type SLOResult uint8

const (
	// SLOMet: a streamed request whose first token came within its TTFT target (counted from
	// its arrival at the gateway) and whose time per output token was within its TPOT target.
	SLOMet SLOResult = iota
	// SLOMissed: a streamed request that was served late, or failed.
	SLOMissed
	// SLOShed: refused on arrival by early shedding, its estimated wait beyond the time its
	// TTFT target left (429).
	SLOShed
	// SLOExpired: admitted to the queue, and not dispatched before its deadline (503).
	SLOExpired
	numSLOResults
)

var sloResults = [numSLOResults]string{"met", "missed", "shed", "expired"}

// sloSeries are the series of latency targets and predictions.
type sloSeries struct {
	results *prometheus.CounterVec
	counted [][numSLOResults]prometheus.Counter // [band+other][result]
	errVec  *prometheus.HistogramVec
	errs    [2]prometheus.Observer // ttft, tpot
}

func newSLOSeries(cl prometheus.Labels, bandLabels []string) sloSeries {
	s := sloSeries{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_slo_requests_total", ConstLabels: cl,
			Help: "Requests with latency targets by priority band and result: met, missed (streamed requests served late or failed), shed (refused on arrival: no backend could meet the TTFT target in time), expired (not dispatched in time)."}, []string{"band", "result"}),
		errVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "usher_latency_prediction_error_seconds", ConstLabels: cl, Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
			Help: "Absolute error of the router's latency model on the backend it chose, by target: ttft (from the pick to the first token of a stream) and tpot (time per output token after it)."}, []string{"target"}),
	}
	s.counted = make([][numSLOResults]prometheus.Counter, len(bandLabels))
	for i, b := range bandLabels {
		for j, r := range sloResults {
			s.counted[i][j] = s.results.WithLabelValues(b, r)
		}
	}
	s.errs[0], s.errs[1] = s.errVec.WithLabelValues("ttft"), s.errVec.WithLabelValues("tpot")
	return s
}

// ObserveSLO counts a request with latency targets of band band by its result (a value
// outside the four is ignored). O(bands), no allocation.
func (u *Recorder) ObserveSLO(band int, result SLOResult) {
	if u == nil || result >= numSLOResults {
		return
	}
	u.slo.counted[u.bandIndex(band)][result].Inc()
}

// ObservePrediction records how far a latency prediction was from what was observed: the
// absolute difference of each field that both give (a zero field is unknown). O(1), no
// allocation.
func (u *Recorder) ObservePrediction(predicted, observed routing.Latency) {
	if u == nil {
		return
	}
	if predicted.TTFT > 0 && observed.TTFT > 0 {
		u.slo.errs[0].Observe((predicted.TTFT - observed.TTFT).Abs().Seconds())
	}
	if predicted.TPOT > 0 && observed.TPOT > 0 {
		u.slo.errs[1].Observe((predicted.TPOT - observed.TPOT).Abs().Seconds())
	}
}

func (s *sloSeries) describe(ch chan<- *prometheus.Desc) {
	s.results.Describe(ch)
	s.errVec.Describe(ch)
}

func (s *sloSeries) collect(ch chan<- prometheus.Metric) {
	s.results.Collect(ch)
	s.errVec.Collect(ch)
}
