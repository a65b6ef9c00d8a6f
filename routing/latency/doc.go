// Package latency predicts the latency a request would get on each backend, learns it from
// the fleet's own outcomes, and ranks candidates by it: a scorer for package routing.
//
// # Predicted latency
//
// The default profile (routing/profiles' Usher) is a hand-weighted sum, and weights that win
// in one regime lose in another. The scorer of [NewScorer] replaces the weights with a model
// learned from the fleet's own outcomes: it predicts, per candidate, the request's time to
// first token and time per output token, and ranks candidates by TTFT + OutputTokens·TPOT.
// Alone it is a complete router; with the other scorers it is one more term.
//
// # The built-in model
//
// [Linear] is a ridge regression shared by the fleet. TTFT is fitted on the prefill in front
// of the request and its own (the router's in-flight prefill counter plus the candidate's
// uncached tokens), its own alone, the polled waiting and running requests, KV use, requests
// in flight, and the prefill work times the batch (chunked prefill shares every step with the
// decodes); TPOT on running, in flight, KV use and the prefill in front. Each outcome is
// weighted by 1/latency, so that the fit minimises Σ (y − ŷ)²/y: squared error lets a
// queueing tail of seconds drag every prediction of the bulk towards it, relative error
// ignores the tail. The weights fade by 1 − 1/4096 per later outcome, and the normal equations
// are kept current as outcomes come, so memory is fixed and a refit (every 16 outcomes) is one
// 8×8 Cholesky solve. The fit is drawn towards a prior (20 ms plus the prefill at 16,000 tokens
// per second; 20 ms per token) with the weight of one outcome per input, so a cold fleet is
// routed by prefill work, as routing/load's TokenBacklog does, until outcomes outweigh the
// prior. On top of the shared fit each backend has a speed factor per target, the decayed
// ratio of what it did to what the shared fit predicted (newest outcome weighted Adapt = 0.1):
// a server that slows down (a noisy neighbour, a thermal throttle, a smaller GPU) is predicted
// slower within about ten of its outcomes, while the fit keeps describing how load becomes
// latency everywhere. A server the model has come to predict slow is picked less and so
// teaches it less; its factor is drawn back towards 1 once the fleet has had 64 outcomes
// without one from it, so that it is tried again after it recovers.
//
// # How the Router feeds the model
//
// A [routing.Router] whose profile holds the scorer feeds its model: Pick keeps the chosen
// candidate and records the prediction for it ([routing.Result.Predicted]);
// [routing.Result.FirstToken] teaches the TTFT, from the pick, as soon as the first token comes
// (a slowed server is seen at its next first token, not at the end of an answer), and
// [routing.Result.Done] the TPOT over the rest of the answer ([routing.DoneInfo.End]), each with
// the [Features] the candidate had at the pick. Only streamed requests teach: a whole answer's
// first byte is its end. [routing.Stats.LatencyOutcomes] counts what the router taught. Any
// [Model] can take the built-in's place; the scorer then calls its Predict per candidate.
//
// A request with targets ([routing.Request.Targets]) is routed by SLO: a candidate predicted to
// meet all of them scores ½ + ½·headroom, so the one with the most headroom wins; one
// predicted to miss scores below every candidate that meets them, in order of predicted cost.
// [Predict] gives an admission step the best prediction without picking, so that a request no
// backend can serve in time is queued or shed by flowcontrol (see the proxy package) rather
// than sent to miss.
//
// # Cost
//
// A prediction is a dozen multiply-adds and two loads of the backend's factors, written out in
// the scorer's one pass over the candidates (the columns routing lays out for its built-in
// scorers). At 100 backends the default profile plus the term picks and finishes a request in
// 4.31 µs of CPU against 3.33 µs without it (routing's BenchmarkPickLatency, learning
// included; 0 allocations), learning an outcome takes ~150 ns under the model's mutex and a
// refit every 16 outcomes. llm-d's predicted-latency scheduling trains an XGBoost model in two
// sidecar containers and asks them over HTTP per pick; bench's boosted-tree model
// (bench/latencytrees.go) measures what trees would add — a third of the error on a queueing
// knee, at 0.5 µs per prediction, too slow for a pick over a fleet (bench/README.md,
// "Predicted latency").
//
// # Alternatives not taken
//
// Ranking by predicted latency alone is greedy: it places the request at hand where it is
// served fastest now, not where its conversation's prefix will serve the next turns, and on the
// bench's conversational workloads it loses the cache and collapses. The model is a term of the
// default's sum, not a replacement for it, and its scores come in two tiers so that one weight
// serves both uses: a request without targets scores ½ + ½·relative speed (every candidate
// meets the targets it does not have), so half the weight ranks by speed, and the whole weight
// separates a target met from one missed.
//
// # Concurrency
//
// [Linear] and the scorers of [NewScorer] are safe for concurrent use; [Predict] is safe
// wherever [routing.Router.Pick] is. [Features], [LinearOptions] and [ScorerOptions]
// are plain values.
package latency
