package profiles

import (
	"fmt"
	"math"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cand"
	"github.com/usher-llm/usher/routing/internal/hook"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/lora"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/session"
)

// The peers' routers, reproduced as Profiles so that the bench simulator can compare usher's
// configuration against exactly these. Each constructor states the source formula and defaults
// (facts from the peers' public source and documentation, late 2026). Every profile starts with
// a HealthFilter: the peers only route to pods their controllers consider ready, which is what
// that filter stands for here.

// LLMDDefault is llm-d's default scheduling profile when no configuration is given:
//
//	total = 2·QueueDepth + 2·KVUtilization + 3·PrefixRatio, max-score picker (ties shuffled)
//
// Weights are not normalised. Unlike llm-d, a missing or stale queue or KV signal is imputed
// (see the scorers), not read as 0 or as saturation.
func LLMDDefault() routing.Profile {
	return routing.Profile{
		Name:    "llm-d",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{
			{Scorer: load.QueueDepth(), Weight: 2},
			{Scorer: load.KV(), Weight: 2},
			{Scorer: prefix.Ratio(), Weight: 3},
		},
		Picker: pick.MaxScore(),
	}
}

// LLMDPrecise is llm-d's default blend over its precise prefix index, the one fed by the
// engines' KV events (llm-d-kv-cache):
//
//	total = 2·QueueDepth + 2·KVUtilization + 3·PrefixRatio, max-score picker
//
// The router itself never inserts (Learn = routing.LearnFromEvents): a block counts from the moment the
// engine's BlockStored event is applied until its BlockRemoved, so a request still in prefill
// attracts nothing. Use it with an index fed by prefixcache/kvevents.
func LLMDPrecise() routing.Profile {
	p := LLMDDefault()
	p.Name = "llm-d-precise"
	p.Learn = routing.LearnFromEvents
	return p
}

// LLMDStickyOptions configures LLMDSticky.
type LLMDStickyOptions struct {
	session.StickyOptions
	// DecodeBound picks the load scorer that follows the sticky filter: false (prefill-bound
	// work: long prompts, short answers) → load.TokenBacklog(4,194,304); true (decode-bound
	// work: short prompts, long answers, e.g. reasoning) → ActiveRequests.
	DecodeBound bool
}

// LLMDSticky is llm-d's "sticky until saturated" profile (its default since 2026-08-17): a
// StickyFilter (matched share ≥ 0.80; given up when the best sticky backend's estimated TTFT,
// in-flight uncached tokens / 15928 tok/s, exceeds the best non-sticky one's by more than
// 18000 ms), then one load scorer chosen by bottleneck — token-load for prefill-bound work,
// active-requests for decode-bound work — and the max-score picker.
func LLMDSticky(opts LLMDStickyOptions) routing.Profile {
	term := load.TokenBacklog(0)
	name := "llm-d-sticky"
	if opts.DecodeBound {
		term = load.Active()
		name = "llm-d-sticky-decode"
	}
	return routing.Profile{
		Name:    name,
		Filters: []routing.Filter{outlier.HealthFilter(), orInvalidFilter(session.NewSticky(opts.StickyOptions))},
		Scorers: []routing.Weighted{{Scorer: term, Weight: 1}},
		Picker:  pick.MaxScore(),
	}
}

// SGLang's cache-aware policy defaults (sgl-model-gateway CLI).
const (
	DefaultSGLangBalanceAbs  = 64
	DefaultSGLangBalanceRel  = 1.5
	DefaultSGLangCacheThresh = 0.3
)

// SGLangCacheAwareOptions configures SGLangCacheAware. Zero values are SGLang's defaults.
type SGLangCacheAwareOptions struct {
	// BalanceAbs and BalanceRel define imbalance: max − min > BalanceAbs and
	// max > BalanceRel · min over the candidates' loads. Zero: 64 and 1.5.
	BalanceAbs float64
	BalanceRel float64
	// CacheThreshold is the match rate above which the best match wins. Zero: 0.3.
	CacheThreshold float64
}

// sglangCacheAware is the scorer NewSGLangCacheAware returns.
type sglangCacheAware struct {
	abs, rel, thresh float64
}

// newSGLangCacheAware builds the scorer NewSGLangCacheAware returns.
func newSGLangCacheAware(opts SGLangCacheAwareOptions) *sglangCacheAware {
	s := &sglangCacheAware{abs: opts.BalanceAbs, rel: opts.BalanceRel, thresh: opts.CacheThreshold}
	if s.abs <= 0 {
		s.abs = DefaultSGLangBalanceAbs
	}
	if s.rel <= 0 {
		s.rel = DefaultSGLangBalanceRel
	}
	if s.thresh <= 0 {
		s.thresh = DefaultSGLangCacheThresh
	}
	return s
}

// Score implements routing.Scorer.
func (s *sglangCacheAware) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	best := 0.0
	for i := range cands {
		l := float64(cands[i].InFlight.Requests)
		lo, hi = min(lo, l), max(hi, l)
		if len(req.Chain) > 0 {
			best = max(best, float64(cands[i].MatchedBlocks)/float64(len(req.Chain)))
		}
	}
	imbalanced := hi-lo > s.abs && hi > s.rel*lo
	if !imbalanced && best > s.thresh {
		for i := range cands {
			dst[i] = float64(cands[i].MatchedBlocks) / float64(len(req.Chain))
		}
		return
	}
	for i := range cands {
		dst[i] = 1
		if hi > lo {
			dst[i] = (hi - float64(cands[i].InFlight.Requests)) / (hi - lo)
		}
	}
}

// SGLang is the SGLang model gateway's cache-aware routing as a profile: SGLangCacheAware and
// the max-score picker.
func SGLang(opts SGLangCacheAwareOptions) routing.Profile {
	return routing.Profile{
		Name:    "sglang",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: newSGLangCacheAware(opts), Weight: 1}},
		Picker:  pick.MaxScore(),
	}
}

// DefaultUnreported is DynamoCostOptions.Unreported's default: two requests sent since the
// candidates last reported still leave a quiet fleet settled.
const DefaultUnreported = 2

// abstainOverload bounds the load of any one candidate while DynamoCost abstains: at most this
// multiple of the mean load of the others, plus one request. It is a guard against piling;
// balance is the work of the blend's load terms. At 2, the limit SessionAware leaves a home by,
// the bench's calibrated forks setup lost 1.6 points of cached share; at 4 no simulated figure
// moved.
const abstainOverload = 4

// DynamoCostOptions configures DynamoCost.
type DynamoCostOptions struct {
	// OverlapWeight multiplies the prefill blocks in the cost. Zero: 1.0 (Dynamo's default);
	// use a negative value for an explicit 0.
	OverlapWeight float64
	// Temperature > 0 samples with softmax over the normalised cost; 0 takes the argmin.
	Temperature float64
	// AbstainWhenQuiet scores every candidate 1, leaving the choice to the other terms of a
	// blend, for a request on the base model (no routing.Request.Adapter) while the fleet is quiet and
	// settled: every candidate freshly reports its running and waiting requests
	// (routing.SignalRunning, routing.SignalQueued), none has a request waiting, the router has at most
	// Unreported requests in flight beyond what the candidates reported (summed over them:
	// the requests sent since the last scrape), and no candidate's load (its running and
	// waiting requests, or the router's in-flight count if higher) exceeds four times the
	// mean of the others plus one. A request under a LoRA adapter is scored as usual:
	// lora.NewAffinity's term pulls it towards its adapter's servers, and without this term's
	// in-flight blocks the bench's LoRA workload piled onto them. Dynamo's own profile leaves
	// it off; Usher sets it.
	AbstainWhenQuiet bool
	// Unreported is how many requests sent since the candidates last reported still leave
	// the fleet settled, with AbstainWhenQuiet. Zero: DefaultUnreported (2); use a negative
	// value for an explicit 0.
	Unreported int
}

// dynamoCost is the scorer NewDynamoCost returns.
type dynamoCost struct {
	w          float64
	abstain    bool
	unreported int64
}

// newDynamoCost builds the scorer NewDynamoCost returns.
func newDynamoCost(opts DynamoCostOptions) *dynamoCost {
	w := opts.OverlapWeight
	if w == 0 {
		w = 1
	}
	if w < 0 {
		w = 0
	}
	u := int64(opts.Unreported)
	if u == 0 {
		u = DefaultUnreported
	}
	if u < 0 {
		u = 0
	}
	return &dynamoCost{w: w, abstain: opts.AbstainWhenQuiet, unreported: u}
}

// settled reports whether the fleet is quiet and settled (DynamoCostOptions.AbstainWhenQuiet): every
// candidate freshly reports no request waiting, the router's in-flight requests exceed the
// running and waiting ones reported by at most unreported, summed over the candidates, and the
// load is even (no candidate above abstainOverload times the mean of the others, plus one).
// O(n).
func settled(cands []routing.Candidate, unreported int64) bool {
	var sent int64
	sum := 0.0
	for i := range cands {
		c := &cands[i]
		if !cand.Idle(c) || !c.Fresh.Has(routing.SignalRunning) {
			return false
		}
		sent += max(0, c.InFlight.Requests-int64(c.State.Running+c.State.Queued))
		sum += cand.Load(c)
	}
	if sent > unreported {
		return false
	}
	// Even: no candidate carries more than abstainOverload times the mean load of the others
	// (plus one request). Long answers keep a server busy without a queue: six streams on one
	// of two servers is not a quiet fleet, and without this term nothing else in the blend
	// weighs them.
	if len(cands) > 1 {
		for i := range cands {
			if !cand.UnderOthers(cand.Load(&cands[i]), sum, len(cands), abstainOverload) {
				return false
			}
		}
	}
	return true
}

// Score implements routing.Scorer.
func (d *dynamoCost) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	if d.abstain && req.Adapter == "" && settled(cands, d.unreported) {
		for i := range cands {
			dst[i] = 1
		}
		return
	}
	bs := float64(req.BlockSize)
	if bs <= 0 {
		bs = routing.DefaultBlockSize
	}
	reqBlocks := math.Ceil(float64(req.PromptTokens) / bs)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range cands {
		c := &cands[i]
		prefill := float64(c.InFlight.PrefillTokens+int64(c.UncachedTokens)) / bs
		cost := d.w*prefill + float64(c.InFlight.Blocks) + reqBlocks
		dst[i] = cost
		lo, hi = min(lo, cost), max(hi, cost)
	}
	for i := range dst {
		if hi > lo {
			dst[i] = (hi - dst[i]) / (hi - lo)
		} else {
			dst[i] = 1
		}
	}
}

// Dynamo is NVIDIA Dynamo's KV router as a profile: DynamoCost, and the max-score picker
// (temperature 0, argmin cost) or pick.Softmax(temperature). Dynamo reads an index fed by KV events
// and predicts on route (the chosen worker's blocks-to-be count at once), which is the default
// Learn; give it an index fed by prefixcache/kvevents.
func Dynamo(opts DynamoCostOptions) routing.Profile {
	return routing.Profile{
		Name:    "dynamo",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: newDynamoCost(opts), Weight: 1}},
		Picker:  pick.Softmax(opts.Temperature),
	}
}

// aibrixPrefixGate is the scorer AIBrixPrefixGate returns.
type aibrixPrefixGate struct{}

// AIBrixPrefixGate returns AIBrix's prefix-cache router as one scorer (its "prefix-cache" routing
// algorithm). L is the router's in-flight request count per backend (AIBrix's realtime running
// count), μ and σ its mean and standard deviation over the candidates, m the match ratio
// MatchedBlocks/len(Chain):
//
//   - Load gate: if max L > 2·(μ + 1) and max L − min L ≥ 8, only the least-loaded backends
//     (L = min L) may be chosen; among them the best match wins.
//   - Otherwise a backend with m > 0 and L ≤ μ + σ is eligible; the highest m wins, ties going
//     to the lower L.
//   - With no eligible backend, the least-request backend wins.
//
// Encoded as scores: an eligible backend scores 0.5 + 0.49·m + 0.49/(n+1)·(1 − L/(max L + 1))
// for a chain of n blocks (the last term orders equal matches by load and is smaller than one
// block of match), a non-eligible one 0.49·(max L − L)/(max L − min L) (0.49 when all equal),
// and, under the load gate, the least-loaded score 0.5 + 0.49·m and the others 0. AIBrix matches
// characters or tokens; here m is in prefix blocks. O(n), no allocation, safe for concurrent use.
func AIBrixPrefixGate() routing.Scorer { return aibrixPrefixGate{} }

// Score implements routing.Scorer.
func (aibrixPrefixGate) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	n := float64(len(cands))
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for i := range cands {
		l := float64(cands[i].InFlight.Requests)
		lo, hi = min(lo, l), max(hi, l)
		sum += l
	}
	mean := sum / n
	blocks := len(req.Chain)
	ratio := func(c *routing.Candidate) float64 {
		if blocks == 0 {
			return 0
		}
		return float64(min(c.MatchedBlocks, blocks)) / float64(blocks)
	}
	if hi > 2*(mean+1) && hi-lo >= 8 {
		for i := range cands {
			dst[i] = 0
			if float64(cands[i].InFlight.Requests) == lo {
				dst[i] = 0.5 + 0.49*ratio(&cands[i])
			}
		}
		return
	}
	varsum := 0.0
	for i := range cands {
		d := float64(cands[i].InFlight.Requests) - mean
		varsum += d * d
	}
	limit := mean + math.Sqrt(varsum/n)
	tie := 0.49 / float64(blocks+1)
	for i := range cands {
		l := float64(cands[i].InFlight.Requests)
		if m := ratio(&cands[i]); m > 0 && l <= limit {
			dst[i] = 0.5 + 0.49*m + tie*(1-l/(hi+1))
			continue
		}
		dst[i] = 0.49
		if hi > lo {
			dst[i] = 0.49 * (hi - l) / (hi - lo)
		}
	}
}

// AIBrix is AIBrix's prefix-cache router as a profile: AIBrixPrefixGate and the max-score
// picker.
func AIBrix() routing.Profile {
	return routing.Profile{
		Name:    "aibrix",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: aibrixPrefixGate{}, Weight: 1}},
		Picker:  pick.MaxScore(),
	}
}

// RoundRobin sends request i to the i-th healthy backend in turn, ignoring load and cache.
func RoundRobin() routing.Profile {
	return routing.Profile{
		Name:    "round-robin",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Picker:  pick.RoundRobin(),
	}
}

// LeastRequest sends each request to the backend with the fewest requests in flight from this
// router (ties at random): ActiveRequests and the max-score picker.
func LeastRequest() routing.Profile {
	return routing.Profile{
		Name:    "least-request",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}},
		Picker:  pick.MaxScore(),
	}
}

// UsherOptions configures Usher.
type UsherOptions struct {
	// Session configures the SessionAware scorer. Its Overload defaults to 2 here too. Gateway
	// replicas that share session placements set the same Session.Seed and a Session.Feed, and
	// reach the scorer for LearnPlacement with routing.Profile.sessionScorers.
	Session session.AwareOptions
	// AdapterWeight is the weight of a lora.NewAffinity term (with Adapter's options) added
	// for fleets serving LoRA adapters; 2 is the weight measured in bench/README.md, "LoRA
	// adapters". Zero: no such term, and the profile is exactly the one described above. The
	// term scores every backend 0 for a request without an adapter.
	AdapterWeight float64
	// Adapter configures the adapter-affinity term; ignored when AdapterWeight is 0. Invalid
	// options are reported by routing.New, which then fails.
	Adapter lora.AffinityOptions
}

// UsherLoadCap is the in-flight prefill at which Usher's token-load term reaches 0: 131,072
// tokens, about 8 s of prefill at 15,928 tok/s, so that the prefill already sent to a server
// counts at the scale where it decides TTFT (llm-d's 4,194,304 makes its token-load term nearly
// constant; 65,536 saturates on a long-context trace, where busy servers then all score 0 and
// the term stops telling them apart).
const UsherLoadCap = 1 << 17

// Usher is usher's default routing configuration:
//
//	HealthFilter → 1.5·SessionAware(Overload 2) + 2·load.TokenBacklog(131,072)
//	               + 1·DynamoCost(AbstainWhenQuiet) + 0.5·KVUtilization → max-score
//
// with the prefix index learning at pick (LearnOnPick, the routing.Profile default). The terms divide the
// work:
//
//   - TokenLoad scores the prefill this server would have in front of the request's first
//     token — its in-flight uncached tokens plus this request's own uncached tokens there — so
//     it is prefix affinity and load balance in one unit, for every request: a server holding
//     the prompt's prefix wins exactly when the tokens it saves exceed its extra backlog.
//   - DynamoCost adds the KV blocks the server's requests hold (the router's own count, never
//     stale) to the prefill it would do: the decode-side load that prefill tokens miss. It
//     abstains (AbstainWhenQuiet) while no engine has a request waiting, the router has sent
//     at most two requests since the engines last reported, and no server carries four times
//     the others' mean load: a server that caches the prompt then costs a batch slot, not a
//     wait, and its in-flight blocks would outweigh the prefill it saves. A burst of arrivals
//     ends the abstention at its third request, before any scrape could show it.
//   - SessionAware keeps a later turn at home unless the home holds more than twice the mean
//     load or has evicted the history, homes a first turn where most of its prompt is cached
//     (a fork, a shared document), pulls one that is partly cached (a shared opening) towards
//     the servers within the load limit in proportion to what each holds, and places the
//     rest for balance in request counts. While the servers that matter have no request
//     waiting it leaves the balance of a homed turn to the load terms.
//   - KVUtilization steers away from servers about to preempt.
//
// With UsherOptions.AdapterWeight w > 0 the blend gains w·lora.NewAffinity, for fleets that
// serve LoRA adapters; the other weights stay as above.
//
// Learning at pick is what co-locates requests sent together (siblings of a fan-out, bursts on
// one template): each sees the blocks the previous one is about to compute.
//
// The alternatives weighed against this composition are compared on the bench simulator in
// bench/README.md, "Choosing the default".
func Usher(opts UsherOptions) routing.Profile {
	sa := opts.Session
	if sa.Overload == 0 {
		sa.Overload = session.DefaultOverload
	}
	p := routing.Profile{
		Name:    "usher",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{
			{Scorer: orInvalid(session.NewAware(sa)), Weight: 1.5},
			{Scorer: load.TokenBacklog(UsherLoadCap), Weight: 2},
			{Scorer: newDynamoCost(DynamoCostOptions{AbstainWhenQuiet: true}), Weight: 1},
			{Scorer: load.KV(), Weight: 0.5},
		},
		Picker: pick.MaxScore(),
	}
	if opts.AdapterWeight != 0 {
		a, err := lora.NewAffinity(opts.Adapter)
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: orInvalid(a, err), Weight: opts.AdapterWeight})
	}
	return p
}

// NewDynamoCost returns the scorer with the given overlap weight (see DynamoCostOptions).
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
// Dynamo's argmin and pick.Softmax(T) samples with p ∝ exp(−normalised cost / T), as Dynamo does.
// With DynamoCostOptions.AbstainWhenQuiet it scores every candidate 1 while the fleet is quiet and
// settled (see the option), which Dynamo does not do. O(n), no allocation, safe for concurrent
// use.
//
// It fails with [routing.ErrInvalidOptions] when a number is not finite.
func NewDynamoCost(opts DynamoCostOptions) (routing.Scorer, error) {
	if !(math.Abs(opts.OverlapWeight) <= math.MaxFloat64) || !(math.Abs(opts.Temperature) <= math.MaxFloat64) {
		return nil, fmt.Errorf("%w: dynamo OverlapWeight %v, Temperature %v", routing.ErrInvalidOptions, opts.OverlapWeight, opts.Temperature)
	}
	return newDynamoCost(opts), nil
}

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
//
// It fails with [routing.ErrInvalidOptions] when a number is negative or not finite.
func NewSGLangCacheAware(opts SGLangCacheAwareOptions) (routing.Scorer, error) {
	for _, v := range []float64{opts.BalanceAbs, opts.BalanceRel, opts.CacheThreshold} {
		if !(v >= 0 && v <= math.MaxFloat64) {
			return nil, fmt.Errorf("%w: sglang options %+v", routing.ErrInvalidOptions, opts)
		}
	}
	return newSGLangCacheAware(opts), nil
}

// invalid stands in a Profile for a part whose options were invalid, so that a profile
// constructor, which returns no error, still makes routing.New fail with the error.
type invalid struct{ err error }

func (invalid) Score(_ *routing.Request, _ []routing.Candidate, dst []float64) { clear(dst) }

func (invalid) Filter(_ *routing.Request, cands []routing.Candidate) []routing.Candidate {
	return cands[:0]
}

func (s invalid) InvalidOptions() error { return s.err }

var _ hook.Invalid = invalid{}

// orInvalid returns sc, or a stand-in carrying err.
func orInvalid[S routing.Scorer](sc S, err error) routing.Scorer {
	if err != nil {
		return invalid{err}
	}
	return sc
}

// orInvalidFilter returns f, or a stand-in carrying err.
func orInvalidFilter(f routing.Filter, err error) routing.Filter {
	if err != nil {
		return invalid{err}
	}
	return f
}
