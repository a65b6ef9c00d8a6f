package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/usher-llm/usher/bench"
	"github.com/usher-llm/usher/internal/mix"
)

// TraceBlock is the block size of Mooncake traces: hash_ids name blocks of 512 tokens.
const TraceBlock = 512

// errTrace marks a trace replay that cannot be built.
var errTrace = errors.New("trace")

// TraceOptions configures the replay of a trace.
type TraceOptions struct {
	// Speed divides the trace's inter-arrival times: 2 replays twice as fast. 0 means 1.
	Speed float64
	// Limit, if > 0, keeps the first Limit requests.
	Limit int
	// Window, if > 0, keeps the requests arriving before it (in replay time).
	Window time.Duration
	// MaxContext, if > 0, fits each request into a server's context: answers are cut to half
	// of it and prompts to what remains (keeping their leading blocks, so prefix sharing
	// survives).
	MaxContext int
	// Tenants spreads the derived sessions over this many API keys; 0 means 1.
	Tenants int
	// ThinkScale multiplies the think time before each closed-loop turn (which Speed leaves
	// alone); 0 means 1. Below 1 it shortens the minutes-long gaps of the trace's sessions so
	// that a run of minutes sees them end: a different workload from the trace's, which a
	// report must say it used.
	ThinkScale float64
}

// TraceSessions turns a workload in bench's format — a Mooncake-format trace as
// bench.LoadMooncake reads it (with the sessions it derives from the prefix structure), or
// one of bench's generated workloads — into a replay whose user messages are the synthesised
// text of each request's block ids (see traceText, at the workload's BlockTokens) and whose
// answers are exactly each request's output length (max_tokens with ignore_eos), so that the
// gateway and the bench simulator can be given the same workload.
//
// An open-loop request (Prev < 0) starts a Session of its own at its arrival since the first
// request, divided by Speed; a closed-loop one (Prev ≥ 0) is the next Turn of the Session of
// the request it follows, sent its At after that request's answer (not divided by Speed, as
// bench.Workload.Scaled does not: faster arrivals of sessions do not make users type faster) —
// so a session's turns must form a chain. A request of a conversation gets the conversation's id
// ("trace-N") and its turn index from 0; one outside every conversation is its own
// ("trace-single-I"). Limit counts requests; Window ends the replay's open-loop arrivals.
// O(requests).
func TraceSessions(w *bench.Workload, opts TraceOptions) ([]Session, error) {
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 || opts.Limit < 0 || opts.Window < 0 || opts.MaxContext < 0 || opts.Tenants < 0 {
		return nil, fmt.Errorf("%w: speed, limit, window, max context and tenants must not be negative", errTrace)
	}
	if opts.MaxContext > 0 && opts.MaxContext < 2*traceTemplateTokens+2 {
		return nil, fmt.Errorf("%w: max context %d is too small", errTrace, opts.MaxContext)
	}
	if w == nil || w.BlockTokens <= 0 {
		return nil, fmt.Errorf("%w: want a workload with a positive block size", errTrace)
	}
	tenants := max(opts.Tenants, 1)
	var out []Session
	var t0 time.Duration
	// at[i] locates request i in out, for the closed-loop turns that follow it; -1: not sent.
	at := make([]struct{ s, t int32 }, len(w.Requests))
	sent, first := 0, true
	for i, r := range w.Requests {
		at[i].s = -1
		if opts.Limit > 0 && sent >= opts.Limit {
			break
		}
		input, output := int(r.PromptTokens), max(int(r.OutputTokens), 1)
		if m := opts.MaxContext; m > 0 {
			output = min(output, m/2)
			input = min(input, m-output-traceTemplateTokens)
		}
		turn := Turn{HashIDs: r.IDs, Tokens: input, MaxTokens: output, BlockTokens: w.BlockTokens}
		if r.Adapter > 0 && int(r.Adapter) <= len(w.Adapters) {
			turn.Model = w.Adapters[r.Adapter-1] // the workload's requests under a LoRA adapter
		}
		if r.Session >= 0 {
			turn.Index = int(r.Turn) - 1
		}
		if r.Prev >= 0 {
			if int(r.Prev) >= i {
				return nil, fmt.Errorf("%w: request %d follows request %d, which comes after it", errTrace, i, r.Prev)
			}
			p := at[r.Prev]
			if p.s < 0 {
				continue // what it follows is not replayed, so neither is it
			}
			s := &out[p.s]
			if int(p.t) != len(s.Turns)-1 {
				return nil, fmt.Errorf("%w: request %d follows request %d, which another turn already follows: a session replays as a chain", errTrace, i, r.Prev)
			}
			turn.Think = r.At // not scaled by speed: faster arrivals do not make users type faster
			if opts.ThinkScale > 0 {
				turn.Think = time.Duration(float64(turn.Think) * opts.ThinkScale)
			}
			s.Turns = append(s.Turns, turn)
			at[i] = struct{ s, t int32 }{p.s, int32(len(s.Turns) - 1)}
			sent++
			continue
		}
		if first {
			t0, first = r.At, false
		}
		start := time.Duration(float64(r.At-t0) / speed)
		if opts.Window > 0 && start >= opts.Window {
			continue
		}
		id, key := fmt.Sprintf("trace-single-%d", i), uint64(i)|1<<63
		if r.Session >= 0 {
			id, key = fmt.Sprintf("trace-%d", r.Session), uint64(r.Session)
		}
		out = append(out, Session{
			ID:     id,
			Tenant: fmt.Sprintf("sk-loadgen-tenant-%d", mix.Mix64(key)%uint64(tenants)),
			Start:  start,
			Turns:  []Turn{turn},
		})
		at[i] = struct{ s, t int32 }{int32(len(out) - 1), 0}
		sent++
	}
	return out, nil
}

// traceTemplateTokens is the room left for the chat template around a trace prompt (the
// simulated servers' ChatML adds 8 tokens around one user message and the generation prompt).
const traceTemplateTokens = 16

// traceText synthesises a prompt of exactly tokens tokens (under simfleet.Tokenize) for the
// blocks ids: block i holds block words (TraceBlock in Mooncake traces) chosen by a hash of (ids[i], position), each word
// one token with its leading space, so blocks are independent of their neighbours and equal
// id prefixes give equal text — and so equal token — prefixes. The last block is cut short
// to the length asked; a prompt longer than its blocks continues the last block's sequence.
//
// The approximation: a real tokenizer splits the same words into roughly, not exactly, one
// token each, and a chat template adds a few tokens before the first block, so block
// boundaries do not fall on the server's own block boundaries; what is preserved is which
// requests share how long a prefix. Different ids give different text from their first
// word on (unless two hashes pick the same words, with chance 1/len(words) per word).
// O(tokens).
func traceText(ids []uint64, tokens, block int) string {
	var b strings.Builder
	b.Grow(tokens * 6)
	for i := 0; tokens > 0 && i < len(ids); i++ {
		id := ids[i]
		n := min(tokens, block)
		if i >= len(ids)-1 {
			n = tokens // the last block takes whatever is left
		}
		base := mix.Mix64(id ^ 0x7472616365)
		for j := range n {
			b.WriteByte(' ')
			b.WriteString(words[mix.Mix64(base+uint64(j)*0x9e3779b97f4a7c15)%uint64(len(words))])
		}
		tokens -= n
	}
	return b.String()
}
