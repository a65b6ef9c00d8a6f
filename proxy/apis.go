package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/internal/homes"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// This file holds what the Messages, Responses and Embeddings APIs add to the pipeline:
// their prompts' hashing, their streams' events, and the homes of stored responses.

// tokenize hashes the request's prompt. Embeddings are routed by load only: no chain, their
// size estimated at four bytes of input per token. A Messages or Responses request is
// hashed by bytes when the Tokenizer asks servers' /tokenize, which takes only chat
// messages or a prompt.
func (h *Handler) tokenize(ctx context.Context, dst []prefixcache.BlockHash, req *openai.Request) (Prompt, error) {
	switch req.API {
	case openai.Embeddings:
		return Prompt{Chain: dst, Tokens: max(1, len(req.Input)/4)}, nil
	case openai.Messages, openai.Responses:
		if _, ok := h.tok.(*EndpointTokenizer); ok {
			return BytesTokenizer{}.Tokenize(ctx, dst, req)
		}
	}
	return h.tok.Tokenize(ctx, dst, req)
}

// followPrevious points a Responses request that continues a stored response at the backend
// that stored it: the others are excluded from its pick (and its retries, which then have
// nowhere else to go), and the conversation keeps its session. A response this gateway did
// not see stored (another replica's, or one forgotten) is routed like any other request; the
// backend it reaches answers whether it knows it. A response whose backend has left the
// fleet is answered 404 here rather than sent where it cannot be known.
// O(backends) with a home, O(1) without.
func (ex *exchange) followPrevious(req *openai.Request) *openai.Error {
	hm, ok := ex.h.homes.Get(homes.Key(ex.id.Tenant, req.PreviousResponseID))
	if !ok {
		return nil
	}
	if ex.id.Session == "" {
		ex.id.Session = hm.Session
	}
	r := ex.h.router
	found := false
	for _, b := range r.Backends(nil) {
		if b.Name == hm.Backend {
			found = true
		} else if oid, ok := r.Lookup(b.Name); ok {
			ex.tried = append(ex.tried, oid)
		}
	}
	if !found {
		ex.tried = nil
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "previous_response_not_found",
			Param: "previous_response_id", Message: fmt.Sprintf(
				"the response %q named by previous_response_id was stored by a backend that is no longer in the fleet; start the conversation again",
				clip(req.PreviousResponseID))}
	}
	if ex.tried == nil {
		ex.tried = []routing.BackendID{} // non-nil: the pick is pinned
	}
	return nil
}

// errPreviousUnavailable answers a request pinned to the backend of its previous response
// when that backend cannot take it now (unhealthy, ejected, draining).
func errPreviousUnavailable(req *openai.Request) *openai.Error {
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "previous_response_unavailable",
		Param: "previous_response_id", Message: fmt.Sprintf(
			"the backend that stored the response %q named by previous_response_id cannot take requests now; retry later",
			clip(req.PreviousResponseID))}
}

// remember notes the backend that stored the response id the answer named, when the
// request asked for it to be stored.
func (ex *exchange) remember(id string) {
	if ex.req == nil || !ex.req.Store || id == "" {
		return
	}
	s := ex.id.Session
	if s == "" {
		s = id // the chain's first response names its conversation
	}
	ex.mu.Lock()
	backend := ex.backend
	ex.mu.Unlock()
	ex.h.homes.Put(homes.Key(ex.id.Tenant, id), homes.Home{Backend: backend, Session: s})
}

// readAnswer reads the usage and the response id of a whole Messages, Responses or
// Embeddings answer.
func (ex *exchange) readAnswer(body []byte) {
	a, err := openaiwire.ParseAnswer(ex.ep, body)
	if err != nil {
		return
	}
	if a.Usage != nil {
		ex.setUsage(*a.Usage)
	}
	ex.remember(a.ResponseID)
}

// mergeUsage records usage from a stream event; a count of prompt tokens of 0 (Anthropic's
// message_delta) keeps those an earlier event reported.
func (ex *exchange) mergeUsage(u openaiwire.TokenUsage) {
	if u.PromptTokens == 0 {
		ex.mu.Lock()
		prompt, cached := ex.info.PromptTokens, int(ex.usage.CachedTokens)
		ex.mu.Unlock()
		if prompt > 0 {
			u.PromptTokens = prompt
			u.PromptTokensDetails = &struct {
				CachedTokens int `json:"cached_tokens"`
			}{cached}
		}
	}
	ex.setUsage(u)
}

// handleAPI looks at one event (ev, its data) of a Messages or Responses stream and reports
// whether the client gets it as it is. A Responses stream's events are numbered on
// (sequence_number) and its response.created kept, so that a stream that breaks, or whose
// backend reports an error event without response.failed, ends as OpenAI's do: the error
// event, then response.failed. An error the backend writes as an OpenAI chunk
// ({"error": ...}) is translated into the API's events.
func (t *sseTap) handleAPI(ev, data []byte) bool {
	responses := t.ex.ep == openai.Responses
	if responses {
		if n, ok := openaiwire.SequenceNumber(data); ok {
			t.seq = max(t.seq, n+1)
		} else {
			t.seq++
		}
	}
	if t.sawFirst && openaiwire.IsDeltaEvent(data) {
		t.chunks++ // after the first token, text deltas need no parsing
		return true
	}
	c, err := openaiwire.ParseEvent(t.ex.ep, data)
	if err != nil {
		return true
	}
	if c.Token {
		t.token()
	}
	if c.Usage != nil {
		t.ex.mergeUsage(*c.Usage)
	}
	if c.Started && len(data) <= maxStartedEvent {
		if t.startedp == nil {
			t.startedp = tapBufs.Get().(*[]byte)
			t.started = (*t.startedp)[:0]
		}
		t.started = append(t.started[:0], data...)
	}
	switch {
	case c.Error != "":
		t.ex.setErr(errors.New("proxy: the backend reported an error in its stream"), routing.FailureServer)
		if responses && eventType(data) == "error" {
			t.failAfter(ev, data)
			t.last()
			return false
		}
	case c.ResponseID != "":
		t.ex.remember(c.ResponseID)
	case !c.End && bytes.HasPrefix(data, []byte(`{"error"`)):
		t.ex.setErr(errors.New("proxy: the backend reported an error in its stream"), routing.FailureServer)
		t.streamError(data)
		t.last()
		return false
	}
	if c.End {
		t.last()
	}
	return true
}

// maxStartedEvent bounds the response.created event a Responses stream's tap keeps.
const maxStartedEvent = 256 << 10

// failAfter hands on a Responses stream's error event (numbered if the backend did not
// number it) and the response.failed that follows it in OpenAI's streams.
func (t *sseTap) failAfter(ev, data []byte) {
	t.ex.logBackendError(0, data)
	e, seq, ok := openaiwire.ResponsesErrorEvent(data, t.ex.redactHosts()...)
	if ok {
		t.out = append(t.out, ev...)
	} else {
		t.out = openaiwire.AppendResponsesError(t.out, e, t.seq-1) // the number counted for it
	}
	t.seq = max(t.seq, seq+1)
	t.out = openaiwire.AppendResponseFailed(t.out, e, t.seq, t.started, t.failedStub())
	t.seq++
}

// failedStub is the response a response.failed names when the stream showed none.
func (t *sseTap) failedStub() openaiwire.FailedResponse {
	f := openaiwire.FailedResponse{ID: "resp_" + t.ex.rid, CreatedAt: t.ex.arrival.Unix()}
	if t.ex.req != nil {
		f.Model = t.ex.req.Model
	}
	return f
}

// eventType returns the "type" of an event's data ("" if it has none). It allocates; it
// runs only on an error event.
func eventType(data []byte) string {
	var e struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &e)
	return e.Type
}
