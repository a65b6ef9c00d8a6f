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
// adapter (Candidate.AdapterInFlight) in a fixed table of atomic words. Package routing/lora
// turns both into a score.
//
// # Predicted latency
//
// Package routing/latency predicts, per candidate, a request's time to first token and time per
// output token with a model learned from the fleet's own outcomes, and ranks candidates by it.
// A Router whose profile holds its scorer feeds the model: Pick keeps the chosen candidate and
// sets Result.Predicted, Result.FirstToken and Result.Done teach it what streamed requests got,
// and Stats.LatencyOutcomes counts what it was taught. Request.Targets and
// Request.OutputTokens are what the scorer reads of a request's objectives.
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
