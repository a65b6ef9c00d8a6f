package routing

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// DefaultOutputTokens is the answer length PredictedLatency assumes for a request that does not
// say (Request.OutputTokens 0).
const DefaultOutputTokens = 256

// PredictedLatencyOptions configures NewPredictedLatency.
type PredictedLatencyOptions struct {
	// Model predicts and learns. Nil: a NewLinearLatency with its defaults. The Router the
	// scorer is given to feeds the model every outcome; give a model to one Router only.
	Model LatencyModel
	// OutputTokens is the answer length assumed when Request.OutputTokens is 0. Zero:
	// DefaultOutputTokens.
	OutputTokens int
}

// NewPredictedLatency returns a scorer that ranks candidates by the latency its model predicts
// for the request on each, or an error wrapping ErrInvalidOptions.
//
// A candidate's cost is its predicted TTFT plus the answer's length times its predicted TPOT,
// and its relative speed r is the lowest cost among the candidates over its own: 1 for the
// fastest, ½ for one predicted twice as slow. Scores come in two tiers. A request with targets
// (Request.Targets) is routed by SLO: a candidate predicted to meet every target scores
// ½ + ½·h, where h is its smallest headroom (target − prediction)/target, so the one with the
// most headroom wins; one predicted to miss scores ½·r, below every candidate that meets them.
// A request without targets is one that every candidate meets: each scores ½ + ½·r. So the
// scorer's weight is what it adds between an SLO met and missed, and half of it is what ranks
// candidates by speed; under MaxScore a term of weight 2 places requests without targets as
// a full-range term of weight 1 would (the constant ½ changes no choice).
//
// The Router learns the model from every Result it finishes (see LatencyModel). With the
// built-in model the scorer reads the pick's columns like the other built-in scorers: O(n),
// no allocation, about 10 ns per candidate. With another model it calls Predict per candidate.
func NewPredictedLatency(o PredictedLatencyOptions) (Scorer, error) {
	if o.OutputTokens < 0 {
		return nil, fmt.Errorf("%w: PredictedLatencyOptions.OutputTokens %d: want ≥ 0", ErrInvalidOptions, o.OutputTokens)
	}
	if o.OutputTokens == 0 {
		o.OutputTokens = DefaultOutputTokens
	}
	if o.Model == nil {
		m, err := NewLinearLatency(LinearLatencyOptions{})
		if err != nil {
			return nil, err
		}
		o.Model = m
	}
	if lin, ok := o.Model.(*LinearLatency); ok {
		return &linearScorer{m: lin, out: o.OutputTokens}, nil
	}
	return &modelScorer{m: o.Model, out: o.OutputTokens}, nil
}

// latencyPart is implemented by the parts whose model the Router feeds.
type latencyPart interface{ latencyModel() LatencyModel }

// linearScorer is PredictedLatency over the built-in model, scoring columns.
type linearScorer struct {
	m    *LinearLatency
	out  int
	cols sync.Pool // *cols, for Score
}

// modelScorer is PredictedLatency over any other model.
type modelScorer struct {
	m     LatencyModel
	out   int
	feats sync.Pool // *Features: an interface call's argument escapes
}

var (
	_ unitScorer  = (*linearScorer)(nil)
	_ latencyPart = (*linearScorer)(nil)
	_ latencyPart = (*modelScorer)(nil)
)

func (s *linearScorer) latencyModel() LatencyModel { return s.m }
func (s *modelScorer) latencyModel() LatencyModel  { return s.m }

func (s *linearScorer) Needs() colMask {
	return colQueued | colRunning | colKV | colActive | colTokens | colMatched | colID
}

// candNeeds is nothing: given the Candidates, AddCols reads them in one pass.
func (s *linearScorer) candNeeds() colMask { return 0 }

// candScorer is a unitScorer that reads cols.cands, when set, rather than the columns it
// needs: it needs only candNeeds() of them then.
type candScorer interface {
	unitScorer
	candNeeds() colMask
}

// Score implements Scorer: the candidates' columns, then AddCols, so that the two agree by
// construction. O(len(cands)); the columns come from a pool.
func (s *linearScorer) Score(req *Request, cands []Candidate, dst []float64) {
	c, _ := s.cols.Get().(*cols)
	if c == nil || len(c.IDs) < len(cands) {
		c = new(cols)
		c.Grow(max(len(cands), 16))
	}
	colsFrom(c, cands, s.Needs())
	clear(dst)
	s.AddCols(req, c, 1, dst[:len(cands)])
	s.cols.Put(c)
}

// AddCols predicts every candidate from the columns and adds w times its score (see
// NewPredictedLatency). The model's arithmetic (linearCoef.eval) is written out here with the
// coefficients in registers: this loop is the model's whole cost on the pick path. O(n), no
// allocation.
func (s *linearScorer) AddCols(req *Request, c *cols, w float64, tot []float64) {
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
				if fresh&SignalQueued != 0 && st.Queued > 0 {
					q = float64(st.Queued)
				}
				if fresh&SignalRunning != 0 && st.Running > 0 {
					r = float64(st.Running)
				}
				if k := kvFree(st.KVUtilization); fresh&SignalKVUtilization != 0 && k == k && k < 1 {
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
func (s *modelScorer) Score(req *Request, cands []Candidate, dst []float64) {
	f, _ := s.feats.Get().(*Features)
	if f == nil {
		f = new(Features)
	}
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

func outputOf(req *Request, def int) float64 {
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

// latencyScore is one candidate's score in [0, 1] (see NewPredictedLatency), given the lowest
// cost among the candidates.
func latencyScore(req *Request, ttft, tpot, out, best float64) float64 {
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

// observed is what Done learns of t's streamed request: its TTFT, from the pick to
// info.FirstTokenAt, unless FirstToken already taught it (firstSeen); its TPOT, over the rest of
// the answer, when it succeeded with at least two output tokens.
func observed(t *ticket, info *DoneInfo, firstSeen bool, now func() time.Time) (obs Latency) {
	if info.FirstTokenAt.IsZero() {
		return obs
	}
	if !firstSeen {
		obs.TTFT = info.FirstTokenAt.Sub(t.picked)
	}
	if info.Err == nil && info.OutputTokens >= 2 {
		end := info.End
		if end.IsZero() {
			end = now()
		}
		obs.TPOT = end.Sub(info.FirstTokenAt) / time.Duration(info.OutputTokens-1)
	}
	return obs
}

// learnLatency tells the router's latency models what t's streamed request got (a whole
// answer's first byte is its end, so it teaches nothing). Result.FirstToken teaches the TTFT
// as soon as the first token comes — a server that slows down is seen at its next first token,
// not at the end of an answer — and Done the TPOT (and the TTFT, when FirstToken was not
// called).
func (r *Router) learnLatency(t *ticket, obs Latency) {
	if obs.TTFT <= 0 && obs.TPOT <= 0 {
		return
	}
	obs.TTFT, obs.TPOT = max(obs.TTFT, 0), max(obs.TPOT, 0)
	r.stats.latency.Add(1)
	for _, m := range r.models {
		m.Learn(&t.features, obs)
	}
}
