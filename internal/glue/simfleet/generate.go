package simfleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/usher-llm/usher/internal/engine"
)

// This file runs one generation for the endpoints whose answers are not chat's or
// completions' (Anthropic's Messages, OpenAI's Responses): the same engine, the same
// deterministic answers, written by each API's own handler.

// gen is one generation submitted to the engine.
type gen struct {
	id     engine.RequestID
	st     *stream
	prompt []uint32
	pieces []string // the answer, one token each
	reason string   // "stop" or "length"
}

// errContext is a request that does not fit the model's context.
type errContext struct{ msg string }

func (e errContext) Error() string { return e.msg }

// start plans the answer to prompt (at most limit tokens; 0: the room left in the context)
// under adapter ("" for the base model) and submits it. Its errors are ErrClosed, an
// errContext, or the engine's refusal.
func (s *Server) start(prompt []uint32, limit int, adapter string) (*gen, error) {
	if len(prompt) == 0 {
		return nil, errContext{"the prompt is empty"}
	}
	maxLen := s.profile.MaxModelLen
	room := maxLen - len(prompt)
	if limit > room || room < 1 {
		asked := max(limit, 1)
		return nil, errContext{fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
			maxLen, len(prompt)+asked, len(prompt), asked)}
	}
	maxOut := room
	if limit > 0 {
		maxOut = limit
	}
	n, reason := naturalLength(prompt, s.minAnswer, s.maxAnswer), "stop"
	if n >= maxOut {
		n, reason = maxOut, "length"
	}
	pieces := answer(make([]string, 0, n), prompt, n)
	out := make([]uint32, n)
	for i, p := range pieces {
		out[i] = tokenID(p)
	}
	id, st, err := s.submit(engine.Request{Prompt: prompt, Output: out, OutputTokens: n, Adapter: adapter}, reason)
	if err != nil {
		return nil, err
	}
	return &gen{id: id, st: st, prompt: prompt, pieces: pieces, reason: reason}, nil
}

// startStatus is the HTTP status of an error of start.
func startStatus(err error) int {
	if errors.Is(err, ErrClosed) {
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// genEvents is what follow reports of a generation as it runs.
type genEvents struct {
	started  func(cached int)           // the prompt was admitted, cached tokens served from cache
	tokens   func(from, to int)         // pieces[from:to] were produced
	finished func(cached, produced int) // the answer is complete
	aborted  func()                     // the server aborted it (shutting down)
	batch    func() error               // after each batch of events: write out; an error ends it
}

// follow runs g's events through ev until the generation ends. It reports false when the
// client went away or a write failed (the generation is aborted).
func (s *Server) follow(ctx context.Context, g *gen, ev genEvents) bool {
	var evs []engine.Event
	cached, produced := 0, 0
	for {
		var ok bool
		if evs, ok = s.take(ctx, g.st, evs[:0]); !ok {
			s.abort(g.id)
			return false
		}
		done := false
		for _, e := range evs {
			switch e.Kind {
			case engine.EventStarted:
				cached = e.Tokens
				if ev.started != nil {
					ev.started(cached)
				}
			case engine.EventToken:
				if to := min(e.Tokens, len(g.pieces)); to > produced {
					if ev.tokens != nil {
						ev.tokens(produced, to)
					}
					produced = to
				}
			case engine.EventFinished:
				done = true
				ev.finished(cached, produced)
			case engine.EventAborted:
				done = true
				ev.aborted()
			}
		}
		if ev.batch != nil {
			if err := ev.batch(); err != nil {
				s.abort(g.id)
				return false
			}
		}
		if done {
			return true
		}
	}
}

// toolCall renders a tool call as the simulated chat template writes it.
func toolCall(name, args string) string {
	return "<tool_call>{\"name\":" + quote(name) + ",\"arguments\":" + args + "}</tool_call>"
}

func toolResponse(text string) string { return "<tool_response>" + text + "</tool_response>" }

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
