package latency

import (
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// Predict returns the best latency that the model of r's first scorer of [NewScorer] (in the
// profile's order) predicts for req among the backends a Pick would consider now, after the
// filters, without picking or charging anything: the lowest predicted TTFT and, separately,
// the lowest TPOT. ok is false when r's profile has no such scorer or no backend is eligible.
// An admission step uses it to tell whether any backend can meet a request's targets
// ([routing.Request.Targets]).
//
// O(n) for n backends plus one prefix match and the filters; safe for concurrent use with
// Pick and Update; no allocation once the router's pools are warm.
func Predict(r *routing.Router, req *routing.Request) (best routing.Latency, ok bool) {
	best.TTFT, best.TPOT, ok = hook.Predict(r, req)
	return best, ok
}
