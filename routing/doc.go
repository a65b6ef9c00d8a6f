// Package routing picks a model server for each LLM request.
//
// # The model
//
// A Router holds the set of backends as an immutable snapshot. One writer — typically a metrics
// scraper — builds a []BackendState from what it observed (queued and running requests, KV cache
// utilisation and capacity, health, role, and when it observed them) and calls Update, which
// copies it into a new snapshot and publishes it with an atomic pointer swap. Pick, called from
// any number of request goroutines, loads the pointer and works on what it sees; it takes no lock,
// never blocks, and allocates nothing once its pools are warm. This is gRPC's balancer split: the
// state changes on one goroutine, picks run everywhere, and a pick's Done closes the books.
//
// A pick is a pipeline over candidates:
//
//	backends ─► role ─► Filters ─► Σ weight·Scorer ─► Picker ─► Result
//
// Every backend that serves the request's Role becomes a Candidate carrying its published state,
// the router's own in-flight counters, which of its signals are fresh, and how many leading
// blocks of the request's prompt the prefix index says it holds (one Match call per pick, on the
// block hashes the caller computed once). Filters remove candidates. Each Scorer writes a score in
// [0, 1] per candidate; the router clamps anything else — NaN becomes 0 — and counts it, so a
// faulty custom scorer cannot poison a pick. Scores combine as Σ weight_i · score_i with the
// weights as given, not normalised (llm-d's convention, so its profiles carry over unchanged): a
// scorer's weight is the most it can add. The Picker chooses: MaxScore (ties at random),
// WeightedRandom (A-Res, probability proportional to score), PowerOfTwo, Softmax, RoundRobin.
//
// A custom scorer implements one method, Score. A filter, scorer or picker that needs to learn
// may also implement Observer (told the choice before Pick returns; session tables use it) or
// Completer (told the outcome at Done: time to first token, failure).
//
// Disaggregated serving is two picks: one with Request.Role = RolePrefill, one with RoleDecode;
// backends of RoleBoth serve either.
//
// # Accounting the router can trust
//
// Polled metrics lag: a server scraped every 50 ms shows a burst of ten requests sent in the
// last millisecond as zero. So the router counts its own work. Pick charges the chosen backend
// one request, the request's uncached prompt tokens (its prompt minus the blocks the backend
// already holds) and its prompt's blocks before it returns, so the very next pick sees them.
// Result.FirstToken releases the prefill tokens — the server has finished prefilling — and
// Result.Done releases the request and its blocks. The prefix index learns at Pick by default
// (Profile.Learn = LearnOnPick): the chosen backend is about to compute the prompt, so a
// request sent right behind it with the same prefix — a sibling of a fan-out, the next user of a
// popular template — sees those blocks there and co-locates instead of scattering while the
// first is still in prefill (Dynamo's predict-on-route; llm-d, SGLang and AIBrix also learn at
// selection). A request that fails before its first token retracts what it predicted, the
// blocks the backend did not hold at pick time, since the server may never have computed them.
// LearnOnFirstToken learns only what is certainly computed; LearnFromEvents leaves the index to
// the engines' KV events. Done is called exactly once, FirstToken may run concurrently with
// it; the handle is pooled with a generation number, so a second Done is detected and panics
// as misuse, and a late FirstToken does nothing, rather than either touching another
// request's counters.
//
// # Missing and stale signals
//
// A signal that was not observed (its bit is clear in BackendState.Known) or was observed longer
// ago than Options.StaleAfter is not a number. llm-d has read such a backend as idle (score it
// 0 load and flood it) and as saturated (drop it); both are silent failures. Here a candidate's
// Fresh set says which signals may be used, HealthFilter routes around stale backends while any
// fresh one remains (and keeps them, counted, when the scraper rather than the fleet is down),
// and the load scorers impute a missing value as the mean score of the candidates that have it:
// that term then neither attracts nor repels, and the other terms decide. Router-side counters
// and the prefix index are never stale, which is why usher's own profile leans on them.
//
// # Passive health
//
// Polled health lags like polled load, and a server that fails every request at once is worse
// than a slow one: it finishes its requests instantly, so it looks idle to least-loaded scoring
// and attracts most of the traffic (measured: after kill -9 of one of four backends, it got 92%
// of the picks for half a second). Outlier learns from outcomes instead. Whoever finishes a
// Result classifies a failure in DoneInfo.Failure — connect, timeout, server error, or overload,
// which is a load signal and not counted — and the Outlier, a Completer, ejects a backend with
// Envoy's outlier-detection rules and defaults: 5 failures in a row (consecutive_5xx), or a
// failure share of 0.5 over a 10 s window with at least 20 requests; and, because a refused
// connection is unambiguous, a single connect failure. The ejection takes effect before Done
// returns. The n-th ejection in a row lasts min(1 s·2^(n−1), 30 s), and n decays by one per
// window in rotation; at most 50% of the backends are ejected at once, and a pick that would be
// left with none is given all of them (counted) rather than fail.
//
// Where Envoy simply returns a host when its ejection ends, here the backend turns half-open:
// one request at a time goes to it as a probe, claimed when the pick chooses it (as an
// Observer), so a candidate the picker passed over claims nothing. A successful probe restores
// the backend, a failed one ejects it for twice as long. Returning a dead backend to full
// rotation would instead send it a burst — it is the idlest server — that fails at once.
//
// Backoff delays the return of a server that was restarted. So when the writer's verdict for an
// ejected backend was Unhealthy (or its signals stale) and is now Healthy with fresh signals,
// the Outlier probes it at once: a server that died and came back gets traffic within a scrape
// interval. One that answers health checks but fails requests never looked unhealthy, and waits
// out its backoff. As a Scorer, the Outlier also lowers backends with a recent failure share
// below the thresholds. WithOutlier adds it to a Profile: first among the filters, so that it
// sees the health verdicts before HealthFilter drops anyone.
//
// # Sessions and the shared opening prompt
//
// Prefix affinity has a failure mode that agent workloads hit at once: every session starts with
// the same long system prompt, the first server to see it holds it, and a prefix scorer then
// sends every new session there. SessionAware places a session's first turn for balance,
// ignoring the prefix, and keeps later turns where their history is cached — unless that
// server's load exceeds twice the pool's mean (plus one, to avoid churn when all are nearly idle)
// or the history was evicted, when the turn is placed for balance again and the session moves.
// Sessions are remembered in a fixed-size, set-associative table of atomic words with a TTL:
// bounded memory whatever clients send, no lock on the pick path.
//
// # Several gateway replicas
//
// Gateway replicas in front of one fleet each have their own router, and each counts only the
// work it sent. The package gives a replication layer (its own package, off the request path)
// two seams and takes no network dependency. In-flight counts: each router publishes its own
// with AppendInFlight, and SetPeerInFlight hands it the other replicas' sums, kept in atomics
// beside its own counters, so that a pick reads own + peers' (Candidate.InFlight) with one more
// atomic load per counter and no lock; Router.InFlight stays the router's own, so published
// counts are never summed twice. Session placements: a SessionFeed on the session scorer hears
// each placement a pick makes (hashed session id, backend name, expiry), and LearnPlacement
// applies another replica's placement, kept only if it expires later than what the table
// holds; the replicas share SessionOptions.Seed so that their hashes agree, and translate
// names to ids with Router.Lookup. Profile.SessionScorers finds the session scorer of a
// profile built by a constructor. Prefix blocks are shared by the index itself (see
// prefixcache.Feed). What a peer reports is a hint as old as the last exchange: peers' counts
// are replaced wholesale at each round, and a placement learnt late costs one turn placed for
// balance, never a failed pick.
//
// # The peers as configurations
//
// llm-d's default blend and its sticky-until-saturated profile, SGLang's cache-aware policy,
// Dynamo's KV cost, AIBrix's prefix gate, round-robin and least-request are each a Profile built
// from the same parts, with their formulas and defaults stated on the constructors, so that the
// bench simulator compares usher's configuration (Usher) against exactly these.
//
// # Alternatives not taken
//
//   - A mutex around the backend set. Simple, but every pick would contend with every other and
//     with the scraper; the snapshot costs one allocation per update (tens per second) instead.
//   - Scorers that see one backend at a time (Score(req, backend) float64). It reads well, but
//     min-max normalisation, imputation and the peers' gates (SGLang's imbalance test, AIBrix's
//     mean + σ) need the whole candidate set; a batch call over a slice is also one indirect call
//     per scorer instead of one per backend.
//   - BackendState as an interface with getter methods. It would spare the writer a copy, but
//     every pick would make an indirect call per backend per signal and the state could change
//     under a pick; a plain struct copied once per update is faster and consistent.
//   - Normalising weights to sum to 1. It changes nothing about the choice under MaxScore and
//     makes the peers' published weights (2, 2, 3) mean something different.
//   - Learning only at the first token. It was the default until the simulator showed what it
//     costs: siblings sent together all miss, because none has a first token when the next is
//     placed (on the prefix-group workload llm-d, which learns at pick, co-located 89% of
//     siblings against usher's 55%). A prediction that turns out wrong is cheap — the blocks
//     arrive a prefill later, and a failure retracts them — so learning at pick is the default
//     and first-token learning an option.
//   - Active health checks in the router. They would put network calls and goroutines into a
//     package that must not touch the network; the writer's health verdict and the outcomes
//     the caller reports already cover both directions.
//   - A sync.Map or a mutex-guarded map for sessions. Both grow with clients and lock (or
//     allocate) on the pick path; the fixed table cannot grow and a rare racing write costs at
//     most one misplaced turn, never an invalid pick.
//
// Blocks offloaded to CPU memory or held in a shared store are neither free hits nor misses:
// TieredPrefix counts each at its transfer cost relative to recomputing it (bandwidth against
// prefill throughput), using the index's per-medium match.
//
// # Concurrency
//
// A Router is safe for concurrent use: Pick runs on any number of goroutines while one writer
// calls Update. The filters, scorers and pickers it is built from are called from every
// picking goroutine and must be safe for concurrent use; the built-ins are. A Result belongs to
// the request it was picked for. Options, Profile, the peers' option structs, BackendState,
// InFlight, DoneInfo, Stats and the unit types are plain values: copy them freely, and do not
// modify one (or a Profile's slices) while a Router uses it.
package routing
