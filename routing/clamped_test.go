package routing_test

import (
	"math"
	"slices"
	"testing"

	"github.com/usher-llm/usher/internal/routerstats"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
)

// Clamped scores are counted per scorer (the gateway's usher_clamped_scores_total): each
// scorer with a non-zero weight has its own label, in the profile's order, a type's second
// scorer its own; Stats.ClampedScores is their sum; and a pick that clamps allocates nothing.
func TestClampedScoresPerScorer(t *testing.T) {
	bad := ScorerFunc(func(_ *Request, cs []Candidate, dst []float64) {
		for i := range cs {
			dst[i] = math.NaN() // every score clamped
		}
	})
	good := ScorerFunc(func(_ *Request, cs []Candidate, dst []float64) {
		for i := range cs {
			dst[i] = 0.5
		}
	})
	r := routingtest.MustNew(t, Options{Profile: Profile{Scorers: []Weighted{
		{Scorer: load.Active(), Weight: 1}, {Scorer: good, Weight: 1}, {Scorer: load.KV(), Weight: 0}, {Scorer: bad, Weight: 1},
	}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(4, routingtest.T0))
	req := &Request{}
	for range 10 {
		p, err := r.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(DoneInfo{})
	}
	got := routerstats.AppendClamped(r, nil)
	want := []routerstats.Clamped{{Scorer: "minMaxScorer", Count: 0}, {Scorer: "ScorerFunc", Count: 0}, {Scorer: "ScorerFunc#2", Count: 40}}
	if !slices.Equal(got, want) {
		t.Errorf("AppendClamped = %+v, want %+v", got, want)
	}
	if st := r.Stats().ClampedScores; st != 40 {
		t.Errorf("Stats().ClampedScores = %d, want 40 (the sum over scorers)", st)
	}
	if routingtest.Race {
		return // the race detector makes sync.Pool drop items at random
	}
	if n := testing.AllocsPerRun(200, func() {
		p, err := r.Pick(req)
		if err == nil {
			p.Done(DoneInfo{})
		}
	}); n != 0 {
		t.Errorf("a pick that clamps: %v allocs, want 0", n)
	}
}
