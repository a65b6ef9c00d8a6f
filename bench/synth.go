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
		tokens := o.SystemTokens
		prev := int32(-1)
		turns := g.geometric(o.Turns)
		for t := range turns {
			ids, tokens = g.extend(ids, tokens, g.expInt(o.MessageTokens, 8))
			out := g.expInt(o.OutputTokens, 4)
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
	Seed          uint64
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
