package latency

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cols"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// DefaultOutputTokens is the answer length a scorer of [NewScorer] assumes for a request that
// does not say ([routing.Request.OutputTokens] 0).
const DefaultOutputTokens = 256

// ScorerOptions configures [NewScorer].
type ScorerOptions struct {
	// Model predicts and learns. Nil: a [NewLinear] with its defaults. The Router the
	// scorer is given to feeds the model every outcome; give a model to one Router only.
	Model Model
	// OutputTokens is the answer length assumed when [routing.Request.OutputTokens] is 0.
	// Zero: [DefaultOutputTokens].
	OutputTokens int
}

// NewScorer returns a scorer that ranks candidates by the latency its model predicts for the
// request on each, or an error wrapping [routing.ErrInvalidOptions].
//
// A candidate's cost is its predicted TTFT plus the answer's length times its predicted TPOT,
// and its relative speed r is the lowest cost among the candidates over its own: 1 for the
// fastest, ½ for one predicted twice as slow. Scores come in two tiers. A request with targets
// ([routing.Request.Targets]) is routed by SLO: a candidate predicted to meet every target
// scores ½ + ½·h, where h is its smallest headroom (target − prediction)/target, so the one
// with the most headroom wins; one predicted to miss scores ½·r, below every candidate that
// meets them. A request without targets is one that every candidate meets: each scores
// ½ + ½·r. So the scorer's weight is what it adds between an SLO met and missed, and half of
// it is what ranks candidates by speed; under a max-score picker a term of weight 2 places
// requests without targets as a full-range term of weight 1 would (the constant ½ changes no
// choice).
//
// The [routing.Router] the scorer is given to learns the model from every Result it finishes
// (see [Model]). With the built-in model the scorer reads the pick's columns like the other
// built-in scorers: O(n), no allocation, about 10 ns per candidate. With another model it
// calls Predict per candidate. The scorer is safe for concurrent use.
func NewScorer(o ScorerOptions) (routing.Scorer, error) {
	if o.OutputTokens < 0 {
		return nil, fmt.Errorf("%w: ScorerOptions.OutputTokens %d: want ≥ 0", routing.ErrInvalidOptions, o.OutputTokens)
	}
	if o.OutputTokens == 0 {
		o.OutputTokens = DefaultOutputTokens
	}
	if o.Model == nil {
		m, err := NewLinear(LinearOptions{})
		if err != nil {
			return nil, err
		}
		o.Model = m
	}
	if lin, ok := o.Model.(*Linear); ok {
		return &linearScorer{m: lin, out: o.OutputTokens}, nil
	}
	return &modelScorer{m: o.Model, out: o.OutputTokens}, nil
}

// colsT is the columns a pick fills for the scorers that read them.
type colsT = cols.Cols[routing.Candidate, routing.BackendID, routing.Signal]

// linearScorer is the scorer over the built-in model, scoring columns.
type linearScorer struct {
	m    *Linear
	out  int
	cols sync.Pool // *colsT, for Score
}

// modelScorer is the scorer over any other model.
type modelScorer struct {
	m     Model
	out   int
	feats sync.Pool // *Features: an interface call's argument escapes
}

var (
	_ hook.Latency = (*linearScorer)(nil)
	_ hook.Latency = (*modelScorer)(nil)
)

// LatencyModel, PredictChosen and LearnChosen are the Router's seam (hook.Latency).

func (s *linearScorer) LatencyModel() any { return s.m }
func (s *modelScorer) LatencyModel() any  { return s.m }

func (s *linearScorer) PredictChosen(prompt int, cand any) (ttft, tpot time.Duration) {
	f := featuresOf(prompt, cand.(*routing.Candidate))
	p := s.m.Predict(&f)
	return p.TTFT, p.TPOT
}

func (s *linearScorer) LearnChosen(prompt int, cand any, ttft, tpot time.Duration) {
	f := featuresOf(prompt, cand.(*routing.Candidate))
	s.m.Learn(&f, routing.Latency{TTFT: ttft, TPOT: tpot})
}

func (s *modelScorer) PredictChosen(prompt int, cand any) (ttft, tpot time.Duration) {
	f := s.features()
	*f = featuresOf(prompt, cand.(*routing.Candidate))
	p := s.m.Predict(f)
	s.feats.Put(f)
	return p.TTFT, p.TPOT
}

func (s *modelScorer) LearnChosen(prompt int, cand any, ttft, tpot time.Duration) {
	f := s.features()
	*f = featuresOf(prompt, cand.(*routing.Candidate))
	s.m.Learn(f, routing.Latency{TTFT: ttft, TPOT: tpot})
	s.feats.Put(f)
}

// features returns a Features from the pool.
func (s *modelScorer) features() *Features {
	f, _ := s.feats.Get().(*Features)
	if f == nil {
		f = new(Features)
	}
	return f
}

// Needs, CandNeeds and AddCols are the built-in scorers' column seam (routing/internal/cols).

func (s *linearScorer) Needs() cols.Mask {
	return cols.Queued | cols.Running | cols.KV | cols.Active | cols.Tokens | cols.Matched | cols.ID
}

// CandNeeds is nothing: given the Candidates, AddCols reads them in one pass.
func (s *linearScorer) CandNeeds() cols.Mask { return 0 }

// Score implements routing.Scorer: AddCols over the candidates themselves (the columns' Cands),
// as the Router's general path calls it, so that the two agree by construction.
// O(len(cands)); the columns' scratch comes from a pool.
func (s *linearScorer) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	c, _ := s.cols.Get().(*colsT)
	if c == nil || len(c.IDs) < len(cands) {
		c = new(colsT)
		c.Grow(max(len(cands), 16))
	}
	c.Cands = cands
	c.QueuedStats, c.RunningStats, c.KVStats = cols.Stats{}, cols.Stats{}, cols.Stats{}
	clear(dst)
	s.AddCols(req, c, 1, dst[:len(cands)])
	c.Cands = nil
	s.cols.Put(c)
}

// AddCols predicts every candidate from the columns and adds w times its score (see
// NewScorer). The model's arithmetic (linearCoef.eval) is written out here with the
// coefficients in registers: this loop is the model's whole cost on the pick path. O(n), no
// allocation.
func (s *linearScorer) AddCols(req *routing.Request, c *colsT, w float64, tot []float64) {
	n := len(tot)
	ttft, tpot := c.TTFT[:n], c.TPOT[:n]
	prompt, out := req.PromptTokens, outputOf(req, s.out)
	coef, sp := s.m.coef.Load(), *s.m.speeds.Load()
	a0, a1, a2, a3, a4, a5, a6, a7 := coef.ttft[0], coef.ttft[1], coef.ttft[2], coef.ttft[3], coef.ttft[4], coef.ttft[5],
		coef.ttft[6], coef.ttft[7]
	b0, b1, b2, b3, b4 := coef.tpot[0], coef.tpot[1], coef.tpot[2], coef.tpot[3], coef.tpot[4]
	best := math.Inf(1)
	if cands := c.Cands; cands != nil {
		// The same inputs as the columns would give, bit for bit, read in one pass.
		for i := range tot {
			cd := &cands[i]
			st, fresh := cd.State, cd.Fresh
			work, own := float64(cd.InFlight.PrefillTokens+int64(cd.UncachedTokens))*1e-3, float64(max(0, prompt-cd.MatchedTokens))*1e-3
			q, r, kvu, act := 0.0, 0.0, 0.0, float64(cd.InFlight.Requests)
			if st != nil {
				if fresh&routing.SignalQueued != 0 && st.Queued > 0 {
					q = float64(st.Queued)
				}
				if fresh&routing.SignalRunning != 0 && st.Running > 0 {
					r = float64(st.Running)
				}
				if k := cols.KVFree(st.KVUtilization); fresh&routing.SignalKVUtilization != 0 && k == k && k < 1 {
					kvu = 1 - k
				}
			}
			t := a0 + a1*work + a2*own + a3*q + a4*r + a5*kvu + a6*act + a7*(work*r/64)
			d := b0 + b1*r + b2*act + b3*kvu + b4*work
			if t < 1e-3 { // plain comparisons: the min and max builtins order NaN and ±0, at a cost
				t = 1e-3
			}
			if d < 1e-4 {
				d = 1e-4
			}
			if id := cd.ID; int(id) < len(sp) {
				t *= sp[id].factor(0)
				d *= sp[id].factor(1)
			}
			ttft[i], tpot[i] = t, d
			if c := t + out*d; c < best { // positive and finite: t ≥ 1 ms, d ≥ 0.1 ms, finite factors
				best = c
			}
		}
	} else {
		tokens, matched := c.Tokens[:n], c.MatchedTokens[:n]
		queued, running, kv, active, ids := c.Queued[:n], c.Running[:n], c.KV[:n], c.Active[:n], c.IDs[:n]
		for i := range tot {
			work, own := float64(tokens[i])*1e-3, float64(max(0, prompt-matched[i]))*1e-3
			q, r, kvu, act := queued[i], running[i], 0.0, active[i]
			if !(q > 0) {
				q = 0 // unknown (NaN) or none
			}
			if !(r > 0) {
				r = 0
			}
			if k := kv[i]; k == k && k < 1 {
				kvu = 1 - k
			}
			t := a0 + a1*work + a2*own + a3*q + a4*r + a5*kvu + a6*act + a7*(work*r/64)
			d := b0 + b1*r + b2*act + b3*kvu + b4*work
			if t < 1e-3 { // plain comparisons: the min and max builtins order NaN and ±0, at a cost
				t = 1e-3
			}
			if d < 1e-4 {
				d = 1e-4
			}
			if id := ids[i]; int(id) < len(sp) {
				t *= sp[id].factor(0)
				d *= sp[id].factor(1)
			}
			ttft[i], tpot[i] = t, d
			if c := t + out*d; c < best { // positive and finite: t ≥ 1 ms, d ≥ 0.1 ms, finite factors
				best = c
			}
		}
	}
	if req.Targets.TTFT <= 0 && req.Targets.TPOT <= 0 {
		for i := range tot {
			tot[i] += w * (0.5 + 0.5*(best/(ttft[i]+out*tpot[i])))
		}
		return
	}
	for i := range tot {
		tot[i] += w * latencyScore(req, ttft[i], tpot[i], out, best)
	}
}

// Score implements Scorer: Predict per candidate, twice (see linearScorer.Score).
// O(len(cands)) calls of Predict.
func (s *modelScorer) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	f := s.features()
	out := outputOf(req, s.out)
	best := math.Inf(1)
	for i := range cands {
		*f = FeaturesOf(req, &cands[i])
		p := s.m.Predict(f)
		best = min(best, latencyCost(p.TTFT.Seconds(), p.TPOT.Seconds(), out))
	}
	for i := range cands {
		*f = FeaturesOf(req, &cands[i])
		p := s.m.Predict(f)
		dst[i] = latencyScore(req, p.TTFT.Seconds(), p.TPOT.Seconds(), out, best)
	}
	s.feats.Put(f)
}

func outputOf(req *routing.Request, def int) float64 {
	if req.OutputTokens > 0 {
		return float64(req.OutputTokens)
	}
	return float64(def)
}

// latencyCost is the predicted time of the whole answer, in seconds; +Inf when the
// prediction is not a positive finite number.
func latencyCost(ttft, tpot, out float64) float64 {
	c := ttft + out*tpot
	if !(c > 0) || math.IsInf(c, 1) {
		return math.Inf(1)
	}
	return c
}

// latencyScore is one candidate's score in [0, 1] (see NewScorer), given the lowest
// cost among the candidates.
func latencyScore(req *routing.Request, ttft, tpot, out, best float64) float64 {
	c := latencyCost(ttft, tpot, out)
	rel := 0.0
	if !math.IsInf(c, 1) {
		rel = best / c
	}
	tt, td := req.Targets.TTFT, req.Targets.TPOT
	if tt <= 0 && td <= 0 {
		return 0.5 + 0.5*rel
	}
	head := 1.0
	if tt > 0 {
		t := tt.Seconds()
		head = min(head, (t-ttft)/t)
	}
	if td > 0 {
		t := td.Seconds()
		head = min(head, (t-tpot)/t)
	}
	if head >= 0 && !math.IsInf(c, 1) {
		return 0.5 + 0.5*head
	}
	return 0.5 * rel
}
