package routing

import (
	"time"

	"github.com/usher-llm/usher/routing/internal/hook"
)

// Latency is a time to first token and a time per output token: what a latency model
// (package routing/latency) predicts (Result.Predicted), what a request was observed to get,
// or the targets it should meet (Request.Targets). A zero field means unknown, or no target.
type Latency struct {
	TTFT time.Duration
	TPOT time.Duration
}

// The latency models' seam (hook.Latency): a Router whose profile holds routing/latency's
// scorer keeps the chosen Candidate of each pick in its ticket, asks the first scorer for
// Result.Predicted, and teaches every model what streamed requests got.

// latencyOf returns the scorer's model seam, if it has one.
func latencyOf(s Scorer) (hook.Latency, bool) {
	l, ok := s.(hook.Latency)
	return l, ok
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
	for _, l := range r.latency {
		l.LearnChosen(t.prompt, &t.chosen, obs.TTFT, obs.TPOT)
	}
}

// predict is hook.Predict: the best latency the profile's first latency model predicts for
// req among the backends a Pick would consider now, after the filters, without picking or
// charging anything: the lowest predicted TTFT and, separately, the lowest TPOT. ok is false
// when the profile has no latency model or no backend is eligible. O(n) for n backends plus
// one prefix match and the filters; safe for concurrent use; no allocation once the pools are
// warm.
func (r *Router) predict(req *Request) (best Latency, ok bool) {
	s := r.snap.Load()
	if len(r.latency) == 0 || s == nil || len(s.backends) == 0 {
		return Latency{}, false
	}
	sc, p := r.begin(s, req)
	req = &sc.req
	cands, _ := s.candidates(sc.cands[:0], req, &p)
	for _, f := range r.filters {
		if len(cands) == 0 {
			break
		}
		cands = f.Filter(req, cands)
	}
	m := r.latency[0]
	for i := range cands {
		ttft, tpot := m.PredictChosen(req.PromptTokens, &cands[i])
		if !ok || ttft < best.TTFT {
			best.TTFT = ttft
		}
		if !ok || tpot < best.TPOT {
			best.TPOT = tpot
		}
		ok = true
	}
	sc.req = Request{}
	sc.cands = cands[:0]
	r.scratch.Put(sc)
	return best, ok
}
