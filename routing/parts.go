package routing

// NewDynamoCost returns the scorer with the given overlap weight (see DynamoOptions).
//
// DynamoCost is NVIDIA Dynamo's KV router cost, lower is better:
//
//	cost = OverlapWeight · prefill_blocks + decode_blocks
//	prefill_blocks = (InFlight.PrefillTokens + UncachedTokens) / block size
//	decode_blocks  = InFlight.Blocks + ⌈PromptTokens / block size⌉
//
// prefill_blocks counts the blocks the backend would still have to prefill with this request
// there (its own uncached blocks included), decode_blocks the blocks active on it after admitting
// this request; like Dynamo, both come from the router's own request accounting, never from
// polled metrics, so nothing is missing or stale. Scores are the min-max normalised cost turned
// around, score = (max − cost) / (max − min) (1 for all when equal), so the max-score picker takes
// Dynamo's argmin and Softmax(T) samples with p ∝ exp(−normalised cost / T), as Dynamo does.
// With DynamoOptions.AbstainWhenQuiet it scores every candidate 1 while the fleet is quiet and
// settled (see the option), which Dynamo does not do. O(n), no allocation, safe for concurrent
// use.
func NewDynamoCost(opts DynamoOptions) Scorer { return newDynamoCost(opts) }

// NewStickyFilter returns a StickyFilter configured by opts (zero fields take llm-d's defaults).
//
// StickyFilter is llm-d's "sticky until saturated" filter. A backend is sticky when it holds at
// least Threshold of the prompt's blocks. The filter keeps only the sticky candidates, unless
//
//	min TTFT(sticky) − min TTFT(non-sticky) > MaxTTFTPenalty,  TTFT(e) = InFlight.PrefillTokens(e) / PeakPrefillThroughput
//
// in which case it keeps everyone and the load scorer after it chooses. With no chain, no
// sticky candidate or only sticky candidates it keeps everyone. It reads only the router's own
// in-flight counters, which are never missing or stale (llm-d's gate breaks when a backend lacks
// its load attribute; this one cannot). O(n), no allocation, safe for concurrent use.
func NewStickyFilter(opts StickyOptions) Filter { return newStickyFilter(opts) }

// NewTieredPrefix returns a TieredPrefix over ix, normally the same index as Options.Index.
//
// TieredPrefix is a prefix scorer that counts blocks held outside GPU memory at their transfer
// cost instead of as free hits or as misses. With the request's chain of n blocks, and g, c, r
// the leading blocks a candidate holds on GPU, in CPU memory and in a remote store:
//
//	score = (g + k_cpu·(c′ − g) + k_remote·(r′ − c′)) / n,  c′ = max(c, g), r′ = max(r, c′)
//	k_m   = max(0, 1 − transfer time of a block from m / prefill time of a block)
//
// where a block's transfer time is BlockBytes / bandwidth and its prefill time is block size /
// PrefillThroughput. With the defaults a CPU block is worth 0.83 of a GPU block and a remote
// block nothing (fetching it is slower than recomputing it). g comes from the router's own match
// (Candidate.MatchedBlocks); c and r cost one MatchMedium each per pick. The scratch slices come
// from a pool: no allocation once warm. Safe for concurrent use.
func NewTieredPrefix(ix MediumIndex, opts TieredOptions) Scorer { return newTieredPrefix(ix, opts) }

// NewSessionAffinity returns a SessionAffinity with its own bounded session table.
//
// SessionAffinity scores the backend that served a session's previous turn 1 and every other
// candidate 0 (llm-d's session-affinity scorer, 300 s TTL). A request without a session, or whose
// session is unknown or expired, scores 0 everywhere. It learns placements as a PickObserver, and
// from other gateway replicas through LearnPlacement (see SessionFeed). O(n) per pick, O(1) to
// learn; no allocation; safe for concurrent use.
func NewSessionAffinity(opts SessionOptions) Scorer { return newSessionAffinity(opts) }

// NewSessionAware returns a SessionAware configured by opts.
//
// SessionAware is usher's session-aware placement scorer, from production studies of coding
// agents, where most reusable KV cache is within a session. With L a candidate's load (below),
// balance(c) = 1 − L(c)/(max L + 1) and overloaded(c) ⇔ L(c) > Overload · (mean L + 1):
//
//   - A session's first turn, and any turn whose history is gone, has no home. When some
//     candidate that is not overloaded holds at least KeptFraction of its blocks — a fork of
//     another conversation, an agent's sub-task, an edited retry, a shared document — it is
//     homed among those holders: each scores 1/2 + (held share + balance)/4, every other
//     candidate balance/2 (0 while a holder is quiet, below), so the turn goes where most of
//     it is cached unless every holder is overloaded. When no candidate holds that much, each
//     calm candidate (below) scores the share of the prompt it holds and every other 0: a
//     shared document or system prompt opening a longer prompt pulls the turn towards its
//     holders in proportion to what it saves, and the load scorers the profile sets beside
//     this one balance the rest. When no calm candidate holds any of it, score = balance.
//   - A later turn stays where its history is cached: the home backend scores 1 and every other
//     candidate balance/2 (0 while the fleet is quiet, below) — unless the home is overloaded,
//     or its history was evicted
//     (MatchedBlocks(home) < KeptFraction · the blocks of the previous turn, and the home holds
//     none of the prompt or another candidate holds more of it; checked only when the Router
//     has a prefix index). Then the turn has no home (above), the backend it goes to becomes home,
//     and Moved counts it.
//   - A request without a session scores (MatchedBlocks/len(Chain) + balance)/2, or balance/4
//     when the candidate is overloaded: prefix reuse and balance in equal parts, never onto a
//     server already carrying twice its share.
//
// A candidate is calm when it is within the load limit reckoned over the other candidates
// alone, L ≤ Overload · (their mean L + 1) (on two servers the limit over all never binds), and
// quiet when its engine freshly reports no request waiting (SignalQueued known,
// BackendState.Queued 0). A turn sent to a quiet server that caches it costs a batch slot, and
// one sent elsewhere its prefill; so the other candidates keep none of their balance while
// every candidate is quiet (a later turn at home), or while some holder is calm and quiet (a
// turn homed among holders), and only the load scorers beside this one send the turn away.
// Once a request waits, they keep half of it. On four servers of small caches at light load
// this caches within a point of llm-d's prefix-heavy blend, while the busy fleets of the
// Mooncake trace keep their balance (bench/README.md, "The quiet rule").
// SessionAwareOptions.BalanceWhenQuiet turns off both the quiet rule and the share of a turn
// that no candidate mostly holds (such a turn is then placed for balance alone).
//
// balance is relative to the busiest candidate rather than min-max normalised, so one request
// more or less moves it by 1/(max L + 1), not from 1 to 0: a prefix match can outweigh a small
// load difference but not a large one. The "+ 1" in both formulas keeps a nearly idle pool from
// treating 1 request against 0 as overload.
//
// L is the larger of the in-flight requests (Candidate.InFlight: the router's own, plus its
// peers' when setPeerInFlight is used) and the server's queued + running requests when those
// are fresh (the router's own counter is never stale, so a missing or stale metric
// falls back to it instead of being read as zero). Gateway replicas share placements through
// SessionOptions.Feed and LearnPlacement. O(n) per pick, O(1) to learn; no allocation; safe for
// concurrent use.
func NewSessionAware(opts SessionAwareOptions) Scorer { return newSessionAware(opts) }

// NewSGLangCacheAware returns the scorer configured by opts.
//
// SGLangCacheAware is SGLang model gateway's cache-aware policy as one scorer, used with the
// max-score picker. Load L is the router's own in-flight request count (the gateway counts its
// outstanding requests per worker):
//
//   - if max L − min L > BalanceAbs and max L > BalanceRel · min L, the pool is imbalanced and
//     the least-loaded backend wins: score = (max L − L) / (max L − min L);
//   - otherwise, if the best match rate MatchedBlocks/len(Chain) exceeds CacheThreshold, the
//     best match wins: score = match rate;
//   - otherwise the least-loaded backend wins, scored as in the first case (1 for all when loads
//     are equal).
//
// SGLang matches characters in an approximate radix tree per worker; here the match rate is in
// prefix blocks. Below the threshold SGLang's source sends the request to the worker whose tree
// holds the fewest characters (its emptiest cache); a router does not see per-backend cache
// sizes on the pick path, so this follows the published description, least-loaded, which is
// what an empty cache usually means. O(n), no allocation, safe for concurrent use.
func NewSGLangCacheAware(opts SGLangOptions) Scorer { return newSGLangCacheAware(opts) }
