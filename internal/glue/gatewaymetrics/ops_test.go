package gatewaymetrics

import (
	"math"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/promtest"
	"github.com/usher-llm/usher/routing"
)

// usher_retries_total: every reason × outcome from the start; ObserveRetry counts one, and
// ignores values outside the constants.
func TestRetries(t *testing.T) {
	u := mustUsher(t, Options{})
	u.ObserveRetry(RetryConnect, Retried)
	u.ObserveRetry(RetryConnect, Retried)
	u.ObserveRetry(RetryServerError, RetryBudgetExhausted)
	u.ObserveRetry(RetryStalled, RetryNoBackend)
	u.ObserveRetry(numRetryReasons, Retried)          // ignored
	u.ObserveRetry(RetryOverloaded, numRetryOutcomes) // ignored
	text := promtest.Text(t, u, "usher_retries_total")
	if n := strings.Count(text, "\nusher_retries_total{"); n != int(numRetryReasons)*int(numRetryOutcomes) {
		t.Errorf("%d series, want %d:\n%s", n, int(numRetryReasons)*int(numRetryOutcomes), text)
	}
	for _, want := range []string{
		`usher_retries_total{outcome="retried",reason="connect"} 2`,
		`usher_retries_total{outcome="budget_exhausted",reason="server_error"} 1`,
		`usher_retries_total{outcome="no_backend",reason="stalled"} 1`,
		`usher_retries_total{outcome="client_gone",reason="overloaded"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("no %s in\n%s", want, text)
		}
	}
}

// usher_clamped_scores_total reads the router's own counts, one series per scorer of its
// profile.
func TestClampedScores(t *testing.T) {
	nan := routing.ScorerFunc(func(_ *routing.Request, cs []routing.Candidate, dst []float64) {
		for i := range cs {
			dst[i] = math.NaN()
		}
	})
	half := routing.ScorerFunc(func(_ *routing.Request, cs []routing.Candidate, dst []float64) {
		for i := range cs {
			dst[i] = 0.5
		}
	})
	r, err := routing.New(routing.Options{Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: half, Weight: 1}, {Scorer: nan, Weight: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Update([]routing.BackendState{{Name: "a", Health: routing.Healthy}, {Name: "b", Health: routing.Healthy}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p, err := r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		p.Done(routing.DoneInfo{})
	}
	got := promtest.Text(t, ClampedScores(r, nil), "usher_clamped_scores_total")
	want := `# HELP usher_clamped_scores_total Scores the router clamped into [0, 1] (NaN to 0), by scorer of its profile: a scorer giving them is misbehaving.
# TYPE usher_clamped_scores_total counter
usher_clamped_scores_total{scorer="ScorerFunc"} 0
usher_clamped_scores_total{scorer="ScorerFunc#2"} 6
`
	if got != want {
		t.Errorf("exposition\n%s\nwant\n%s", got, want)
	}
}
