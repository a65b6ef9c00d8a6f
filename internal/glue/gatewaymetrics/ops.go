package gatewaymetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/internal/routerstats"
	"github.com/usher-llm/usher/routing"
)

// RetryReason is why an attempt failed before any byte of its answer reached the client, in a
// way another backend may not share: the value of usher_retries_total's reason label.
type RetryReason uint8

const (
	// RetryConnect: the backend refused, reset or closed the connection before answering.
	RetryConnect RetryReason = iota
	// RetryHeaderTimeout: it sent no response headers within the header timeout.
	RetryHeaderTimeout
	// RetryStalled: it sent nothing on any of its requests for the stall timeout.
	RetryStalled
	// RetryOverloaded: it answered 429, or 503 with Retry-After.
	RetryOverloaded
	// RetryServerError: it answered 502, 504, or 503 without Retry-After.
	RetryServerError
	numRetryReasons
)

// RetryOutcome is what the gateway did about such an attempt: the value of
// usher_retries_total's outcome label.
type RetryOutcome uint8

const (
	// Retried: the request was sent to another backend.
	Retried RetryOutcome = iota
	// RetryAttemptsExhausted: the attempt was the request's last allowed (Retry.Attempts);
	// its answer or error went to the client.
	RetryAttemptsExhausted
	// RetryBudgetExhausted: the retry budget (Retry.BudgetRatio over BudgetWindow) refused
	// another attempt; the answer or error went to the client.
	RetryBudgetExhausted
	// RetryNoBackend: no backend the request had not tried was left to pick.
	RetryNoBackend
	// RetryClientGone: the client went away before another attempt.
	RetryClientGone
	numRetryOutcomes
)

var (
	retryReasons  = [numRetryReasons]string{"connect", "header_timeout", "stalled", "overloaded", "server_error"}
	retryOutcomes = [numRetryOutcomes]string{"retried", "attempts_exhausted", "budget_exhausted", "no_backend", "client_gone"}
)

// retrySeries is usher_retries_total, every reason × outcome created at 0.
type retrySeries struct {
	vec     *prometheus.CounterVec
	counted [numRetryReasons][numRetryOutcomes]prometheus.Counter
}

func newRetrySeries(cl prometheus.Labels) retrySeries {
	s := retrySeries{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_retries_total", ConstLabels: cl,
		Help: "Attempts that failed before any byte reached the client in a way worth retrying, by reason (connect, header_timeout, stalled, overloaded, server_error) and outcome: retried on another backend, or not — attempts_exhausted, budget_exhausted (the retry budget refused), no_backend (none left to try), client_gone.",
	}, []string{"reason", "outcome"})}
	for i, r := range retryReasons {
		for j, o := range retryOutcomes {
			s.counted[i][j] = s.vec.WithLabelValues(r, o)
		}
	}
	return s
}

// ObserveRetry counts one attempt that failed for reason and what was done about it (values
// outside the constants are ignored). O(1), no allocation.
func (u *Recorder) ObserveRetry(reason RetryReason, outcome RetryOutcome) {
	if u == nil || reason >= numRetryReasons || outcome >= numRetryOutcomes {
		return
	}
	u.retries.counted[reason][outcome].Inc()
}

// ClampedScores returns a collector of the router's clamped scores per scorer, read when
// collected (the router counts them itself, and only when a score is clamped, so the pick path
// pays nothing for the series):
//
//	usher_clamped_scores_total{scorer}   counter
//
// The scorer label is each scorer's of the router's profile (internal/routerstats says how it
// is spelt): a bounded set fixed when the router is made. Built-in scorers never give a score
// outside [0, 1], so theirs stay 0; a scorer of the program's own that does is misbehaving
// (the router uses 0 for NaN and the nearer bound otherwise). cl is added to the series.
func ClampedScores(r *routing.Router, cl prometheus.Labels) prometheus.Collector {
	return &clampedScores{r: r, desc: prometheus.NewDesc("usher_clamped_scores_total",
		"Scores the router clamped into [0, 1] (NaN to 0), by scorer of its profile: a scorer giving them is misbehaving.",
		[]string{"scorer"}, cl)}
}

type clampedScores struct {
	r    *routing.Router
	desc *prometheus.Desc
}

func (c *clampedScores) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reads the router's counts. O(scorers).
func (c *clampedScores) Collect(ch chan<- prometheus.Metric) {
	for _, s := range routerstats.AppendClamped(c.r, nil) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(s.Count), s.Scorer)
	}
}
