package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/usher-llm/usher/proxy/openai"
)

// This file reads what servers answer on the Messages, Responses and Embeddings endpoints —
// usage, the first token, the end of a stream, a stored response's id — each in its own
// API's shape, and writes errors in each API's shape.

// maxCount bounds a token count read from an answer, so that sums cannot overflow.
const maxCount = 1 << 40

func clampCount(p *int) int {
	if p == nil {
		return 0
	}
	return max(0, min(*p, maxCount))
}

// anthropicUsage is the usage object of Anthropic's Messages API.
type anthropicUsage struct {
	InputTokens   *int `json:"input_tokens"`
	OutputTokens  *int `json:"output_tokens"`
	CacheRead     *int `json:"cache_read_input_tokens"`
	CacheCreation *int `json:"cache_creation_input_tokens"`
}

// usage converts it: prompt tokens are input, cache reads and cache writes together; the
// cached ones are the cache reads.
func (a *anthropicUsage) usage() *TokenUsage {
	if a == nil {
		return nil
	}
	u := &TokenUsage{
		PromptTokens:     clampCount(a.InputTokens) + clampCount(a.CacheRead) + clampCount(a.CacheCreation),
		CompletionTokens: clampCount(a.OutputTokens),
	}
	u.PromptTokensDetails = &struct {
		CachedTokens int `json:"cached_tokens"`
	}{clampCount(a.CacheRead)}
	return u
}

// responsesUsage is the usage object of OpenAI's Responses API.
type responsesUsage struct {
	InputTokens  *int `json:"input_tokens"`
	OutputTokens *int `json:"output_tokens"`
	Details      *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (r *responsesUsage) usage() *TokenUsage {
	if r == nil {
		return nil
	}
	u := &TokenUsage{PromptTokens: clampCount(r.InputTokens), CompletionTokens: clampCount(r.OutputTokens)}
	if r.Details != nil {
		u.PromptTokensDetails = &struct {
			CachedTokens int `json:"cached_tokens"`
		}{clampCount(r.Details.CachedTokens)}
	}
	return u
}

// Answer is what a gateway reads of a successful whole (not streamed) answer.
type Answer struct {
	// Usage is the answer's usage in OpenAI's terms (prompt, completion and cached prompt
	// tokens); nil when the answer has none.
	Usage *TokenUsage
	// ResponseID is a Responses answer's "id": the name under which the server stored it,
	// for a later previous_response_id. "" otherwise.
	ResponseID string
}

// ErrAnswer is returned (wrapped) by ParseAnswer for an answer that is not a JSON object.
var ErrAnswer = errors.New("openai: bad answer")

// ParseAnswer reads a successful whole answer to ep in that API's shape: for Chat,
// Completions and Embeddings the OpenAI "usage" (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens); for Messages Anthropic's "usage" (prompt tokens are
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens, cached tokens the
// cache reads); for Responses its "usage" (input_tokens, output_tokens,
// input_tokens_details.cached_tokens) and "id". Counts are clamped to [0, 2^40].
// It is safe for concurrent use, O(len(body)), and allocates what encoding/json does.
func ParseAnswer(ep openai.API, body []byte) (Answer, error) {
	var a Answer
	var err error
	switch ep {
	case openai.Messages:
		var m struct {
			Usage *anthropicUsage `json:"usage"`
		}
		if err = json.Unmarshal(body, &m); err == nil {
			a.Usage = m.Usage.usage()
		}
	case openai.Responses:
		var r struct {
			ID    string          `json:"id"`
			Usage *responsesUsage `json:"usage"`
		}
		if err = json.Unmarshal(body, &r); err == nil {
			a.Usage, a.ResponseID = r.Usage.usage(), r.ID
		}
	default:
		var o struct {
			Usage *TokenUsage `json:"usage"`
		}
		if err = json.Unmarshal(body, &o); err == nil {
			a.Usage = o.Usage
		}
	}
	if err != nil {
		return Answer{}, errors.Join(ErrAnswer, err)
	}
	return a, nil
}

// ParseEvent decodes the data of one server-sent event of a stream answering ep (not
// DoneData). For Chat and Completions it is ParseStreamChunk. For Messages and Responses it
// reads the event's "type":
//
//   - Messages: "message_start" gives message.usage (the prompt's counts); a
//     "content_block_delta" is a token; "message_delta" gives usage.output_tokens
//     (cumulative; PromptTokens is 0 unless the event repeats the input counts: keep
//     message_start's); "message_stop" ends the stream; "error" is an error (and the end).
//   - Responses: a "response.*.delta" event with a non-empty delta is a token;
//     "response.completed" and "response.incomplete" end the stream with
//     response.usage and response.id; "response.failed" and "error" are errors;
//     "response.created" and "response.in_progress" are Started.
//
// Other events ("ping", "content_block_start", "response.created", ...) come back empty.
// Usage is converted as ParseAnswer does. Safe for concurrent use; O(len(data)).
func ParseEvent(ep openai.API, data []byte) (StreamChunk, error) {
	switch ep {
	case openai.Messages:
		return parseAnthropicEvent(data)
	case openai.Responses:
		return parseResponsesEvent(data)
	}
	return ParseStreamChunk(data)
}

func parseAnthropicEvent(data []byte) (StreamChunk, error) {
	var e struct {
		Type    string `json:"type"`
		Message *struct {
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
		Delta *struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Thinking string `json:"thinking"`
			JSON     string `json:"partial_json"`
		} `json:"delta"`
		Usage *anthropicUsage `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return StreamChunk{}, errors.Join(ErrChunk, err)
	}
	var c StreamChunk
	switch e.Type {
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			c.Usage = e.Message.Usage.usage()
			c.Usage.CompletionTokens = 0 // message_start's output count is a placeholder
		}
	case "content_block_delta":
		if e.Delta != nil {
			c.Text = e.Delta.Text
			c.Token = e.Delta.Text != "" || e.Delta.Thinking != "" || e.Delta.JSON != ""
		}
	case "message_delta":
		c.Usage = e.Usage.usage()
	case "message_stop":
		c.End = true
	case "error":
		c.Error, c.End = "the server reported an error", true
		if e.Error != nil && e.Error.Message != "" {
			c.Error = e.Error.Message
		}
	}
	return c, nil
}

func parseResponsesEvent(data []byte) (StreamChunk, error) {
	var e struct {
		Type     string `json:"type"`
		Delta    string `json:"delta"`
		Message  string `json:"message"`
		Response *struct {
			ID    string          `json:"id"`
			Usage *responsesUsage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return StreamChunk{}, errors.Join(ErrChunk, err)
	}
	var c StreamChunk
	switch t := e.Type; {
	case t == "response.created" || t == "response.in_progress":
		c.Started = true
	case t == "response.completed" || t == "response.incomplete":
		c.End = true
		if e.Response != nil {
			c.Usage, c.ResponseID = e.Response.Usage.usage(), e.Response.ID
		}
	case t == "response.failed":
		c.End, c.Error = true, "the response failed"
		if e.Response != nil && e.Response.Error != nil && e.Response.Error.Message != "" {
			c.Error = e.Response.Error.Message
		}
	case t == "error":
		c.End, c.Error = true, "the server reported an error"
		if e.Message != "" {
			c.Error = e.Message
		}
	case len(t) > len(".delta") && t[len(t)-len(".delta"):] == ".delta":
		c.Token = e.Delta != ""
		if t == "response.output_text.delta" {
			c.Text = e.Delta
		}
	}
	return c, nil
}

// deltaPrefixes start the data of the events that only carry generated text, as servers
// write them (the type first).
var deltaPrefixes = [...][]byte{
	[]byte(`{"type":"content_block_delta"`),
	[]byte(`{"type":"response.output_text.delta"`),
	[]byte(`{"type":"response.reasoning_text.delta"`),
	[]byte(`{"type":"response.function_call_arguments.delta"`),
}

// IsDeltaEvent reports whether data is, by its first bytes, a Messages or Responses event
// that only carries generated output (a content block's or an output text's delta): one that
// a reader who has seen the first token need not parse, since it holds no usage, no end
// and no error. False means "parse it". O(1), allocation-free.
func IsDeltaEvent(data []byte) bool {
	for _, p := range deltaPrefixes {
		if bytes.HasPrefix(data, p) {
			return true
		}
	}
	return false
}

// Anthropic error types, the "type" of an Anthropic error body.
const (
	anthropicInvalid    = "invalid_request_error"
	anthropicAuth       = "authentication_error"
	anthropicBilling    = "billing_error"
	anthropicPermission = "permission_error"
	anthropicNotFound   = "not_found_error"
	anthropicTooLarge   = "request_too_large"
	anthropicRateLimit  = "rate_limit_error"
	anthropicAPI        = "api_error"
	anthropicOverloaded = "overloaded_error"
	anthropicTimeout    = "timeout_error"
)

// anthropicType returns the Anthropic error type of the error's status (see AppendJSONFor).
func anthropicType(e *openai.Error) string {
	switch s := e.Status; {
	case s == http.StatusUnauthorized:
		return anthropicAuth
	case s == http.StatusPaymentRequired:
		return anthropicBilling
	case s == http.StatusForbidden:
		return anthropicPermission
	case s == http.StatusNotFound:
		return anthropicNotFound
	case s == http.StatusRequestEntityTooLarge:
		return anthropicTooLarge
	case s == http.StatusTooManyRequests:
		return anthropicRateLimit
	case s == http.StatusServiceUnavailable || s == 529:
		return anthropicOverloaded
	case s == http.StatusGatewayTimeout:
		return anthropicTimeout
	case s >= 500:
		return anthropicAPI
	}
	return anthropicInvalid
}

// AppendJSONFor appends the error body in the shape of ep's API, without a trailing
// newline: for Messages Anthropic's
//
//	{"type":"error","error":{"type":"invalid_request_error","message":"..."}}
//
// with its type from the status — 401 authentication_error, 402 billing_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 503
// and 529 overloaded_error, 504 timeout_error, another 5xx api_error, else
// invalid_request_error.
// Param and Code have no place there; the messages usher writes name the field. For every
// other endpoint it is AppendJSON. O(len(Message)+len(Param)+len(Type)+len(Code)).
func AppendJSONFor(e *openai.Error, ep openai.API, dst []byte) []byte {
	if ep != openai.Messages {
		return AppendJSON(e, dst)
	}
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = appendQuoted(dst, anthropicType(e))
	dst = append(dst, `,"message":`...)
	dst = appendQuoted(dst, e.Message)
	return append(dst, "}}"...)
}

// AppendEventFor appends the error as a server-sent event of ep's streams: for Messages
// "event: error" with AppendJSONFor's body, for Responses "event: error" with the
// Responses API's error event {"type":"error","code":...,"message":...,"param":...}, for
// Chat and Completions AppendEvent. O(as AppendJSONFor).
func AppendEventFor(e *openai.Error, ep openai.API, dst []byte) []byte {
	switch ep {
	case openai.Messages:
		dst = append(dst, "event: error\ndata: "...)
		dst = AppendJSONFor(e, ep, dst)
		return append(dst, "\n\n"...)
	case openai.Responses:
		dst = append(dst, `event: error`+"\n"+`data: {"type":"error","code":`...)
		code := e.Code
		if code == "" {
			code = e.Type
		}
		dst = appendNullable(dst, code)
		dst = append(dst, `,"message":`...)
		dst = appendQuoted(dst, e.Message)
		dst = append(dst, `,"param":`...)
		dst = appendNullable(dst, e.Param)
		return append(dst, "}\n\n"...)
	}
	return AppendEvent(e, dst)
}

// WriteErrorFor writes e as the response in the shape of ep's API (AppendJSONFor), as
// WriteError does for OpenAI's. It must be called before anything else is written to w.
func WriteErrorFor(w http.ResponseWriter, ep openai.API, e *openai.Error) {
	if ep != openai.Messages {
		WriteError(w, e)
		return
	}
	status := e.Status
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	body := AppendJSONFor(e, ep, make([]byte, 0, 96+len(e.Message)))
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
