package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
)

// TokenUsage is the usage object of an OpenAI answer: a whole response's, or the last chunk's of a
// stream asked for with stream_options.include_usage.
type TokenUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Cached returns the prompt tokens served from the prefix cache, at most PromptTokens (0 when
// the server did not say).
func (u TokenUsage) Cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return max(0, min(u.PromptTokensDetails.CachedTokens, u.PromptTokens))
}

// StreamChunk is what a gateway or a client reads from one chunk of a streamed completion (the
// data of one server-sent event).
type StreamChunk struct {
	// Token is true when some choice carries generated output: text (completions), content or
	// reasoning content, or tool calls (chat). A chat stream's first, role-only chunk has none.
	Token bool
	// Text is the text and content the choices carry, concatenated in order.
	Text string
	// Choices is the number of choices in the chunk (a usage-only chunk has none).
	Choices int
	// Usage is the chunk's usage object; nil when it has none or it is null.
	Usage *TokenUsage
	// Error is the message of an error chunk ({"error": {...}}), which some servers send in
	// place of the rest of a stream; empty otherwise.
	Error string
	// End is true for the event that ends a Messages or Responses stream (message_stop,
	// response.completed, an error, ...: see ParseEvent); those streams have no [DONE].
	End bool
	// ResponseID is the id of the stored response a Responses stream's last event names.
	ResponseID string
	// Started is true for a Responses stream's response.created and response.in_progress
	// events, which carry the response object as it begins (AppendResponseFailed ends a
	// broken stream with it).
	Started bool
}

// IsEventStream reports whether a Content-Type header value names a server-sent event stream
// (text/event-stream, with any parameters). O(len).
func IsEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// DoneData is the data of the event that ends a stream.
var DoneData = []byte("[DONE]")

// ErrChunk is returned (wrapped) by ParseStreamChunk for data that is not a JSON chunk.
var ErrChunk = errors.New("openai: bad stream chunk")

// ParseStreamChunk decodes the data of one server-sent event of a completion stream (not
// DoneData, which the caller checks first). Unknown fields are ignored; the usage object is
// read only under the exact key "usage", as ChunkHasUsage finds it. O(len(data)); it
// allocates what encoding/json allocates for the fields it keeps.
func ParseStreamChunk(data []byte) (StreamChunk, error) {
	var c struct {
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content          string          `json:"content"`
				ReasoningContent string          `json:"reasoning_content"`
				ToolCalls        json.RawMessage `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *TokenUsage `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return StreamChunk{}, errors.Join(ErrChunk, err)
	}
	out := StreamChunk{Usage: c.Usage, Choices: len(c.Choices)}
	if out.Usage != nil && !ChunkHasUsage(data) {
		// encoding/json matches keys case-insensitively; servers write "usage", and a reader
		// that skips chunks by ChunkHasUsage must agree with the parse.
		out.Usage = nil
	}
	if c.Error != nil {
		out.Error = c.Error.Message
		if out.Error == "" {
			out.Error = "the server reported an error"
		}
	}
	for _, ch := range c.Choices {
		text := ch.Text + ch.Delta.Content
		if text != "" || ch.Delta.ReasoningContent != "" || (len(ch.Delta.ToolCalls) > 0 && !bytes.Equal(ch.Delta.ToolCalls, []byte("null"))) {
			out.Token = true
		}
		out.Text += text
	}
	return out, nil
}

// ChunkHasUsage reports whether a chunk's data carries a usage object that is not null,
// without decoding it: a reader that has seen the first token parses only such chunks.
// O(len(data)), allocation-free. It may say true for a "usage" key nested elsewhere; the
// parse that follows settles it.
func ChunkHasUsage(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`"usage"`))
		if i < 0 {
			return false
		}
		data = data[i+len(`"usage"`):]
		v := bytes.TrimLeft(data, " \t\r\n")
		if len(v) > 0 && v[0] == ':' {
			v = bytes.TrimLeft(v[1:], " \t\r\n")
			return len(v) > 0 && v[0] == '{'
		}
	}
}
