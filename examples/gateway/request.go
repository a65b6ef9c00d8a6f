package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/usher-llm/usher/examples/simfleet"
)

// chatRequest is what the gateway reads of an OpenAI chat or completions request. The body is
// forwarded as received, except that a streamed request is made to ask for usage (see
// prepareBody).
type chatRequest struct {
	Model         string             `json:"model"`
	Messages      []simfleet.Message `json:"messages"`
	Prompt        json.RawMessage    `json:"prompt"`
	Stream        bool               `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User                string `json:"user"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	CacheSalt           string `json:"cache_salt"`

	chat       bool   // /v1/chat/completions rather than /v1/completions
	promptText string // completions: the prompt as text ("" for token-id prompts)
	wantsUsage bool   // the client asked for the usage chunk itself
}

var errBadRequest = errors.New("invalid request")

// parseRequest validates the body of a chat (chat true) or completions request.
func parseRequest(body []byte, chat bool) (*chatRequest, error) {
	var req chatRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("%w: body is not valid JSON: %v", errBadRequest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", errBadRequest)
	}
	req.chat = chat
	if req.Model == "" {
		return nil, fmt.Errorf("%w: model is required", errBadRequest)
	}
	if chat {
		if len(req.Messages) == 0 {
			return nil, fmt.Errorf("%w: messages must be a non-empty array", errBadRequest)
		}
		for i, m := range req.Messages {
			if m.Role == "" {
				return nil, fmt.Errorf("%w: messages[%d].role is required", errBadRequest, i)
			}
			// A string content is valid JSON already (the decoder checked it); only parts
			// need a look. The tokenizer decodes each content once, later.
			if c := bytes.TrimSpace(m.Content); len(c) > 0 && c[0] != '"' {
				if _, err := m.Text(); err != nil {
					return nil, fmt.Errorf("%w: messages[%d]: %v", errBadRequest, i, err)
				}
			}
		}
	} else {
		p := bytes.TrimSpace(req.Prompt)
		if len(p) == 0 || string(p) == "null" {
			return nil, fmt.Errorf("%w: prompt is required", errBadRequest)
		}
		var s string
		var list []string
		switch {
		case json.Unmarshal(p, &s) == nil:
			req.promptText = s
		case json.Unmarshal(p, &list) == nil && len(list) == 1:
			req.promptText = list[0]
		default:
			// Token ids or several prompts: hashed as their JSON text, which is stable for
			// equal prompts.
			req.promptText = string(p)
		}
	}
	for _, n := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if n != nil && *n < 0 {
			return nil, fmt.Errorf("%w: max_tokens must not be negative", errBadRequest)
		}
	}
	req.wantsUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	return &req, nil
}

// maxOutput is the request's output budget, for the admission cost estimate.
func (r *chatRequest) maxOutput() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 256
}

// prepareBody returns the body to send upstream. A streamed request that did not ask for the
// usage chunk gets stream_options.include_usage set, so that the gateway learns the actual
// usage for fairness accounting; the gateway then drops that chunk from the client's stream.
func prepareBody(body []byte, req *chatRequest) ([]byte, error) {
	if !req.Stream || req.wantsUsage {
		return body, nil
	}
	if !bytes.Contains(body, []byte(`"stream_options"`)) {
		// The common case: splice the option in after the opening brace instead of
		// re-encoding the whole body (the prompt is most of it).
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return nil, fmt.Errorf("%w: body is not a JSON object", errBadRequest)
		}
		out := make([]byte, 0, len(body)+40)
		out = append(out, body[:i+1]...)
		out = append(out, `"stream_options":{"include_usage":true}`...)
		if rest := bytes.TrimSpace(body[i+1:]); len(rest) > 0 && rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, body[i+1:]...), nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("%w: stream_options must be an object", errBadRequest)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	fields["stream_options"] = raw
	return json.Marshal(fields)
}
