package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// This file serves Anthropic's POST /v1/messages/count_tokens: forwarded to a backend that
// serves it (vLLM does), answered from the Handler's Tokenizer where none does.

// countTokensPath is Anthropic's token-counting endpoint.
const countTokensPath = "/v1/messages/count_tokens"

// lacksCountTokensFor is how long a backend that answered 404, 405 or 501 on
// countTokensPath is not asked again.
const lacksCountTokensFor = time.Minute

// countTokensLacking holds the backends known not to serve countTokensPath, with when they
// may be asked again. It is safe for concurrent use.
type countTokensLacking struct {
	mu    sync.Mutex
	until map[string]time.Time // backend name → when to ask again
}

func (l *countTokensLacking) lacks(name string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.until[name]
	if ok && !now.Before(t) {
		delete(l.until, name)
		return false
	}
	return ok
}

func (l *countTokensLacking) note(name string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until == nil {
		l.until = make(map[string]time.Time)
	}
	l.until[name] = now.Add(lacksCountTokensFor)
}

// serveCountTokens answers POST /v1/messages/count_tokens. The body is validated as the
// input of a Messages request (Parse's rules; max_tokens, which counting does not take, is
// not required) and its model resolved, errors in Anthropic's shape naming the field. Then
// it is forwarded, byte for byte, to a backend that serves the model, picked by the router
// without admission; a backend that has no such endpoint (404, 405, 501) is skipped for a
// minute and another tried. When none answers, the count is the Handler's Tokenizer's
// Prompt.Tokens for the request: exact with a Tokenizer that counts a Messages prompt
// as the engine renders it, an estimate (4 bytes per token of the rendered prompt) with
// BytesTokenizer and EndpointTokenizer, whose /tokenize takes no Messages input.
func (h *Handler) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{h: h, ctx: r.Context(), arrival: time.Now(), ep: openai.Messages, path: countTokensPath}
	ex.rid, _ = h.requestID(r.Context())
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.timeouts.Body))
	body, e := ex.readBody(r)
	_ = rc.SetReadDeadline(time.Time{})
	if e != nil {
		if e == errBusyReading {
			w.Header().Set("Retry-After", "1")
		}
		openaiwire.WriteErrorFor(w, openai.Messages, e)
		return
	}
	req, e := parseCountTokens(body, h.limits)
	if e != nil {
		openaiwire.WriteErrorFor(w, openai.Messages, e)
		return
	}
	mi, ok := h.resolveModel(req.Model)
	if !ok {
		openaiwire.WriteErrorFor(w, openai.Messages, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest,
			Code: "model_not_found", Param: "model", Message: fmt.Sprintf("model: the model %q does not exist here", clip(req.Model))})
		return
	}
	if mi.adapter {
		req.BaseModel, req.Adapter = mi.base, req.Model
	}
	if status, answer, ok := ex.forwardCountTokens(r, body, req); ok {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		w.WriteHeader(status)
		_, _ = w.Write(answer)
		return
	}
	prompt, err := h.tokenize(r.Context(), nil, req)
	if err != nil {
		prompt, _ = BytesTokenizer{}.Tokenize(r.Context(), nil, req)
	}
	writeInputTokens(w, prompt.Tokens)
}

func writeInputTokens(w http.ResponseWriter, n int) {
	out := strconv.AppendInt([]byte(`{"input_tokens":`), int64(n), 10)
	out = append(out, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// parseCountTokens validates a count_tokens body as a Messages request's input: Parse's
// rules, but without max_tokens, which is added (the request never runs) when the body has
// none.
func parseCountTokens(body []byte, lim openai.ParseLimits) (*openai.Request, *openai.Error) {
	req, err := openai.Parse(body, openai.Messages, lim)
	if err == nil {
		return req, nil
	}
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Param != "max_tokens" || oe.Code != "missing_field" {
		return nil, asOpenAIError(err)
	}
	// Parse checks the required fields after the whole object: it is valid JSON, starting
	// with '{' and holding messages.
	rest := bytes.TrimLeft(body, " \t\r\n")[1:]
	with := make([]byte, 0, len(body)+16)
	with = append(append(with, `{"max_tokens":1,`...), rest...)
	if req, err = openai.Parse(with, openai.Messages, lim); err != nil {
		return nil, asOpenAIError(err) // max_tokens: null, given by a client that should not
	}
	return req, nil
}

// forwardCountTokens asks backends that serve req's model (at most Retry.Attempts of
// them) to count the tokens of body, and returns the answer to hand on: the count, or an
// error of the client's request (a 4xx other than 404, 405 and 429) in Anthropic's shape;
// false when no backend counted it (none serves the endpoint, or they failed).
func (ex *exchange) forwardCountTokens(in *http.Request, body []byte, req *openai.Request) (int, []byte, bool) {
	h := ex.h
	var exclude []routing.BackendID
	for range h.retry.Attempts {
		now := time.Now()
		for _, b := range h.router.Backends(nil) {
			if h.countLacking.lacks(b.Name, now) {
				if id, ok := h.router.Lookup(b.Name); ok {
					exclude = append(exclude, id)
				}
			}
		}
		p, err := h.router.Pick(&routing.Request{Model: req.Model, Adapter: req.Adapter, Exclude: exclude})
		if err != nil {
			return 0, nil, false
		}
		ex.backend = p.Backend.Name
		status, answer, done := ex.countOn(in, body)
		p.Done(routing.DoneInfo{End: time.Now()}) // counting says nothing of the backend's health
		if done {
			return status, answer, true
		}
		exclude = append(exclude, p.ID)
	}
	return 0, nil, false
}

// countOn asks ex.backend to count the tokens of body; done is false when it did not
// (no such endpoint, a failure), and the next backend or the Tokenizer should.
func (ex *exchange) countOn(in *http.Request, body []byte) (status int, answer []byte, done bool) {
	h := ex.h
	t := h.backendURL(ex.backend)
	if t == nil {
		return 0, nil, false
	}
	ctx, cancel := context.WithTimeout(in.Context(), h.timeouts.ResponseHeader)
	defer cancel()
	u := *t.URL
	u.Path = t.Path + countTokensPath
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, false
	}
	for _, k := range []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta"} {
		if v := in.Header.Values(k); len(v) > 0 {
			out.Header[k] = v
		}
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set(RequestIDHeader, ex.rid)
	pinRank(out.Header, t)
	resp, err := h.transport.RoundTrip(out)
	if err != nil {
		if in.Context().Err() == nil {
			ex.logFailure("count_tokens on a backend failed; trying another or the tokenizer", err)
		}
		return 0, nil, false
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, openaiwire.MaxBackendError+1))
	switch s := resp.StatusCode; {
	case s == http.StatusOK:
		var c struct {
			InputTokens *float64 `json:"input_tokens"`
		}
		if json.Unmarshal(raw, &c) != nil || c.InputTokens == nil || *c.InputTokens < 0 || *c.InputTokens > math.MaxInt32 ||
			*c.InputTokens != math.Trunc(*c.InputTokens) {
			ex.logBackendError(http.StatusBadGateway, raw)
			return 0, nil, false
		}
		answer = strconv.AppendInt([]byte(`{"input_tokens":`), int64(*c.InputTokens), 10)
		return http.StatusOK, append(answer, "}\n"...), true
	case s == http.StatusNotFound || s == http.StatusMethodNotAllowed || s == http.StatusNotImplemented:
		h.countLacking.note(ex.backend, time.Now())
		return 0, nil, false
	case s >= 400 && s < 500 && s != http.StatusTooManyRequests:
		ex.logBackendError(s, raw)
		e := openaiwire.BackendError(openai.Messages, s, raw, ex.redactHosts()...)
		return e.Status, append(openaiwire.AppendJSONFor(e, openai.Messages, nil), '\n'), true
	default:
		ex.logBackendError(s, raw)
		return 0, nil, false
	}
}
