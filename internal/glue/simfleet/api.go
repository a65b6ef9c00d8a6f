package simfleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/proxy/openai"
)

// apiError is the OpenAI-style error body vLLM returns.
type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var e apiError
	e.Error.Message, e.Error.Type, e.Error.Code = msg, typ, status
	writeJSON(w, status, e)
}

// vllmErrorType is the "type" vLLM writes in an error body of a status: the name of the
// exception class behind it.
func vllmErrorType(status int) string {
	switch status {
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusNotImplemented:
		return "NotImplementedError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf(format, args...))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decodeBody reads a JSON body into v as readBody does, answering with vLLM's errors.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	_, ok := s.decodeBodyData(w, r, v)
	return ok
}

// decodeBodyData is decodeBody that also returns the body read.
func (s *Server) decodeBodyData(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	return s.readBodyData(w, r, v, func(status int, msg string) {
		typ := "BadRequestError"
		switch status {
		case http.StatusMethodNotAllowed:
			typ = "MethodNotAllowed"
		case http.StatusRequestEntityTooLarge:
			typ = "RequestEntityTooLarge"
		}
		writeError(w, status, typ, msg)
	})
}

// readBody reads a POST body of at most Options.MaxBodyBytes into v (top-level names exact),
// answering 405, 413 or 400 through fail and reporting false when it did.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, v any, fail func(status int, msg string)) bool {
	_, ok := s.readBodyData(w, r, v, fail)
	return ok
}

// readBodyData is readBody that also returns the body read.
func (s *Server) readBodyData(w http.ResponseWriter, r *http.Request, v any, fail func(status int, msg string)) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "Method Not Allowed")
		return nil, false
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err == nil {
		err = decodeExact(data, v)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.maxBody))
			return nil, false
		}
		fail(http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return nil, false
	}
	return data, true
}

// decodeExact decodes a JSON object into the struct v matching top-level field names exactly,
// as vLLM (pydantic) does: a key that differs from a field's JSON name only in case, such as
// "STREAM", is an unknown field and ignored, where encoding/json alone would take it for
// "stream". Fields inside nested values are matched by encoding/json's rules.
func decodeExact(data []byte, v any) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	names := jsonNames(reflect.TypeOf(v).Elem())
	for k := range fields {
		if !names[k] {
			delete(fields, k)
		}
	}
	exact, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return json.Unmarshal(exact, v)
}

var jsonNameCache sync.Map // reflect.Type → map[string]bool

// jsonNames returns the JSON names of a struct type's fields.
func jsonNames(t reflect.Type) map[string]bool {
	if m, ok := jsonNameCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name != "-" {
			m[name] = true
		}
	}
	jsonNameCache.Store(t, m)
	return m
}

// checkModel answers 404 for another model than the served one; an empty name means the
// served model, as vLLM allows.
func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if !s.serves(model) {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model))
		return false
	}
	return true
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	KVTransferParams    json.RawMessage `json:"kv_transfer_params"`
}

// promptTokens turns a completions prompt (a string, one string in an array, or token ids)
// into tokens.
func promptTokens(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("prompt is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return Tokenize(text), nil
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil {
		if len(texts) != 1 {
			return nil, fmt.Errorf("the simulator serves one prompt per request, got %d", len(texts))
		}
		return Tokenize(texts[0]), nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var batches [][]uint32
	if err := json.Unmarshal(raw, &batches); err == nil && len(batches) == 1 {
		return batches[0], nil
	}
	return nil, errors.New("prompt must be a string, an array of one string, or an array of token ids")
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	data, ok := s.decodeBodyData(w, r, &req)
	if !ok || !s.checkModel(w, req.Model) {
		return
	}
	if len(req.Messages) == 0 {
		badRequest(w, "messages must not be empty")
		return
	}
	tokens, err := s.promptOf(openai.Chat, data, func() (string, error) {
		return RenderChat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	})
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	s.complete(w, r, &req, tokens, true)
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.decodeBody(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	tokens, err := promptTokens(req.Prompt)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	s.complete(w, r, &req, tokens, false)
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choice struct {
	Index        int          `json:"index"`
	Text         *string      `json:"text,omitempty"`    // completions
	Delta        *delta       `json:"delta,omitempty"`   // chat chunks
	Message      *responseMsg `json:"message,omitempty"` // chat responses
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
	StopReason   any          `json:"stop_reason"` // always null: no stop strings
}

type responseMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
	// KVTransferParams answers a prefill request of disaggregated serving (disagg.go).
	KVTransferParams map[string]any `json:"kv_transfer_params,omitempty"`
}

// complete runs one completion through the engine and writes the answer, streamed or whole.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, req *completionRequest, prompt []uint32, chat bool) {
	if len(prompt) == 0 {
		badRequest(w, "the prompt is empty")
		return
	}
	if req.N != nil && *req.N != 1 {
		badRequest(w, "the simulator serves n=1 only, got n=%d", *req.N)
		return
	}
	kvp, err := parseTransferParams(req.KVTransferParams)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	maxLen := s.profile.MaxModelLen
	limit := req.MaxCompletionTokens
	if limit == nil {
		limit = req.MaxTokens
	}
	if limit != nil && *limit < 1 {
		badRequest(w, "max_tokens must be at least 1, got %d", *limit)
		return
	}
	room := maxLen - len(prompt)
	if limit != nil && *limit > room || room < 1 {
		asked := 1
		if limit != nil {
			asked = *limit
		}
		badRequest(w, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, len(prompt)+asked, len(prompt), asked)
		return
	}
	maxOut := room
	if limit != nil {
		maxOut = *limit
	}
	n, reason := naturalLength(prompt, s.minAnswer, s.maxAnswer), "stop"
	n = max(n, req.MinTokens)
	if req.IgnoreEOS || n >= maxOut {
		n, reason = maxOut, "length"
	}
	pieces := answer(make([]string, 0, n), prompt, n)
	out := make([]uint32, n)
	for i, p := range pieces {
		out[i] = tokenID(p)
	}
	remote := false
	if kvp != nil && kvp.DoRemotePrefill {
		s.kv.decodes.Add(1)
		if remote, err = s.pull(r.Context(), kvp, prompt); err != nil {
			return // the client left during the transfer
		}
	}
	adapter := s.adapterOf(req.Model)
	id, st, err := s.submit(engine.Request{Prompt: prompt, Output: out, OutputTokens: n, RemotePrefill: remote, Adapter: adapter}, reason)
	switch {
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
		return
	case err != nil:
		badRequest(w, "%v", err)
		return
	}
	object, prefix := "text_completion", "cmpl-"
	if chat {
		object, prefix = "chat.completion", "chatcmpl-"
	}
	resp := response{
		ID:      fmt.Sprintf("%s%016x", prefix, uint64(id)*0x9e3779b97f4a7c15^s.idSalt),
		Object:  object,
		Created: time.Now().Unix(),
		Model:   s.modelName(adapter),
	}
	if req.Stream {
		s.stream(w, r, id, st, &resp, pieces, reason, chat, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, len(prompt))
		return
	}

	var evs []engine.Event
	cached, produced := 0, 0
	for {
		var ok bool
		evs, ok = s.take(r.Context(), st, evs[:0])
		if !ok {
			s.abort(id)
			return
		}
		for _, ev := range evs {
			switch ev.Kind {
			case engine.EventStarted:
				cached = ev.Tokens
			case engine.EventToken:
				produced = ev.Tokens
			case engine.EventAborted:
				writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the request was aborted: the server is shutting down")
				return
			case engine.EventFinished:
				text := strings.Join(pieces[:produced], "")
				c := choice{FinishReason: &reason}
				if chat {
					c.Message = &responseMsg{Role: "assistant", Content: text}
				} else {
					c.Text = &text
				}
				resp.Choices = []choice{c}
				resp.Usage = makeUsage(len(prompt), produced, cached)
				if kvp != nil && kvp.DoRemoteDecode {
					resp.KVTransferParams = s.prefillParams(r, len(prompt))
				}
				writeJSON(w, http.StatusOK, resp)
				return
			}
		}
	}
}

func makeUsage(prompt, completion, cached int) *usage {
	u := &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails.CachedTokens = cached
	return u
}

// stream writes the answer as server-sent events the way vLLM does: for chat, a first chunk
// with the assistant role, then one chunk per token, the last with its finish_reason; a usage
// chunk with no choices when stream_options.include_usage is set; then data: [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id engine.RequestID, st *stream, resp *response,
	pieces []string, reason string, chat, includeUsage bool, promptLen int) {
	if chat {
		resp.Object = "chat.completion.chunk"
	}
	rc := startEvents(w)
	var buf bytes.Buffer
	emit := func(c *choice, u *usage) {
		resp.Choices = resp.Choices[:0]
		if c != nil {
			resp.Choices = append(resp.Choices, *c)
		}
		resp.Usage = u
		b, _ := json.Marshal(resp)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	resp.Choices = make([]choice, 0, 1)
	var evs []engine.Event
	cached, produced := 0, 0
	for {
		var ok bool
		evs, ok = s.take(r.Context(), st, evs[:0])
		if !ok {
			s.abort(id)
			return
		}
		buf.Reset()
		for _, ev := range evs {
			switch ev.Kind {
			case engine.EventStarted:
				cached = ev.Tokens
			case engine.EventToken:
				produced = ev.Tokens
				text := pieces[ev.Tokens-1]
				c := choice{}
				if chat {
					if ev.Tokens == 1 {
						empty := ""
						emit(&choice{Delta: &delta{Role: "assistant", Content: &empty}}, nil)
					}
					c.Delta = &delta{Content: &text}
				} else {
					c.Text = &text
				}
				if ev.Tokens == len(pieces) {
					c.FinishReason = &reason
				}
				emit(&c, nil)
			case engine.EventFinished:
				if includeUsage {
					emit(nil, makeUsage(promptLen, produced, cached))
				}
				buf.WriteString("data: [DONE]\n\n")
			case engine.EventAborted:
				var e apiError
				e.Error.Message, e.Error.Type, e.Error.Code = "the request was aborted: the server is shutting down", "ServiceUnavailableError", http.StatusServiceUnavailable
				b, _ := json.Marshal(e)
				buf.WriteString("data: ")
				buf.Write(b)
				buf.WriteString("\n\ndata: [DONE]\n\n")
			}
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			s.abort(id)
			return
		}
		_ = rc.Flush()
		if n := len(evs); n > 0 && (evs[n-1].Kind == engine.EventFinished || evs[n-1].Kind == engine.EventAborted) {
			return
		}
	}
}

// startEvents starts a server-sent event answer: its headers and status 200, flushed.
func startEvents(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return rc
}

// eventWriter writes the named events of a Messages or Responses stream: they gather in
// buf, and flush writes them out after each batch of the engine's events.
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

// newEventWriter starts the stream (startEvents).
func newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: startEvents(w)}
}

// event adds the event name with v, in JSON, as its data.
func (e *eventWriter) event(name string, v any) {
	b, _ := json.Marshal(v)
	e.buf.WriteString("event: " + name + "\ndata: ")
	e.buf.Write(b)
	e.buf.WriteString("\n\n")
}

// flush writes out the events added since the last flush, and flushes; it is a
// genEvents.batch.
func (e *eventWriter) flush() error {
	if e.buf.Len() == 0 {
		return nil
	}
	_, err := e.w.Write(e.buf.Bytes())
	e.buf.Reset()
	if err == nil {
		err = e.rc.Flush()
	}
	return err
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "Method Not Allowed")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{"list", s.modelCards()})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "the server is shutting down")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": "usher-simfleet"})
}

// handleTokenize serves vLLM's POST /tokenize: {model, prompt} or {model, messages} gives
// {count, max_model_len, tokens, token_strs}; messages are rendered by the chat template with
// the generation prompt unless add_generation_prompt is false.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model               string    `json:"model"`
		Prompt              *string   `json:"prompt"`
		Messages            []Message `json:"messages"`
		AddGenerationPrompt *bool     `json:"add_generation_prompt"`
	}
	data, ok := s.decodeBodyData(w, r, &req)
	if !ok || !s.checkModel(w, req.Model) {
		return
	}
	if s.table != nil {
		// Table mode: chat messages are looked up as a Chat request of those messages
		// (TableKey reads only the fields that make the prompt); a text prompt is not in it.
		if req.Messages == nil {
			badRequest(w, "%v", errNotInTable)
			return
		}
		tokens, err := s.table.lookup(openai.Chat, data)
		if err != nil {
			badRequest(w, "%v", err)
			return
		}
		writeTokenize(w, tokens, s.profile.MaxModelLen)
		return
	}
	var text string
	switch {
	case req.Prompt != nil && req.Messages != nil:
		badRequest(w, "give either prompt or messages, not both")
		return
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Messages != nil:
		var err error
		if text, err = RenderChat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt); err != nil {
			badRequest(w, "%v", err)
			return
		}
	default:
		badRequest(w, "prompt or messages is required")
		return
	}
	writeTokenize(w, Tokenize(text), s.profile.MaxModelLen)
}

func writeTokenize(w http.ResponseWriter, tokens []uint32, maxModelLen int) {
	writeJSON(w, http.StatusOK, struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
		TokenStrs   any      `json:"token_strs"`
	}{len(tokens), maxModelLen, tokens, nil})
}
