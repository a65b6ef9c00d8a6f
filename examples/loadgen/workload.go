package main

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
)

// Session is one client conversation: a script of turns sent one after the other on the same
// session id and tenant. A workload is a list of sessions ordered by Start.
//
// Chained sessions (the synthetic agentic ones) grow: turn k sends the system prompt, every
// earlier user message and the answer the server actually gave to it, then the new user
// message, so each turn's prompt extends the previous one and the server can reuse its KV
// cache. Unchained sessions send each turn's messages as they are (trace replay, where one
// Session is one trace request carrying the derived session id).
type Session struct {
	// ID is sent as the X-Session-Id header.
	ID string
	// Tenant is the API key sent as "Authorization: Bearer <Tenant>".
	Tenant string
	// Start is when the first turn is sent, from the start of the run.
	Start time.Duration
	// System is the system prompt; empty means none.
	System string
	// Chain makes every turn carry the whole conversation so far.
	Chain bool
	// Turns are sent in order; each waits for the previous one to end, then its Think time.
	Turns []Turn
}

// Turn is one request of a session.
type Turn struct {
	// Think is the wait after the previous turn's answer (ignored for the first turn).
	Think time.Duration
	// User is the user message, unless HashIDs is set.
	User string
	// HashIDs and Tokens, for trace replay, stand for a user message of Tokens tokens
	// synthesised from the trace's block ids when the turn is sent (see traceText), so a
	// long trace is not held in memory as text.
	HashIDs []uint64
	Tokens  int
	// BlockTokens is the number of tokens each of HashIDs stands for; 0 means TraceBlock.
	BlockTokens int
	// MaxTokens is the answer length, exact with ignore_eos.
	MaxTokens int
	// Index is the turn's number in its conversation: 0 is a first turn (a cold prefix beyond
	// any shared opening), later turns should find their history cached.
	Index int
	// Model is the model the turn asks for (a LoRA adapter, say); empty: Target.Model.
	Model string
}

// Message is an OpenAI chat message with string content.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// messages returns the chat messages of turn t of s, given the answers received for the turns
// before it (answers[i] for turn i; chained sessions only). O(turns).
func (s *Session) messages(t int, answers []string) []Message {
	msgs := make([]Message, 0, 2*t+2)
	if s.System != "" {
		msgs = append(msgs, Message{Role: "system", Content: s.System})
	}
	if s.Chain {
		for i := 0; i < t && i < len(answers); i++ {
			msgs = append(msgs, Message{Role: "user", Content: s.Turns[i].text()},
				Message{Role: "assistant", Content: answers[i]})
		}
	}
	return append(msgs, Message{Role: "user", Content: s.Turns[t].text()})
}

// text returns the user message. O(its length).
func (t *Turn) text() string {
	if t.HashIDs != nil {
		return traceText(t.HashIDs, t.Tokens, cmp.Or(t.BlockTokens, TraceBlock))
	}
	return t.User
}

// SyntheticOptions configures the built-in workload: agentic coding sessions sharing long
// opening instructions, with growing context and think time between turns, mixed with
// single-turn requests. Zero values mean the documented defaults.
type SyntheticOptions struct {
	// Seed makes the workload: equal options give equal sessions.
	Seed uint64
	// Duration is the window in which sessions start; 0 means 60 s.
	Duration time.Duration
	// Rate is the mean number of sessions (conversations or single requests) starting per
	// second, as a Poisson process; 0 means 2.
	Rate float64
	// SingleTurn is the share of sessions that are one request; 0 means 0.3, negative none.
	SingleTurn float64
	// Tenants is the number of API keys; tenant i gets weight 1/(i+1). 0 means 4.
	Tenants int
	// SystemTokens is the length of the agents' shared opening instructions; 0 means 1500.
	SystemTokens int
	// MinTurns and MaxTurns bound an agentic session's turns; 0 means 3 and 10.
	MinTurns, MaxTurns int
	// Think is the mean think time between turns (exponential, capped at 5×); 0 means 1 s,
	// negative none.
	Think time.Duration
	// MinAnswer and MaxAnswer bound max_tokens; 0 means 32 and 256.
	MinAnswer, MaxAnswer int
	// MaxContext caps a session's prompt plus answer, in tokens of simfleet.Tokenize (turns
	// beyond it are dropped; the estimate leaves room for template tokens); 0 means 7500,
	// which fits the simulated demo profile's 8192.
	MaxContext int
	// Salt is prepended to every session's first message: equal options with different salts
	// give requests of the same shape whose prompts share nothing (used to keep the server's
	// cache equally cold for repeated runs).
	Salt string
}

func (o SyntheticOptions) withDefaults() SyntheticOptions {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	if o.Rate == 0 {
		o.Rate = 2
	}
	if o.SingleTurn == 0 {
		o.SingleTurn = 0.3
	}
	if o.Think == 0 {
		o.Think = time.Second
	}
	def(&o.Tenants, 4)
	def(&o.SystemTokens, 1500)
	def(&o.MinTurns, 3)
	def(&o.MaxTurns, 10)
	def(&o.MinAnswer, 32)
	def(&o.MaxAnswer, 256)
	def(&o.MaxContext, 7500)
	return o
}

func (o SyntheticOptions) validate() error {
	switch {
	case o.Duration < 0 || o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("synthetic: duration %v and rate %v must be positive", o.Duration, o.Rate)
	case o.SingleTurn > 1:
		return fmt.Errorf("synthetic: single-turn share %v above 1", o.SingleTurn)
	case o.Tenants < 1 || o.SystemTokens < 0:
		return fmt.Errorf("synthetic: tenants %d and system tokens %d", o.Tenants, o.SystemTokens)
	case o.MinTurns < 1 || o.MaxTurns < o.MinTurns:
		return fmt.Errorf("synthetic: turns [%d, %d]", o.MinTurns, o.MaxTurns)
	case o.MinAnswer < 1 || o.MaxAnswer < o.MinAnswer:
		return fmt.Errorf("synthetic: answer length [%d, %d]", o.MinAnswer, o.MaxAnswer)
	case o.MaxContext < o.SystemTokens+o.MaxAnswer+64:
		return fmt.Errorf("synthetic: max context %d leaves no room after a %d-token system prompt and %d-token answers", o.MaxContext, o.SystemTokens, o.MaxAnswer)
	}
	return nil
}

// Synthetic generates the built-in workload. It is deterministic: equal options give equal
// sessions. The shape:
//
//   - Agentic sessions (1 − SingleTurn of them) belong to a tenant; they open with the same
//     long instructions (SystemTokens, shared by every agent of every tenant) followed by the
//     tenant's repository notes (~200 tokens, shared within the tenant). Each turn is a user
//     message — an instruction, with a tool output (file contents, test logs) half the time —
//     and the context grows by the previous answer and the new message, until MaxContext.
//   - Single-turn requests carry a short generic system prompt and one question.
//
// O(sessions × turns × message length).
func Synthetic(opts SyntheticOptions) ([]Session, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6c6f616467656e))
	instructions := agentInstructions(o.SystemTokens)
	notes := make([]string, o.Tenants)
	for i := range notes {
		notes[i] = fmt.Sprintf("\n\nRepository notes for team %d:", i) + prose(rand.New(rand.NewPCG(o.Seed, uint64(i)+1)), 200)
	}
	weights := make([]float64, o.Tenants)
	total := 0.0
	for i := range weights {
		weights[i] = 1 / float64(i+1)
		total += weights[i]
	}

	var out []Session
	at := time.Duration(0)
	for n := 0; ; n++ {
		at += time.Duration(rng.ExpFloat64() / o.Rate * float64(time.Second))
		if at >= o.Duration {
			break
		}
		tenant := pickWeighted(rng, weights, total)
		s := Session{
			ID:     fmt.Sprintf("%ssession-%d", saltID(o.Salt), n),
			Tenant: fmt.Sprintf("sk-loadgen-tenant-%d", tenant),
			Start:  at,
		}
		if rng.Float64() < o.SingleTurn {
			s.System = o.Salt + "You are a helpful assistant. Answer briefly and precisely."
			s.Turns = []Turn{{User: question(rng, 50+rng.IntN(750)), MaxTokens: between(rng, o.MinAnswer, o.MaxAnswer)}}
			out = append(out, s)
			continue
		}
		s.System = o.Salt + instructions + notes[tenant]
		s.Chain = true
		used := simfleet.TokenCount(s.System) + 8
		turns := between(rng, o.MinTurns, o.MaxTurns)
		for t := range turns {
			user := task(rng, between(rng, 20, 150))
			if rng.IntN(2) == 0 {
				user += toolOutput(rng, between(rng, 200, 1500))
			}
			answer := between(rng, o.MinAnswer, o.MaxAnswer)
			cost := simfleet.TokenCount(user) + answer + 16 // template tokens around two messages
			if used+cost > o.MaxContext {
				break
			}
			used += cost
			th := time.Duration(0)
			if t > 0 && o.Think > 0 {
				th = time.Duration(min(rng.ExpFloat64(), 5) * float64(o.Think))
			}
			s.Turns = append(s.Turns, Turn{Think: th, User: user, MaxTokens: answer, Index: t})
		}
		if len(s.Turns) == 0 {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func saltID(salt string) string {
	if salt == "" {
		return ""
	}
	return fmt.Sprintf("%x-", uint32(hashString(salt)))
}

func hashString(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}

func between(rng *rand.Rand, lo, hi int) int { return lo + rng.IntN(hi-lo+1) }

func pickWeighted(rng *rand.Rand, w []float64, total float64) int {
	x := rng.Float64() * total
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

// agentInstructions is the agents' shared opening: a fixed header and n tokens of rules, the
// same for every seed (it stands for one product's system prompt).
func agentInstructions(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	return "You are a coding agent working in the user's repository. Follow these rules." + prose(rng, n)
}

func task(rng *rand.Rand, n int) string {
	verbs := [...]string{"Fix", "Refactor", "Explain", "Test", "Review", "Rename", "Document", "Speed up"}
	return verbs[rng.IntN(len(verbs))] + " the code below:" + prose(rng, n)
}

func question(rng *rand.Rand, n int) string {
	return "Question:" + prose(rng, n) + "?"
}

// toolOutput stands for a file read or a command's output: n tokens of code-like lines.
func toolOutput(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.WriteString("\n\n```go\n")
	for written := 0; written < n; {
		line := 4 + rng.IntN(10)
		b.WriteString("\t")
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteString(" :=")
		for range line {
			b.WriteString(" ")
			b.WriteString(words[rng.IntN(len(words))])
		}
		b.WriteString("\n")
		written += line + 4
	}
	b.WriteString("```")
	return b.String()
}

// prose returns about n tokens of sentences (under simfleet.Tokenize), each word with its
// leading space.
func prose(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	for i := 0; i < n; {
		k := min(4+rng.IntN(12), n-i)
		for range k {
			b.WriteString(" ")
			b.WriteString(words[rng.IntN(len(words))])
		}
		i += k
		if i < n {
			b.WriteString(".")
			i++
		}
	}
	return b.String()
}

// words are common English and programming words of at most 7 letters: with its leading
// space each is one token of simfleet.Tokenize, and most are one token of the BPE vocabularies
// of Llama and Qwen models too.
var words = shortWords(`the of and to in is that for it as with was on be by this are or
from at an not have but which one all were they we when there can more if has will their
would about been so what some into only other its time new these two may then do first any
like now my such our over even most made after also did many before must through back years
where much your way well down should because each just those people how too little state good
very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right
used take three states himself few house use during without again place around however home
small found thought went say part once general high upon school every does got united left
number course war until always away something fact though water less public put think almost
hand enough far took head yet system better set told nothing night end why called didn find
going look asked later point knew city next program business give group toward young days let
room social often order given large kind present second line rather per among turn big best
function return value string number error buffer index cache block token request server client
session tenant router queue policy metric handler context struct method field pointer slice
map channel mutex worker thread socket stream header branch commit merge build deploy config
module package import export object array integer float bool nil null true false test bench`)

func shortWords(list string) []string {
	var out []string
	for _, w := range strings.Fields(list) {
		if len(w) <= 7 {
			out = append(out, w)
		}
	}
	return out
}
