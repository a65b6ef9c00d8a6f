package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/usher-llm/usher/internal/glue/gatewaymetrics"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/routing"
)

// Disaggregated serving: the prefill step.
//
// A request the Decider disaggregates has two picks. The decode pick is the exchange's own
// (made by begin, retried by the transport like any pick); the prefill pick lives only inside
// prefill, which sends the prefill step, closes that pick exactly once, and on success rewrites
// the outgoing request into the decode step. Every decode attempt, retries included, carries
// the same transfer parameters: the prefill server keeps the KV until a decode server pulls it
// (or its own timeout), and a decode server whose pull fails recomputes the prompt (vLLM's
// default kv_load_failure_policy), so a retry never runs the prefill again.

// errPrefillParams is a prefill answer without usable transfer parameters.
var errPrefillParams = errors.New("proxy: the prefill server's answer has no kv_transfer_params")

// prefill runs the prefill step of a disaggregated request on a prefill server, retrying on
// another one (under Retry's attempts and budget) when it fails, and points req at the decode
// step with the transfer parameters the prefill server answered. When no prefill server
// answers, req is left as it was: the decode server serves the request whole (a fallback,
// counted). It returns an error only when the request's context ended (the client left, or the
// request's time cap passed): then nothing more should be sent.
func (ex *exchange) prefill(req *http.Request) error {
	h := ex.h
	body, err := openaiwire.PrefillBody(ex.req)
	if err != nil {
		ex.fallback(fmt.Errorf("proxy: building the prefill body: %w", err))
		return nil
	}
	var tried []routing.BackendID
	var last error
	for attempt := 1; attempt <= h.retry.Attempts; attempt++ {
		if attempt > 1 && !errors.Is(last, errStalled) && !h.budget.allow(time.Now()) {
			break // a move off a stalled server is not charged to the budget (see Retry)
		}
		p, err := h.router.Pick(&routing.Request{
			Chain: ex.prompt.Chain, BlockSize: ex.prompt.BlockSize, PromptTokens: ex.prompt.Tokens,
			Role: routing.RolePrefill, Exclude: tried, // no Session: the session's home is its decode server
			Model: ex.req.Model, Adapter: ex.req.Adapter,
		})
		if err != nil {
			last = err
			break
		}
		h.usher.ObservePick(p.Backend.Name)
		params, err := ex.sendPrefill(req, p, body)
		if err == nil {
			dec := openaiwire.AppendDecode(ex.req, make([]byte, 0, len(ex.req.Body)+len(params)+64), params)
			req.Body = io.NopCloser(bytes.NewReader(dec))
			req.ContentLength = int64(len(dec))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(dec)), nil }
			h.usher.ObserveStage(gatewaymetrics.Disaggregated)
			// The decode server will not prefill: release the prompt tokens charged to it.
			ex.mu.Lock()
			ex.prefilledAt = time.Now()
			if ex.picked {
				ex.pick.FirstToken(ex.prefilledAt)
			}
			ex.mu.Unlock()
			return nil
		}
		if cerr := req.Context().Err(); cerr != nil {
			return context.Cause(req.Context())
		}
		tried, last = append(tried, p.ID), err
	}
	ex.fallback(last)
	return nil
}

// fallback notes a disaggregated request served whole by its decode server.
func (ex *exchange) fallback(err error) {
	ex.h.usher.ObserveStage(gatewaymetrics.Fallback)
	ex.h.log.Warn("prefill step failed; the decode server prefills", "request_id", ex.rid, "backend", ex.backend, "err", err)
}

// sendPrefill sends the prefill step to the prefill pick p and closes p, exactly once. It
// returns the transfer parameters of the server's answer.
func (ex *exchange) sendPrefill(req *http.Request, p routing.Result, body []byte) (json.RawMessage, error) {
	h := ex.h
	start := time.Now()
	params, info := ex.tryPrefill(req, p, body)
	p.Done(info)
	switch {
	case info.Err == nil:
		h.usher.ObservePrefill(gatewaymetrics.PrefillOK, time.Since(start))
	case ex.ctx.Err() != nil:
		h.usher.ObservePrefill(gatewaymetrics.PrefillCancelled, 0)
	default:
		h.usher.ObservePrefill(gatewaymetrics.PrefillFailed, 0)
		h.log.Warn("prefill attempt failed", "request_id", ex.rid, "backend", p.Backend.Name, "err", info.Err)
	}
	return params, info.Err
}

// tryPrefill does the prefill step's exchange with p's server and says what happened, for p's
// Done. It waits for the answer at most ResponseHeader plus one output token's
// PerOutputToken, and reads at most 4 MiB of it.
func (ex *exchange) tryPrefill(req *http.Request, p routing.Result, body []byte) (json.RawMessage, routing.DoneInfo) {
	h := ex.h
	t := h.backendURL(p.Backend.Name)
	if t == nil {
		return nil, routing.DoneInfo{Err: fmt.Errorf("proxy: prefill backend name %q is not a base URL", p.Backend.Name)}
	}
	ctx, cancel := context.WithTimeoutCause(req.Context(), h.timeouts.ResponseHeader+h.timeouts.PerOutputToken, errHeaderTimeout)
	defer cancel()
	// A prefill leg's first byte is its end: the health checks' probes judge its server, and
	// a stall verdict there moves it (moveStalled).
	ctx, move := context.WithCancelCause(ctx)
	defer move(nil)
	if h.timeouts.Stall > 0 {
		w := h.waiting.add(p.Backend.Name, move)
		defer h.waiting.remove(w)
	}
	u := *req.URL
	u.Scheme, u.Host, u.User = t.Scheme, t.Host, nil
	u.Path, u.RawPath = t.Path+ex.path, ""
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, routing.DoneInfo{Err: err}
	}
	out.Header = req.Header.Clone() // the client's headers as the decode step gets them (auth, ids)
	out.Header.Set("Content-Type", "application/json")
	out.Header.Del("Accept-Encoding")
	pinRank(out.Header, t)
	resp, err := h.transport.RoundTrip(out)
	if err != nil {
		f := routing.FailureConnect
		switch {
		case ex.ctx.Err() != nil:
			f = routing.FailureNone
		case errors.Is(context.Cause(ctx), errStalled):
			h.usher.ObserveStallMove(p.Backend.Name)
			return nil, routing.DoneInfo{Err: fmt.Errorf("%w: %w", errStalled, err), Failure: routing.FailureConnect}
		case errors.Is(context.Cause(ctx), errHeaderTimeout), isTimeout(err) && !isDial(err):
			f = routing.FailureTimeout
		}
		return nil, routing.DoneInfo{Err: err, Failure: f}
	}
	defer resp.Body.Close()
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	now := time.Now()
	if resp.StatusCode != http.StatusOK {
		return nil, routing.DoneInfo{Err: fmt.Errorf("proxy: prefill server %s answered %s", p.Backend.Name, resp.Status), Failure: statusFailure(resp)}
	}
	if rerr != nil {
		f := routing.FailureConnect
		if ex.ctx.Err() != nil {
			f = routing.FailureNone
		}
		return nil, routing.DoneInfo{Err: rerr, Failure: f}
	}
	info := routing.DoneInfo{FirstTokenAt: now}
	var a struct {
		Usage openaiwire.TokenUsage `json:"usage"`
	}
	if json.Unmarshal(answer, &a) == nil {
		info.PromptTokens, info.OutputTokens = a.Usage.PromptTokens, a.Usage.CompletionTokens
	}
	params, err := openaiwire.TransferParams(answer)
	if err != nil {
		// A server that prefills without keeping the KV for a decode server (not started with
		// a KV-transfer connector) cannot serve this role.
		return nil, routing.DoneInfo{Err: fmt.Errorf("%w: %w", errPrefillParams, err), Failure: routing.FailureServer}
	}
	return params, info
}

// planRoles ticks the role planner (Options.Decider a *disagg.Planner) after a scrape was
// handed to the router, and exports its roles when they changed (and at the first tick).
// Called with statesMu held.
func (h *Handler) planRoles(now time.Time) {
	n := h.planner.Plan(now, h.router)
	if n == 0 && h.planned {
		return
	}
	h.planned = true
	h.usher.AddRoleChanges(n)
	for name, role := range h.planner.Stats().Roles {
		h.usher.SetPlannedRole(name, role)
	}
}
