// Package routing picks a model server for each LLM request.
//
// # The model
//
// A Router holds the set of backends as an immutable snapshot. One writer — typically a metrics
// scraper — builds a []BackendState from what it observed (queued and running requests, KV cache
// utilisation and capacity, health, role, and when it observed them) and calls Update, which
// copies it into a new snapshot and publishes it with an atomic pointer swap. Pick, called from
// any number of request goroutines, loads the pointer and works on what it sees; it takes no
// lock, never blocks, and allocates nothing once its pools are warm. This is gRPC's balancer
// split: state changes on one goroutine, picks run everywhere, and a pick's Done closes the
// books.
//
// A pick is a pipeline over candidates:
//
//	backends ─► role ─► Filters ─► Σ weight·Scorer ─► Picker ─► Result
//
// Every backend that serves the request's Role becomes a Candidate carrying its published
// state, the router's own in-flight counters, which of its signals are fresh, and how many
// leading blocks of the request's prompt the prefix index says it holds (one Match per pick, on
// the block hashes the caller computed once). Filters remove candidates. Each Scorer writes a
// score in [0, 1] per candidate; the router clamps anything else (NaN becomes 0) and counts it,
// so a faulty custom scorer cannot poison a pick. Scores combine as Σ weight_i · score_i with
// the weights as given, not normalised (llm-d's convention, so its profiles carry over): a
// scorer's weight is the most it can add. The Picker chooses: MaxScore (ties at random),
// WeightedRandom (probability proportional to score), PowerOfTwo, Softmax, RoundRobin.
//
// A custom scorer implements one method, Score. A filter, scorer or picker that learns may also
// implement PickObserver (told the choice before Pick returns) or Completer (told the outcome at
// Done). Disaggregated serving is two picks: the decode pick (Request.Role = RoleDecode) first,
// then, if a Decider approves given that pick's Result (how much of the prompt the decode
// server is believed to hold, how busy it is), the prefill pick (RolePrefill); backends of
// RoleBoth serve either. PrefixDecider is llm-d's rule — send the prefill away when the decode
// server lacks at least MinUncachedTokens of the prompt — optionally weighed by what an
// aggregated prefill would cost the decode server's running answers (BusyDecodes): a long
// prefill on a busy decode server stalls every answer it is producing. PoolDecider weighs the
// prefill pool instead: it sends a prefill away only while some prefill server has no more
// prefill work in flight than the decode server would have, so a saturated prefill pool sends
// work back to the decode servers rather than queueing first tokens behind it.
//
// # Accounting and the exactly-once rule
//
// Polled metrics lag a burst, so the router counts its own work. Pick charges the chosen
// backend one request, the request's uncached prompt tokens and its prompt's blocks before it
// returns, so the very next pick sees them. Result.FirstToken releases the prefill tokens;
// Result.Done releases the request and its blocks. Done must be called exactly once;
// FirstToken may run concurrently with it. The handle is pooled with a generation number, so a
// second Done is detected and panics as misuse, and a late FirstToken does nothing, rather than
// touching another request's counters.
//
// The prefix index learns at Pick by default (Profile.Learn = LearnOnPick): the chosen backend
// is about to compute the prompt, so a request sent right behind it with the same prefix — a
// sibling of a fan-out, the next user of a template — finds those blocks there and co-locates
// (Dynamo's predict-on-route). A request that fails before its first token retracts the blocks
// the backend did not hold at pick time. LearnOnFirstToken learns only what is certainly
// computed; LearnFromEvents leaves the index to the engines' KV events.
//
// # Missing and stale signals
//
// A signal that was not observed (its bit is clear in BackendState.Known) or was observed longer
// ago than Options.StaleAfter is not a number. Reading it as zero load floods the backend;
// reading it as saturation drops it; both fail silently. Instead a candidate's Fresh set says
// which signals may be used; the health filter (routing/outlier) routes around stale backends while any fresh one
// remains (and keeps them, counted, when the scraper rather than the fleet is down); and the
// load scorers impute a missing value as the mean score of the candidates that have it, so that
// term neither attracts nor repels and the other terms decide. Router-side counters and the
// prefix index are never stale, which is why usher's own profile leans on them.
//
// # Passive health
//
// A server that fails every request at once finishes them instantly, looks idle to
// least-loaded scoring, and attracts the traffic. Whoever finishes a Result classifies a
// failure in DoneInfo.Failure, and the Completers of the profile hear of it before Done
// returns: package routing/outlier ejects failing backends from that, with Envoy's rules, and
// provides the health filter that routes around unhealthy and stale backends.
//
// # Sessions and the shared opening prompt
//
// When every session starts with the same system prompt, a prefix scorer sends every new
// session to the first server that saw it. SessionAware keeps a later turn where its history is
// cached — unless that server's load exceeds Overload (2 by default) times the pool's mean plus
// one request, or the history was evicted there and another server holds more of the prompt;
// then the turn has no home again. A turn without a
// home goes where most of its prompt is cached (at least KeptFraction of its blocks: a fork of
// another conversation, an agent's sub-task, a shared document) unless every such server is
// overloaded, and is placed for balance otherwise: a shared opening that is a small part of the
// prompt does not pull. Sessions live in a fixed-size, set-associative table of atomic words
// with a TTL: bounded memory whatever clients send, no lock on the pick path.
//
// # Models and LoRA adapters
//
// A backend may list the models it serves (BackendState.Models: base models and the adapters it
// can load); a request naming Request.Model is routed only to backends that list it or list
// nothing, before the filters, and fails with ErrNoBackendForModel when none does. A server
// with LoRA also reports the adapters of its running and waiting requests and its adapter slots
// (SignalAdapters, vLLM's vllm:lora_requests_info). Update interns every name into small ids
// per snapshot and sorts each backend's sets, so a pick resolves the request's model and adapter
// once and tests each backend with a binary search over a few integers. Because a scrape lags
// the burst that loads an adapter, the router counts its own in-flight requests per backend and
// adapter (Candidate.AdapterInFlight) in a fixed table of atomic words. AdapterAffinity turns
// both into a score: the adapter in use, then already loading, then a free slot, scaled down by
// adapters waiting for slots. Weighed against a load term (UsherOptions.AdapterWeight) it cuts
// adapter loads without pinning adapters to servers; bench/README.md, "LoRA adapters", has the
// figures.
//
// # Predicted latency
//
// The default profile is a hand-weighted sum, and weights that win in one regime lose in
// another. PredictedLatency replaces the weights with a model learned from the fleet's own
// outcomes: it predicts, per candidate, the request's time to first token and time per output
// token, and ranks candidates by TTFT + OutputTokens·TPOT. Alone it is a complete router; with
// the other scorers it is one more term.
//
// The built-in model, LinearLatency, is a ridge regression shared by the fleet. TTFT is fitted
// on the prefill in front of the request and its own (the router's in-flight prefill counter
// plus the candidate's uncached tokens), its own alone, the polled waiting and running requests,
// KV use, requests in flight, and the prefill work times the batch (chunked prefill shares every
// step with the decodes); TPOT on running, in flight, KV use and the prefill in front. Each
// outcome is weighted by 1/latency, so that the fit minimises Σ (y − ŷ)²/y: squared error lets
// a queueing tail of seconds drag every prediction of the bulk towards it, relative error
// ignores the tail. The weights fade by 1 − 1/4096 per later outcome, and the normal equations
// are kept current as outcomes come, so memory is fixed and a refit (every 16 outcomes) is one
// 8×8 Cholesky solve. The fit is drawn towards a prior (20 ms plus the prefill at 16,000 tokens
// per second; 20 ms per token) with the weight of one outcome per input, so a cold fleet is
// routed by prefill work, as TokenLoad does, until outcomes outweigh the prior. On top of the
// shared fit each backend has a speed factor per target, the decayed ratio of what it did to
// what the shared fit predicted (newest outcome weighted Adapt = 0.1): a server that slows down
// (a noisy neighbour, a thermal throttle, a smaller GPU) is predicted slower within about ten of
// its outcomes, while the fit keeps describing how load becomes latency everywhere. A server the
// model has come to predict slow is picked less and so teaches it less; its factor is drawn
// back towards 1 once the fleet has had 64 outcomes without one from it, so that it is tried
// again after it recovers.
//
// The Router feeds the model: Pick records the chosen candidate's Features and the prediction
// (Result.Predicted); Result.FirstToken teaches the TTFT, from the pick, as soon as the first
// token comes (a slowed server is seen at its next first token, not at the end of an answer),
// and Done the TPOT over the rest of the answer (DoneInfo.End). Only streamed requests teach:
// a whole answer's first byte is its end. Any LatencyModel can take the built-in's place; the
// scorer calls its Predict per candidate.
//
// A request with targets (Request.Targets) is routed by SLO: a candidate predicted to meet all
// of them scores ½ + ½·headroom, so the one with the most headroom wins; one predicted to miss
// scores below every candidate that meets them, in order of predicted cost. Router.Predict
// gives an admission step the best prediction without picking, so that a request no backend can
// serve in time is queued or shed by flowcontrol (see the proxy package) rather than sent to
// miss.
//
// Cost: a prediction is a dozen multiply-adds and two loads of the backend's factors, written
// out in the scorer's one pass over the candidates. At 100 backends the default profile plus
// the term picks and finishes a request in 4.31 µs of CPU against 3.33 µs without it
// (BenchmarkPickLatency, learning included; 0 allocations), learning an outcome takes ~150 ns
// under the model's mutex and a refit every 16 outcomes. llm-d's predicted-latency scheduling
// trains an XGBoost model in two sidecar containers and asks them over HTTP per pick; bench's
// boosted-tree model (bench/latencytrees.go) measures what trees would add — a third of the
// error on a queueing knee, at 0.5 µs per prediction, too slow for a pick over a fleet
// (bench/README.md, "Predicted latency").
//
// Ranking by predicted latency alone is greedy: it places the request at hand where it is
// served fastest now, not where its conversation's prefix will serve the next turns, and on the
// bench's conversational workloads it loses the cache and collapses. The model is a term of the
// default's sum, not a replacement for it, and its scores come in two tiers so that one weight
// serves both uses: a request without targets scores ½ + ½·relative speed (every candidate
// meets the targets it does not have), so half the weight ranks by speed, and the whole weight
// separates a target met from one missed.
//
// # Several gateway replicas
//
// Each replica's router counts only the work it sent. The package takes no network
// dependency; a replication layer (package replica) reaches it through a seam kept out of
// the Router's API (the module's internal/peer). In-flight counts: the router publishes its
// own and is handed the other replicas' sums, which a pick adds to its own
// (Candidate.InFlight) with one more atomic load per counter; Router.InFlight stays the
// router's own, so published counts are never summed twice. Session placements: a
// SessionFeed on the session scorer hears each placement, and the seam applies a peer's, kept
// only if it expires later than what the table holds; replicas share SessionOptions.Seed so
// that their hashes agree. Prefix blocks are
// shared by the index itself (prefixcache.Feed). A peer's report is a hint as old as the last
// exchange: a placement learnt late costs one turn placed for balance, never a failed pick.
//
// # Profiles
//
// llm-d's default blend and its sticky profile, SGLang's cache-aware policy, Dynamo's KV cost,
// AIBrix's prefix gate, round-robin and least-request are each a Profile built from the same
// parts, with their formulas and defaults stated on the constructors; Usher is usher's own.
// TieredPrefix counts blocks offloaded to CPU memory or a shared store at their transfer cost
// relative to recomputing them. bench/README.md compares the profiles on the simulator.
//
// # Complexity
//
// Pick is O(n·(filters + scorers)) over the n candidates plus one prefix Match, and allocates
// nothing in steady state. Update is O(n) and allocates one snapshot. Done and FirstToken are
// O(1). Current figures are in bench/BENCHMARKS.md.
//
// The built-in scorers do not read Candidates: a pick lays out the inputs they need once, as
// dense columns (queue depths, free KV cache, in-flight tokens, matched blocks), and each
// scorer runs over contiguous numbers. The snapshot carries the polled signals' columns and
// their ranges, valid while no backend is stale. When every filter is a health filter with
// nothing to drop, every scorer is built in and so is the picker, Pick builds no Candidate
// but the chosen one. Any custom filter, scorer, picker or observer takes the general path,
// which builds them all; both paths give the same choice and the same scores, bit for bit.
//
// # Alternatives not taken
//
//   - A mutex around the backend set: every pick would contend with every other and with the
//     scraper; the snapshot costs one allocation per update instead.
//   - Scorers that see one backend at a time: normalisation, imputation and the peers' gates
//     need the whole candidate set, and a batch call is one indirect call per scorer rather
//     than per backend.
//   - BackendState as an interface with getters: an indirect call per backend per signal, and
//     the state could change under a pick; a struct copied once per update is consistent.
//   - Weights normalised to sum to 1: no change in choice under MaxScore, and the peers'
//     published weights would mean something else.
//   - Learning only at the first token: siblings sent together all miss, since none has a
//     first token when the next is placed; a wrong prediction is cheap and retracted on failure.
//   - A sync.Map or locked map for sessions: both grow with clients and lock or allocate on the
//     pick path; a rare racing write to the fixed table costs at most one misplaced turn.
//
// # Concurrency
//
// A Router is safe for concurrent use: Pick runs on any number of goroutines while one writer
// calls Update. The filters, scorers and pickers it is built from are called from every picking
// goroutine and must be safe for concurrent use; the built-ins are. A Result belongs to the
// request it was picked for. Options, Profile, the peers' option structs, BackendState,
// InFlight, DoneInfo, Stats and the unit types are plain values: copy them freely, and do not
// modify one (or a Profile's slices) while a Router uses it.
package routing
