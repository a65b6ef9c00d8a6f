package session

import (
	"fmt"
	"math"

	"github.com/usher-llm/usher/routing"
)

// NewAffinity returns llm-d's session-affinity scorer with its own bounded session table.
//
// It scores the backend that served a session's previous turn 1 and every other
// candidate 0 (llm-d's session-affinity scorer, 300 s TTL). A request without a session, or whose
// session is unknown or expired, scores 0 everywhere. It learns placements as a [routing.PickObserver], and
// from other gateway replicas through LearnPlacement (see [Feed]). O(n) per pick, O(1) to
// learn; no allocation; safe for concurrent use.
// It fails with [routing.ErrInvalidOptions] when a duration or size is negative.
func NewAffinity(opts AffinityOptions) (routing.Scorer, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return newSessionAffinity(opts), nil
}

// NewAware returns usher's session-aware placement scorer configured by opts.
//
// It is usher's session-aware placement scorer, from production studies of coding
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
// [AwareOptions].BalanceWhenQuiet turns off both the quiet rule and the share of a turn
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
// [AffinityOptions].Feed and LearnPlacement. O(n) per pick, O(1) to learn; no allocation; safe for
// concurrent use.
// It fails with [routing.ErrInvalidOptions] when a duration or size is negative or a factor
// is not a finite number ≥ 0.
func NewAware(opts AwareOptions) (routing.Scorer, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	return newSessionAware(opts), nil
}

// NewSticky returns llm-d's "sticky until saturated" filter configured by opts (zero fields
// take llm-d's defaults).
//
// It is llm-d's "sticky until saturated" filter. A backend is sticky when it holds at
// least Threshold of the prompt's blocks. The filter keeps only the sticky candidates, unless
//
//	min TTFT(sticky) − min TTFT(non-sticky) > MaxTTFTPenalty,  TTFT(e) = InFlight.PrefillTokens(e) / PeakPrefillThroughput
//
// in which case it keeps everyone and the load scorer after it chooses. With no chain, no
// sticky candidate or only sticky candidates it keeps everyone. It reads only the router's own
// in-flight counters, which are never missing or stale (llm-d's gate breaks when a backend lacks
// its load attribute; this one cannot). O(n), no allocation, safe for concurrent use.
// It fails with [routing.ErrInvalidOptions] when a field is negative or not a number.
func NewSticky(opts StickyOptions) (routing.Filter, error) {
	if !(opts.Threshold >= 0 && opts.Threshold <= 1e12) || opts.MaxTTFTPenalty < 0 || !(opts.PeakPrefillThroughput >= 0 && opts.PeakPrefillThroughput <= math.MaxFloat64) {
		return nil, fmt.Errorf("%w: sticky threshold %v, penalty %v, prefill throughput %v", routing.ErrInvalidOptions,
			opts.Threshold, opts.MaxTTFTPenalty, opts.PeakPrefillThroughput)
	}
	return newStickyFilter(opts), nil
}

// check validates the table's options.
func (o AffinityOptions) check() error {
	if o.TTL < 0 || o.MaxSessions < 0 {
		return fmt.Errorf("%w: session TTL %v, MaxSessions %d", routing.ErrInvalidOptions, o.TTL, o.MaxSessions)
	}
	return nil
}

// check validates the scorer's options.
func (o AwareOptions) check() error {
	if err := o.AffinityOptions.check(); err != nil {
		return err
	}
	if !(o.Overload >= 0 && o.Overload <= math.MaxFloat64) || !(o.KeptFraction >= 0 && o.KeptFraction <= math.MaxFloat64) {
		return fmt.Errorf("%w: session Overload %v, KeptFraction %v", routing.ErrInvalidOptions, o.Overload, o.KeptFraction)
	}
	return nil
}
