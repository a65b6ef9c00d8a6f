package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// The built-in synthetic workloads. Each is deterministic for its Seed and described in the
// Mooncake format (content ids of SynthBlockTokens tokens), so the simulator treats them like
// a trace. Sessions are closed loop: a session's next turn is sent a think time after the
// previous one completes, so a turn that is shed ends its session, as a user or an agent whose
// request failed would give up.

// SynthBlockTokens is the tokens per content id of the synthetic workloads: fine enough that a
// turn loses little reuse to its trailing partial block, which changes content every turn (in
// the Mooncake format a partial block gets a new id once it grows).
const SynthBlockTokens = 64

// ChatOptions configures Chat. Zero values take the defaults in brackets.
type ChatOptions struct {
	Sessions      int           // conversations [2000]
	Rate          float64       // new conversations per second [2]
	Turns         float64       // mean turns per conversation, geometric [5]
	SystemPrompts int           // distinct system prompts the conversations start with [8]
	SystemTokens  int           // system prompt length [1024]
	MessageTokens int           // mean user message, exponential [400]
	OutputTokens  int           // mean answer, exponential [300]
	Think         time.Duration // mean think time between turns, exponential [20 s]
	Seed          uint64
}

// Chat generates multi-turn conversations: each starts with one of a few system prompts, then
// alternates user messages and answers; every turn's prompt is the whole conversation so far.
func Chat(o ChatOptions) *Workload {
	def(&o.Sessions, 2000)
	deff(&o.Rate, 2)
	deff(&o.Turns, 5)
	def(&o.SystemPrompts, 8)
	def(&o.SystemTokens, 1024)
	def(&o.MessageTokens, 400)
	def(&o.OutputTokens, 300)
	defd(&o.Think, 20*time.Second)
	g := newGen("chat", o.Seed)
	systems := make([][]uint64, o.SystemPrompts)
	for i := range systems {
		systems[i], _ = g.extend(nil, 0, o.SystemTokens)
	}
	var at time.Duration
	for s := range o.Sessions {
		at += g.exp(time.Duration(float64(time.Second) / o.Rate))
		ids := slices.Clone(systems[g.rng.IntN(len(systems))])
		g.conversation(int32(s), at, ids, o.SystemTokens, g.geometric(o.Turns), o.MessageTokens, o.OutputTokens, o.Think, nil)
	}
	return g.done(o.Sessions)
}

// conversation adds a closed-loop conversation of turns turns to the workload, session s
// starting at at from a prompt of tokens tokens described by ids: each turn appends a user
// message (mean message tokens, exponential, at least 8) and asks for an answer (mean output,
// at least 4), which the next turn's prompt includes; later turns arrive a think time
// (exponential) after the previous answer. after, if not nil, sees the conversation after
// each answer (ids is reused: clone to keep it). ids is modified in place.
func (g *gen) conversation(s int32, at time.Duration, ids []uint64, tokens, turns, message, output int, think time.Duration, after func(ids []uint64, tokens int)) {
	prev := int32(-1)
	for t := range turns {
		ids, tokens = g.extend(ids, tokens, g.expInt(message, 8))
		out := g.expInt(output, 4)
		arrive := at
		if t > 0 {
			arrive = g.exp(think)
		}
		prev = g.add(s, int32(t+1), prev, arrive, ids, tokens, out)
		ids, tokens = g.extend(ids, tokens, out)
		if after != nil {
			after(ids, tokens)
		}
	}
}

// AgenticOptions configures Agentic. Zero values take the defaults in brackets.
type AgenticOptions struct {
	Sessions      int           // coding sessions [400]
	Rate          float64       // new sessions per second [0.5]
	Turns         float64       // mean turns (model calls) per session, geometric [20]
	OpeningTokens int           // opening instructions shared by every session [8000]
	TaskTokens    int           // the session's own task description [1000]
	ToolTokens    int           // mean tool result appended per turn, exponential [1200]
	OutputTokens  int           // mean model output per turn, exponential [150]
	Think         time.Duration // mean tool execution time between turns, exponential [2 s]
	MaxTokens     int           // a session stops before its prompt exceeds this [100000]
	// MinTurns and MaxTurns, when MaxTurns > 0, draw each session's turns uniformly from
	// [MinTurns, MaxTurns] instead of from the geometric distribution of mean Turns (see
	// IncreasingHazard).
	MinTurns, MaxTurns int
	Seed               uint64
}

// Agentic generates coding-agent sessions: every session starts with the same long opening
// instructions (tools, rules), then its task, then many short model calls, each appending a
// tool result to the growing context. The shared opening is the hot spot that pulls
// cache-affine routers onto the servers that saw it first.
func Agentic(o AgenticOptions) *Workload {
	def(&o.Sessions, 400)
	deff(&o.Rate, 0.5)
	deff(&o.Turns, 20)
	def(&o.OpeningTokens, 8000)
	def(&o.TaskTokens, 1000)
	def(&o.ToolTokens, 1200)
	def(&o.OutputTokens, 150)
	defd(&o.Think, 2*time.Second)
	def(&o.MaxTokens, 100000)
	g := newGen("agentic", o.Seed)
	opening, _ := g.extend(nil, 0, o.OpeningTokens)
	var at time.Duration
	for s := range o.Sessions {
		at += g.exp(time.Duration(float64(time.Second) / o.Rate))
		ids, tokens := g.extend(slices.Clone(opening), o.OpeningTokens, o.TaskTokens)
		prev := int32(-1)
		turns := g.geometric(o.Turns)
		if o.MaxTurns > 0 {
			lo := min(max(o.MinTurns, 1), o.MaxTurns)
			turns = lo + g.rng.IntN(o.MaxTurns-lo+1)
		}
		for t := range turns {
			if t > 0 {
				ids, tokens = g.extend(ids, tokens, g.expInt(o.ToolTokens, 16))
			}
			out := g.expInt(o.OutputTokens, 4)
			if tokens+out > o.MaxTokens {
				break
			}
			arrive := at
			if t > 0 {
				arrive = g.exp(o.Think)
			}
			prev = g.add(int32(s), int32(t+1), prev, arrive, ids, tokens, out)
			ids, tokens = g.extend(ids, tokens, out)
		}
	}
	return g.done(o.Sessions)
}

// IncreasingHazard generates agentic sessions whose length has an increasing hazard rate: a
// task of a typical number of steps, each session running a number of turns drawn uniformly
// from [MinTurns, MaxTurns] (defaults 6 and 10) instead of Agentic's geometric count, whose
// hazard is constant. The chance that a session which has run k turns ends after this one is
// 0 before MinTurns, then 1/5, 1/4, 1/3, 1/2 and 1 for k = 6 … 10: the longer a session has
// run, the sooner it ends. The other options are Agentic's, but for the number of sessions
// and their rate: 960 sessions (8 turns each on average, 7,700 turns in all, as Agentic's 400
// of about 19 offer 7,600) at 0.2 per second, so that scaled ×24 on the admission frontier's
// cluster (bench/README.md) FCFS sheds none, as on Agentic there (960 sessions at Agentic's
// 0.5 per second pile up faster than the cluster ends them, and every policy sheds).
func IncreasingHazard(o AgenticOptions) *Workload {
	def(&o.Sessions, 960)
	deff(&o.Rate, 0.2)
	if o.MaxTurns <= 0 {
		o.MinTurns, o.MaxTurns = 6, 10
	}
	w := Agentic(o)
	w.Name = "increasing-hazard"
	return w
}

// BurstyOptions configures Bursty. Zero values take the defaults in brackets.
type BurstyOptions struct {
	Requests      int           // requests [6000]
	Rate          float64       // mean arrivals per second over a period [4]
	Period        time.Duration // one quiet phase and one burst [60 s]
	BurstShare    float64       // share of each period spent in the burst [0.2]
	BurstFactor   float64       // burst rate over quiet rate [8]
	Prefixes      int           // shared document prefixes (RAG, few-shot templates) [16]
	PrefixTokens  int           // shared prefix length [3000]
	PromptTokens  int           // mean unique part of the prompt, exponential [1000]
	OutputTokens  int           // mean answer, exponential [200]
	SessionShare  float64       // share of requests that are a follow-up of an earlier one [0.3]
	FollowupThink time.Duration // think time of a follow-up [10 s]
	Seed          uint64
}

// Bursty generates open-loop single requests in on/off bursts (a Markov-modulated Poisson
// process with a fixed period), each starting with one of a few shared prefixes; a share of
// them get one closed-loop follow-up turn.
func Bursty(o BurstyOptions) *Workload {
	def(&o.Requests, 6000)
	deff(&o.Rate, 4)
	defd(&o.Period, 60*time.Second)
	deff(&o.BurstShare, 0.2)
	deff(&o.BurstFactor, 8)
	def(&o.Prefixes, 16)
	def(&o.PrefixTokens, 3000)
	def(&o.PromptTokens, 1000)
	def(&o.OutputTokens, 200)
	deff(&o.SessionShare, 0.3)
	defd(&o.FollowupThink, 10*time.Second)
	g := newGen("bursty", o.Seed)
	prefixes := make([][]uint64, o.Prefixes)
	for i := range prefixes {
		prefixes[i], _ = g.extend(nil, 0, o.PrefixTokens)
	}
	// Quiet rate q and burst rate f·q with mean rate: q·(1−b) + f·q·b = rate.
	quiet := o.Rate / (1 - o.BurstShare + o.BurstFactor*o.BurstShare)
	burstLen := time.Duration(float64(o.Period) * o.BurstShare)
	var at time.Duration
	sessions := 0
	for len(g.w.Requests) < o.Requests {
		phase := at % o.Period
		rate := quiet
		if phase >= o.Period-burstLen {
			rate *= o.BurstFactor
		}
		at += g.exp(time.Duration(float64(time.Second) / rate))
		ids, tokens := g.extend(slices.Clone(prefixes[g.rng.IntN(len(prefixes))]), o.PrefixTokens, g.expInt(o.PromptTokens, 16))
		out := g.expInt(o.OutputTokens, 4)
		s := int32(sessions)
		sessions++
		prev := g.add(s, 1, -1, at, ids, tokens, out)
		if g.rng.Float64() < o.SessionShare && len(g.w.Requests) < o.Requests {
			ids, tokens = g.extend(ids, tokens, out)
			ids, tokens = g.extend(ids, tokens, g.expInt(o.PromptTokens/4, 8))
			g.add(s, 2, prev, g.exp(o.FollowupThink), ids, tokens, g.expInt(o.OutputTokens, 4))
		}
	}
	return g.done(sessions)
}

// PrefixGroupOptions configures PrefixGroup. Zero values take the defaults in brackets. With
// the defaults a call sends 2.1 requests on average, and the mean prompt depends on the lengths
// the most popular groups drew; bench/README.md, "The prefix-group workload", describes the
// defaults' prompts, ideal hit rate and knee.
type PrefixGroupOptions struct {
	// Requests is the number of requests; generation stops after the call that reaches it, so
	// a call's siblings are never split [20000].
	Requests int
	// Rate is the mean arrival rate in requests per second, bursts and idle phases together;
	// calls arrive at Rate divided by the mean fan-out [24].
	Rate float64
	// Groups is the number of prefix groups: distinct documents, few-shot templates or agent
	// instructions that many independent requests start with [200].
	Groups int
	// ZipfExponent s sets the groups' popularity: a call picks the group of popularity rank k
	// (1 = the most popular) with probability k^−s / Σ_j j^−s. A very small exponent (1e-9)
	// is uniform in effect [1].
	ZipfExponent float64
	// PrefixTokens is the median length of a group's prefix; lengths are lognormal with
	// PrefixSigma the standard deviation of their logarithm, drawn once per group and clamped
	// to [SynthBlockTokens, MaxPrefixTokens] [4096, σ 0.75, max 32768]. The mean is about
	// 1.3 × the median.
	PrefixTokens    int
	PrefixSigma     float64
	MaxPrefixTokens int
	// SuffixTokens is the mean length of a call's own part after the prefix (the question,
	// the task), exponential, at least 16 [256].
	SuffixTokens int
	// FanOut weighs the call sizes 1, 2, 3, ...: FanOut[i] is the relative frequency of calls
	// that send i+1 siblings at the same instant (best-of-N, an agent's parallel sub-tasks).
	// Negative weights count as zero; nil or no positive weight: the default, single requests
	// 70% of the time, 2, 4 or 8 siblings 10% each (mean 2.1)
	// [0.7, 0.1, 0, 0.1, 0, 0, 0, 0.1].
	FanOut []float64
	// SiblingTokens is the mean number of tokens each sibling appends after the shared prompt,
	// exponential, at least 1. Zero (the default) appends none: the siblings' prompts are
	// identical, as in best-of-N; with a positive value they share the prefix and the call's
	// suffix and differ after it, as an agent's sub-tasks do.
	SiblingTokens int
	// OutputTokens is the mean answer of each request, exponential, at least 4 [200].
	OutputTokens int
	// Burst and Idle are the mean lengths of the arrival process's two phases, each
	// exponential (a two-state Markov-modulated Poisson process; the run starts in a phase
	// drawn with its long-run share, Burst/(Burst+Idle)) [5 s, 15 s]. Short phases keep the
	// offered rate of the default 20,000 requests close to Rate from seed to seed.
	Burst, Idle time.Duration
	// BurstFactor is the call rate during a burst over the rate while idle; +Inf sends nothing
	// while idle (an on/off process); 1 is a plain Poisson process [8].
	BurstFactor float64
	// Seed makes the workload: the same options and seed give the same workload.
	Seed uint64
}

// defaultFanOut is PrefixGroupOptions.FanOut's default: 1, 2, 4 or 8 siblings with weights 0.7,
// 0.1, 0.1 and 0.1.
var defaultFanOut = []float64{0.7, 0.1, 0, 0.1, 0, 0, 0, 0.1}

// PrefixGroup generates many independent single requests (no sessions, all open loop) that
// share long prefixes in groups of Zipf-distributed popularity, arriving in bursts, and sent in
// fan-outs of siblings that arrive at the same instant with the same prompt prefix. It is the
// workload of a gateway in front of RAG over a few popular documents, few-shot templates and
// agent tool calls: what a router gains here it gains from prefix affinity and from placing
// siblings together, with no session to follow, while the hottest groups are too popular for
// one server. O(requests + ids). A call's prompt is the group's prefix followed by the call's
// suffix; the prefix's trailing partial block, if any, is not shared (its content changes with
// the suffix, as in the Mooncake format). Each request is a flow of its own in the gateway.
func PrefixGroup(o PrefixGroupOptions) *Workload {
	w, _ := prefixGroup(o)
	return w
}

// phase is an interval [from, to) of the arrival process spent in one state.
type phase struct {
	from, to time.Duration
	burst    bool
}

// prefixGroup is PrefixGroup returning also the arrival process's phases, up to the last call
// (the test measures the rates in each).
func prefixGroup(o PrefixGroupOptions) (*Workload, []phase) {
	def(&o.Requests, 20000)
	deff(&o.Rate, 24)
	def(&o.Groups, 200)
	deff(&o.ZipfExponent, 1)
	def(&o.PrefixTokens, 4096)
	deff(&o.PrefixSigma, 0.75)
	def(&o.MaxPrefixTokens, 32768)
	def(&o.SuffixTokens, 256)
	def(&o.OutputTokens, 200)
	defd(&o.Burst, 5*time.Second)
	defd(&o.Idle, 15*time.Second)
	deff(&o.BurstFactor, 8)
	g := newGen("prefix-group", o.Seed)

	// Groups, in order of popularity rank: a prefix each, and the cumulative Zipf weights.
	prefixes := make([][]uint64, o.Groups)
	lengths := make([]int, o.Groups)
	popularity := make([]float64, o.Groups)
	lo, hi := g.w.BlockTokens, max(o.MaxPrefixTokens, g.w.BlockTokens)
	sum := 0.0
	for k := range prefixes {
		lengths[k] = g.lognormal(o.PrefixTokens, o.PrefixSigma, lo, hi)
		prefixes[k], _ = g.extend(nil, 0, lengths[k])
		sum += math.Pow(float64(k+1), -o.ZipfExponent)
		popularity[k] = sum
	}
	fan := cumulative(o.FanOut)
	if fan == nil {
		fan = cumulative(defaultFanOut)
	}
	meanFan := 0.0
	for i := range fan {
		p := fan[i]
		if i > 0 {
			p -= fan[i-1]
		}
		meanFan += p / fan[len(fan)-1] * float64(i+1)
	}

	// The two phases' call rates: idle rate q and burst rate f·q average to the call rate,
	// q·(1−b) + f·q·b = Rate/meanFan with b the long-run burst share.
	share := o.Burst.Seconds() / (o.Burst + o.Idle).Seconds()
	calls := o.Rate / meanFan
	idleRate, burstRate := 0.0, calls/share
	if !math.IsInf(o.BurstFactor, 1) {
		idleRate = calls / (1 - share + o.BurstFactor*share)
		burstRate = o.BurstFactor * idleRate
	}
	cur := phase{burst: g.rng.Float64() < share}
	length := func(burst bool) time.Duration {
		if burst {
			return g.exp(o.Burst)
		}
		return g.exp(o.Idle)
	}
	cur.to = length(cur.burst)
	var phases []phase
	at, last := time.Duration(0), time.Duration(-1)
	for len(g.w.Requests) < o.Requests {
		rate := idleRate
		if cur.burst {
			rate = burstRate
		}
		next := cur.to
		if rate > 0 {
			next = at + g.exp(time.Duration(float64(time.Second)/rate))
		}
		if next >= cur.to {
			// No arrival before the phase ends; Poisson arrivals are memoryless, so the next
			// phase starts afresh at its own rate.
			phases = append(phases, cur)
			at = cur.to
			cur = phase{from: at, burst: !cur.burst}
			cur.to = at + length(cur.burst)
			continue
		}
		// Distinct calls never share an instant, so siblings are the requests that do.
		at = max(next, last+1)
		last = at
		k := pickCum(g.rng.Float64()*popularity[len(popularity)-1], popularity)
		ids, tokens := g.extend(slices.Clone(prefixes[k]), lengths[k], g.expInt(o.SuffixTokens, 16))
		n := pickCum(g.rng.Float64()*fan[len(fan)-1], fan) + 1
		for range n {
			sids, stokens := ids, tokens
			if o.SiblingTokens > 0 {
				sids, stokens = g.extend(slices.Clone(ids), tokens, g.expInt(o.SiblingTokens, 1))
			}
			g.add(-1, 1, -1, at, sids, stokens, g.expInt(o.OutputTokens, 4))
		}
	}
	cur.to = min(cur.to, last)
	phases = append(phases, cur)
	return g.done(0), phases
}

// cumulative returns the running sums of the weights, negative ones counted as zero, or nil
// when no weight is positive.
func cumulative(weights []float64) []float64 {
	out := make([]float64, len(weights))
	sum := 0.0
	for i, x := range weights {
		if x > 0 {
			sum += x
		}
		out[i] = sum
	}
	if sum <= 0 {
		return nil
	}
	return out
}

// pickCum returns the first index whose cumulative weight exceeds u (u in [0, cum[last]) ).
// O(log n).
func pickCum(u float64, cum []float64) int {
	i, _ := slices.BinarySearchFunc(cum, u, func(c, u float64) int {
		if c <= u {
			return -1
		}
		return 1
	})
	return min(i, len(cum)-1)
}

// gen builds a synthetic workload.
type gen struct {
	w    *Workload
	rng  *rand.Rand
	next uint64
}

func newGen(name string, seed uint64) *gen {
	return &gen{
		w:    &Workload{Name: name, BlockTokens: SynthBlockTokens},
		rng:  rand.New(rand.NewPCG(seed, 0x5eed_0f_be4c4)),
		next: 1,
	}
}

// extend appends add tokens of new content to a prompt of tokens tokens described by ids. The
// trailing partial block, if any, changes content and so gets a fresh id; new full or partial
// blocks get fresh ids. ids is modified in place (clone it first if it is shared).
func (g *gen) extend(ids []uint64, tokens, add int) ([]uint64, int) {
	bt := g.w.BlockTokens
	if tokens%bt != 0 && len(ids) > 0 {
		ids[len(ids)-1] = g.next
		g.next++
	}
	tokens += add
	for len(ids)*bt < tokens {
		ids = append(ids, g.next)
		g.next++
	}
	return ids, tokens
}

// add appends a request and returns its index. Open-loop requests (prev < 0) arrive at at;
// follow-ups at after prev completes. Open-loop arrivals are generated in time order per
// session start, and sorted by done.
func (g *gen) add(session, turn, prev int32, at time.Duration, ids []uint64, tokens, out int) int32 {
	g.w.Requests = append(g.w.Requests, Request{
		At: at, Prev: prev, Session: session, Turn: turn,
		PromptTokens: int32(tokens), OutputTokens: int32(max(out, 1)),
		IDs: slices.Clone(ids),
	})
	return int32(len(g.w.Requests) - 1)
}

// done finalises the workload. Open-loop requests were generated in arrival order already
// (session starts are increasing), so no sort is needed; validate guards that.
func (g *gen) done(sessions int) *Workload {
	g.w.Sessions = sessions
	return g.w
}

// exp draws an exponential duration with the given mean.
func (g *gen) exp(mean time.Duration) time.Duration {
	return time.Duration(g.rng.ExpFloat64() * float64(mean))
}

// expInt draws an exponential length with the given mean, at least lo.
func (g *gen) expInt(mean, lo int) int {
	return max(lo, int(math.Round(g.rng.ExpFloat64()*float64(mean))))
}

// lognormal draws a length whose logarithm is normal around log(median) with standard
// deviation sigma, rounded and clamped to [lo, hi].
func (g *gen) lognormal(median int, sigma float64, lo, hi int) int {
	n := math.Exp(math.Log(float64(median)) + sigma*g.rng.NormFloat64())
	return min(max(int(math.Round(n)), lo), hi)
}

// geometric draws a count ≥ 1 with the given mean.
func (g *gen) geometric(mean float64) int {
	if mean <= 1 {
		return 1
	}
	p := 1 / mean
	n := 1
	for g.rng.Float64() >= p && n < 10000 {
		n++
	}
	return n
}

func def(p *int, v int) {
	if *p <= 0 {
		*p = v
	}
}

func deff(p *float64, v float64) {
	if *p <= 0 {
		*p = v
	}
}

func defd(p *time.Duration, v time.Duration) {
	if *p <= 0 {
		*p = v
	}
}

// ForksOptions configures Forks. Zero values take the defaults in brackets.
type ForksOptions struct {
	Sessions      int     // conversations [1500]
	Rate          float64 // new conversations per second [3]
	Turns         float64 // mean turns per conversation, geometric [2]
	SystemPrompts int     // distinct short system prompts [4]
	SystemTokens  int     // system prompt length [512]
	// Documents is the number of shared documents (a repository, a contract, a manual) that
	// DocumentShare of the conversations open after the system prompt, picked with Zipf
	// popularity (exponent 1) [48, 0.3]; their lengths are lognormal around DocumentTokens
	// (σ 0.5, at most 4×) [6000]. Each document is read under one of the system prompts.
	Documents      int
	DocumentShare  float64
	DocumentTokens int
	// ForkShare of the conversations are forks of an earlier one that started within
	// ForkWindow: an agent's sub-task, an edited retry, a branch. A fork's first prompt is the
	// earlier conversation as far as it had plausibly got (its turns that began by then, at one
	// Think plus ForkService each) followed by a new message [0.2, 120 s, 2 s].
	ForkShare     float64
	ForkWindow    time.Duration
	ForkService   time.Duration
	MessageTokens int           // mean user message, exponential [300]
	OutputTokens  int           // mean answer, exponential [250]
	Think         time.Duration // mean think time between turns, exponential [20 s]
	Seed          uint64
}

// Forks generates short conversations whose first turns share long prefixes with other
// sessions: forks of earlier conversations (new session, almost all of an earlier prompt) and
// popular shared documents, besides a few short system prompts. It is the workload where a
// router that places every new session for balance loses the reuse a first turn carries; run
// it at small KV caches, where eviction is constant. O(requests + ids).
func Forks(o ForksOptions) *Workload {
	def(&o.Sessions, 1500)
	deff(&o.Rate, 3)
	deff(&o.Turns, 2)
	def(&o.SystemPrompts, 4)
	def(&o.SystemTokens, 512)
	def(&o.Documents, 48)
	deff(&o.DocumentShare, 0.3)
	def(&o.DocumentTokens, 6000)
	deff(&o.ForkShare, 0.2)
	defd(&o.ForkWindow, 120*time.Second)
	defd(&o.ForkService, 2*time.Second)
	def(&o.MessageTokens, 300)
	def(&o.OutputTokens, 250)
	defd(&o.Think, 20*time.Second)
	g := newGen("forks", o.Seed)
	systems := make([][]uint64, o.SystemPrompts)
	for i := range systems {
		systems[i], _ = g.extend(nil, 0, o.SystemTokens)
	}
	docs := make([][]uint64, o.Documents)
	docLen := make([]int, o.Documents)
	popularity := make([]float64, o.Documents)
	sum := 0.0
	for k := range docs {
		n := g.lognormal(o.DocumentTokens, 0.5, g.w.BlockTokens, 4*o.DocumentTokens)
		// A document is read under one of the system prompts.
		docs[k], docLen[k] = g.extend(slices.Clone(systems[k%len(systems)]), o.SystemTokens, n)
		sum += 1 / float64(k+1)
		popularity[k] = sum
	}
	// context is a conversation as it stands after a turn's answer.
	type context struct {
		ids    []uint64
		tokens int
	}
	type conversation struct {
		start time.Duration
		after []context // after[t]: the conversation after turn t+1's answer
	}
	var convs []conversation
	var at time.Duration
	for s := range o.Sessions {
		at += g.exp(time.Duration(float64(time.Second) / o.Rate))
		var ids []uint64
		var tokens int
		first := len(convs)
		for first > 0 && at-convs[first-1].start <= o.ForkWindow {
			first--
		}
		switch u := g.rng.Float64(); {
		case u < o.ForkShare && first < len(convs):
			p := &convs[first+g.rng.IntN(len(convs)-first)]
			t := int((at - p.start) / (o.Think + o.ForkService))
			c := p.after[min(t, len(p.after)-1)]
			ids, tokens = slices.Clone(c.ids), c.tokens
		case u < o.ForkShare+o.DocumentShare:
			k := pickCum(g.rng.Float64()*sum, popularity)
			ids, tokens = slices.Clone(docs[k]), docLen[k]
		default:
			ids, tokens = slices.Clone(systems[g.rng.IntN(len(systems))]), o.SystemTokens
		}
		conv := conversation{start: at}
		g.conversation(int32(s), at, ids, tokens, g.geometric(o.Turns), o.MessageTokens, o.OutputTokens, o.Think,
			func(ids []uint64, tokens int) { conv.after = append(conv.after, context{slices.Clone(ids), tokens}) })
		convs = append(convs, conv)
	}
	return g.done(o.Sessions)
}
