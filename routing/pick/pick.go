// Package pick holds the built-in pickers of a [routing.Profile]: the highest score with ties
// at random ([MaxScore], also what a nil Picker means), a draw in proportion to score
// ([WeightedRandom]), the better of two at random ([PowerOfTwo]), a softmax draw
// ([Softmax]) and turns in order ([RoundRobin]). A picker draws only from the Router's seeded
// source, so picks made one after another with a fixed seed are reproducible. O(candidates)
// per pick, no allocation; safe for concurrent use.
package pick

import (
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
	"github.com/usher-llm/usher/routing/internal/rng"
)

// MaxScore returns the picker that takes the highest combined score, breaking exact ties
// uniformly at random (llm-d's max-score picker shuffles ties the same way). O(n).
func MaxScore() routing.Picker { return maxScorePicker{} }

type maxScorePicker struct{}

func (maxScorePicker) Pick(_ *routing.Request, _ []routing.Candidate, scores []float64, g *rand.Rand) int {
	return rng.MaxIndex(scores, g)
}

// WeightedRandom returns the picker that chooses candidate i with probability
// scores[i] / Σ scores, by A-Res sampling: the largest key u_i^(1/score_i) with u_i uniform in
// (0, 1) wins (as llm-d's weighted-random picker). Candidates scoring 0 are chosen only when every
// candidate scores 0, and then uniformly. O(n).
func WeightedRandom() routing.Picker { return weightedRandomPicker{} }

type weightedRandomPicker struct{}

func (weightedRandomPicker) Pick(_ *routing.Request, _ []routing.Candidate, scores []float64, g *rand.Rand) int {
	best, bestKey := -1, math.Inf(-1)
	for i, s := range scores {
		if !(s > 0) {
			continue
		}
		u := rng.Float64(g)
		if u == 0 {
			u = 0x1p-53
		}
		// log(u^(1/s)) = log(u)/s keeps the order and avoids underflow for small scores.
		if k := math.Log(u) / s; k > bestKey {
			best, bestKey = i, k
		}
	}
	if best < 0 {
		return rng.IntN(g, len(scores))
	}
	return best
}

// PowerOfTwo returns the picker that samples two distinct candidates uniformly and keeps the one
// with the higher score (a tie goes to either at random). It spreads load nearly as well as
// max-score with far less herding when many routers share stale signals. O(1) after scoring.
func PowerOfTwo() routing.Picker { return powerOfTwoPicker{} }

type powerOfTwoPicker struct{}

func (powerOfTwoPicker) Pick(_ *routing.Request, _ []routing.Candidate, scores []float64, g *rand.Rand) int {
	n := len(scores)
	if n == 1 {
		return 0
	}
	a := rng.IntN(g, n)
	b := rng.IntN(g, n-1)
	if b >= a {
		b++
	}
	switch {
	case scores[a] > scores[b]:
		return a
	case scores[b] > scores[a]:
		return b
	}
	if g.Uint64()&1 == 0 {
		return a
	}
	return b
}

// RoundRobin returns a picker that ignores scores and cycles through the candidates with a
// shared atomic counter: the i-th pick takes candidate i mod n. Each call of RoundRobin returns
// an independent cycle. O(1).
func RoundRobin() routing.Picker { return &roundRobinPicker{} }

type roundRobinPicker struct{ next atomic.Uint64 }

func (p *roundRobinPicker) Pick(_ *routing.Request, cands []routing.Candidate, _ []float64, _ *rand.Rand) int {
	return int((p.next.Add(1) - 1) % uint64(len(cands)))
}

// Softmax returns the picker that samples candidate i with probability proportional to
// exp(score_i / temperature). With temperature ≤ 0 it is MaxScore. Dynamo's KV router samples
// this way over its min-max normalised cost (see DynamoCost). O(n).
func Softmax(temperature float64) routing.Picker {
	if !(temperature > 0) {
		return MaxScore()
	}
	return softmaxPicker{t: temperature}
}

type softmaxPicker struct{ t float64 }

func (p softmaxPicker) Pick(_ *routing.Request, _ []routing.Candidate, scores []float64, g *rand.Rand) int {
	hi := math.Inf(-1)
	for _, s := range scores {
		hi = max(hi, s)
	}
	sum := 0.0
	for _, s := range scores {
		sum += math.Exp((s - hi) / p.t)
	}
	u := rng.Float64(g) * sum
	for i, s := range scores {
		u -= math.Exp((s - hi) / p.t)
		if u < 0 {
			return i
		}
	}
	return len(scores) - 1
}

// ScoresOnly marks the pickers of this package as reading nothing of the candidates but their
// number, so that a Router may pick among candidates it has not built (see
// routing/internal/hook).
func (maxScorePicker) ScoresOnly()       {}
func (weightedRandomPicker) ScoresOnly() {}
func (powerOfTwoPicker) ScoresOnly()     {}
func (*roundRobinPicker) ScoresOnly()    {}
func (softmaxPicker) ScoresOnly()        {}

var (
	_ hook.ScoresOnly = maxScorePicker{}
	_ hook.ScoresOnly = weightedRandomPicker{}
	_ hook.ScoresOnly = powerOfTwoPicker{}
	_ hook.ScoresOnly = (*roundRobinPicker)(nil)
	_ hook.ScoresOnly = softmaxPicker{}
)
