package routing

import "math"

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
func LLMDDefault() Profile {
	return Profile{
		Name:    "llm-d",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{
			{QueueDepth(), 2},
			{KVUtilization(), 2},
			{PrefixRatio(), 3},
		},
		Picker: MaxScore(),
	}
}

// LLMDPrecise is llm-d's default blend over its precise prefix index, the one fed by the
// engines' KV events (llm-d-kv-cache):
//
//	total = 2·QueueDepth + 2·KVUtilization + 3·PrefixRatio, max-score picker
//
// The router itself never inserts (Learn = LearnFromEvents): a block counts from the moment the
// engine's BlockStored event is applied until its BlockRemoved, so a request still in prefill
// attracts nothing. Use it with an index fed by prefixcache/kvevents.
func LLMDPrecise() Profile {
	p := LLMDDefault()
	p.Name = "llm-d-precise"
	p.Learn = LearnFromEvents
	return p
}

// Bottleneck selects the load scorer that follows llm-d's sticky filter.
type Bottleneck uint8

const (
	// PrefillBound work (long prompts, short answers) is balanced by TokenLoad.
	PrefillBound Bottleneck = iota
	// DecodeBound work (short prompts, long answers, e.g. reasoning) is balanced by
	// ActiveRequests.
	DecodeBound
)

// LLMDStickyOptions configures LLMDSticky.
type LLMDStickyOptions struct {
	StickyOptions
	// Bottleneck picks the load scorer: PrefillBound (zero) → TokenLoad(4,194,304),
	// DecodeBound → ActiveRequests.
	Bottleneck Bottleneck
}

// LLMDSticky is llm-d's "sticky until saturated" profile (its default since 2026-08-17): a
// StickyFilter (matched share ≥ 0.80; given up when the best sticky backend's estimated TTFT,
// in-flight uncached tokens / 15928 tok/s, exceeds the best non-sticky one's by more than
// 18000 ms), then one load scorer chosen by bottleneck — token-load for prefill-bound work,
// active-requests for decode-bound work — and the max-score picker.
func LLMDSticky(opts LLMDStickyOptions) Profile {
	load := TokenLoad(0)
	name := "llm-d-sticky"
	if opts.Bottleneck == DecodeBound {
		load = ActiveRequests()
		name = "llm-d-sticky-decode"
	}
	return Profile{
		Name:    name,
		Filters: []Filter{newHealthFilter(), newStickyFilter(opts.StickyOptions)},
		Scorers: []Weighted{{load, 1}},
		Picker:  MaxScore(),
	}
}

// SGLang's cache-aware policy defaults (sgl-model-gateway CLI).
const (
	DefaultSGLangBalanceAbs  = 64
	DefaultSGLangBalanceRel  = 1.5
	DefaultSGLangCacheThresh = 0.3
)

// SGLangOptions configures SGLangCacheAware. Zero values are SGLang's defaults.
type SGLangOptions struct {
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
func newSGLangCacheAware(opts SGLangOptions) *sglangCacheAware {
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

// Score implements Scorer.
func (s *sglangCacheAware) Score(req *Request, cands []Candidate, dst []float64) {
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
func SGLang(opts SGLangOptions) Profile {
	return Profile{
		Name:    "sglang",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{{newSGLangCacheAware(opts), 1}},
		Picker:  MaxScore(),
	}
}

// DefaultUnreported is DynamoOptions.Unreported's default: two requests sent since the
// candidates last reported still leave a quiet fleet settled.
const DefaultUnreported = 2

// abstainOverload bounds the load of any one candidate while DynamoCost abstains: at most this
// multiple of the mean load of the others, plus one request. It is a guard against piling;
// balance is the work of the blend's load terms. At 2, the limit SessionAware leaves a home by,
// the bench's calibrated forks setup lost 1.6 points of cached share; at 4 no simulated figure
// moved.
const abstainOverload = 4

// DynamoOptions configures DynamoCost.
type DynamoOptions struct {
	// OverlapWeight multiplies the prefill blocks in the cost. Zero: 1.0 (Dynamo's default);
	// use a negative value for an explicit 0.
	OverlapWeight float64
	// Temperature > 0 samples with softmax over the normalised cost; 0 takes the argmin.
	Temperature float64
	// AbstainWhenQuiet scores every candidate 1, leaving the choice to the other terms of a
	// blend, for a request on the base model (no Request.Adapter) while the fleet is quiet and
	// settled: every candidate freshly reports its running and waiting requests
	// (SignalRunning, SignalQueued), none has a request waiting, the router has at most
	// Unreported requests in flight beyond what the candidates reported (summed over them:
	// the requests sent since the last scrape), and no candidate's load (its running and
	// waiting requests, or the router's in-flight count if higher) exceeds four times the
	// mean of the others plus one. A request under a LoRA adapter is scored as usual:
	// AdapterAffinity pulls it towards its adapter's servers, and without this term's
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
func newDynamoCost(opts DynamoOptions) *dynamoCost {
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

// settled reports whether the fleet is quiet and settled (DynamoOptions.AbstainWhenQuiet): every
// candidate freshly reports no request waiting, the router's in-flight requests exceed the
// running and waiting ones reported by at most unreported, summed over the candidates, and the
// load is even (no candidate above abstainOverload times the mean of the others, plus one).
// O(n).
func settled(cands []Candidate, unreported int64) bool {
	var sent int64
	sum := 0.0
	for i := range cands {
		c := &cands[i]
		if !idle(c) || !c.Has(SignalRunning) {
			return false
		}
		sent += max(0, c.InFlight.Requests-int64(c.State.Running+c.State.Queued))
		sum += load(c)
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
			if !underOthers(load(&cands[i]), sum, len(cands), abstainOverload) {
				return false
			}
		}
	}
	return true
}

// Score implements Scorer.
func (d *dynamoCost) Score(req *Request, cands []Candidate, dst []float64) {
	if d.abstain && req.Adapter == "" && settled(cands, d.unreported) {
		for i := range cands {
			dst[i] = 1
		}
		return
	}
	bs := float64(req.BlockSize)
	if bs <= 0 {
		bs = DefaultBlockSize
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
// (temperature 0, argmin cost) or Softmax(temperature). Dynamo reads an index fed by KV events
// and predicts on route (the chosen worker's blocks-to-be count at once), which is the default
// Learn; give it an index fed by prefixcache/kvevents.
func Dynamo(opts DynamoOptions) Profile {
	return Profile{
		Name:    "dynamo",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{{newDynamoCost(opts), 1}},
		Picker:  Softmax(opts.Temperature),
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
func AIBrixPrefixGate() Scorer { return aibrixPrefixGate{} }

// Score implements Scorer.
func (aibrixPrefixGate) Score(req *Request, cands []Candidate, dst []float64) {
	n := float64(len(cands))
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for i := range cands {
		l := float64(cands[i].InFlight.Requests)
		lo, hi = min(lo, l), max(hi, l)
		sum += l
	}
	mean := sum / n
	blocks := len(req.Chain)
	ratio := func(c *Candidate) float64 {
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
func AIBrix() Profile {
	return Profile{
		Name:    "aibrix",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{{aibrixPrefixGate{}, 1}},
		Picker:  MaxScore(),
	}
}

// RoundRobinProfile sends request i to the i-th healthy backend in turn, ignoring load and cache.
func RoundRobinProfile() Profile {
	return Profile{
		Name:    "round-robin",
		Filters: []Filter{newHealthFilter()},
		Picker:  RoundRobinPicker(),
	}
}

// LeastRequest sends each request to the backend with the fewest requests in flight from this
// router (ties at random): ActiveRequests and the max-score picker.
func LeastRequest() Profile {
	return Profile{
		Name:    "least-request",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{{ActiveRequests(), 1}},
		Picker:  MaxScore(),
	}
}

// UsherOptions configures Usher.
type UsherOptions struct {
	// Session configures the SessionAware scorer. Its Overload defaults to 2 here too. Gateway
	// replicas that share session placements set the same Session.Seed and a Session.Feed, and
	// reach the scorer for LearnPlacement with Profile.sessionScorers.
	Session SessionAwareOptions
	// AdapterWeight is the weight of an AdapterAffinity term (with Adapter's options) added
	// for fleets serving LoRA adapters; 2 is the weight measured in bench/README.md, "LoRA
	// adapters". Zero: no such term, and the profile is exactly the one described above. The
	// term scores every backend 0 for a request without an adapter.
	AdapterWeight float64
	// Adapter configures the AdapterAffinity term; ignored when AdapterWeight is 0. Invalid
	// options are reported by New (the term is then built from the defaults and New fails).
	Adapter AdapterOptions
}

// UsherLoadCap is the in-flight prefill at which Usher's token-load term reaches 0: 131,072
// tokens, about 8 s of prefill at 15,928 tok/s, so that the prefill already sent to a server
// counts at the scale where it decides TTFT (llm-d's 4,194,304 makes its token-load term nearly
// constant; 65,536 saturates on a long-context trace, where busy servers then all score 0 and
// the term stops telling them apart).
const UsherLoadCap = 1 << 17

// Usher is usher's default routing configuration:
//
//	HealthFilter → 1.5·SessionAware(Overload 2) + 2·TokenLoad(131,072)
//	               + 1·DynamoCost(AbstainWhenQuiet) + 0.5·KVUtilization → max-score
//
// with the prefix index learning at pick (LearnOnPick, the Profile default). The terms divide the
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
// With UsherOptions.AdapterWeight w > 0 the blend gains w·AdapterAffinity, for fleets that
// serve LoRA adapters; the other weights stay as above.
//
// Learning at pick is what co-locates requests sent together (siblings of a fan-out, bursts on
// one template): each sees the blocks the previous one is about to compute.
//
// The alternatives weighed against this composition are compared on the bench simulator in
// bench/README.md, "Choosing the default".
func Usher(opts UsherOptions) Profile {
	sa := opts.Session
	if sa.Overload == 0 {
		sa.Overload = DefaultOverload
	}
	p := Profile{
		Name:    "usher",
		Filters: []Filter{newHealthFilter()},
		Scorers: []Weighted{
			{newSessionAware(sa), 1.5},
			{TokenLoad(UsherLoadCap), 2},
			{newDynamoCost(DynamoOptions{AbstainWhenQuiet: true}), 1},
			{KVUtilization(), 0.5},
		},
		Picker: MaxScore(),
	}
	if opts.AdapterWeight != 0 {
		var sc Scorer
		if a, err := NewAdapterAffinity(opts.Adapter); err == nil {
			sc = a
		} else {
			sc = invalidScorer{err}
		}
		p.Scorers = append(p.Scorers, Weighted{sc, opts.AdapterWeight})
	}
	return p
}
