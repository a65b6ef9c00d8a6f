package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/usher-llm/usher/proxy/tokenizer/internal/jinja"
)

// ErrNoChatTemplate is returned by [Encoder.RenderChat] when the model's
// tokenizer_config.json has no chat_template.
var ErrNoChatTemplate = errors.New("tokenizer: the model has no chat template")

// Conversation is what a model's chat template renders: the arguments of transformers'
// apply_chat_template. Its JSON form is the OpenAI chat shape ("messages",
// "tools", "add_generation_prompt", "chat_template_kwargs").
//
// RenderChat renders a Conversation as given, as transformers does. vLLM changes a request's
// messages before it renders them (content parts joined, tool-call arguments decoded):
// [Encoder.ConversationOf] builds the Conversation vLLM renders for a parsed request of any of the three
// APIs.
//
// A Conversation is plain data: RenderChat reads it and does not keep or modify it, so one
// may be rendered by several goroutines at once.
type Conversation struct {
	Messages []Message `json:"messages"`
	// Tools are the tool definitions as JSON objects, {"type": "function", "function":
	// {...}}; the template sees none (None) when there are none.
	Tools               []json.RawMessage `json:"tools,omitempty"`
	AddGenerationPrompt bool              `json:"add_generation_prompt,omitempty"`
	// ContinueFinalMessage cuts the rendering after the last message's content, as
	// transformers' continue_final_message does, so that the model continues it.
	ContinueFinalMessage bool `json:"continue_final_message,omitempty"`
	// Kwargs are the template's extra variables (vLLM's chat_template_kwargs): Qwen3's
	// enable_thinking, GPT-OSS's reasoning_effort, builtin_tools and model_identity, and
	// whatever else a template reads. Each value is JSON.
	Kwargs map[string]json.RawMessage `json:"chat_template_kwargs,omitempty"`
	// Now is the time strftime_now formats; the zero Time means the time of the call.
	Now time.Time `json:"-"`
}

// Message is one chat message. A field at its zero value is absent from the message the
// template sees ("name" in message is false), except Role.
type Message struct {
	Role string `json:"role"`
	// Content is the raw JSON value of the content: a string, an array of content parts
	// ({"type": "text", "text": ...}), or null; nil when absent.
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// Reasoning and ReasoningContent are the assistant's reasoning under the two keys
	// templates read; vLLM sets both from a request's "reasoning".
	Reasoning        string `json:"reasoning,omitempty"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// ToolCall is a call an assistant message made. Function.Arguments is the raw JSON
// value of the arguments: templates see a string when it is a JSON string (the OpenAI
// wire form) and an object when it is an object.
type ToolCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	} `json:"function"`
}

// chatTemplate is a model's parsed chat template and the special tokens
// tokenizer_config.json gives it.
type chatTemplate struct {
	tmpl    *jinja.Template // nil when the config has none
	special []specialToken  // in transformers' SPECIAL_TOKENS_ATTRIBUTES order
	parts   bool            // the template loops over message content (vLLM's "openai" content format)
}

type specialToken struct {
	name  string
	value any // string, or []any of strings (additional_special_tokens)
}

// specialTokenNames are transformers' SPECIAL_TOKENS_ATTRIBUTES: the special_tokens_map
// apply_chat_template passes to the template holds those of them that are set.
var specialTokenNames = [...]string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"}

// newChatTemplate parses tokenizer_config.json's chat_template and special tokens. A
// config without a chat template is not an error (RenderChat then fails); an empty
// config is allowed. A chat_template given as a list of named templates uses the one
// named "default", as transformers does.
func newChatTemplate(configJSON []byte) (*chatTemplate, error) {
	ct := &chatTemplate{}
	if len(configJSON) == 0 {
		return ct, nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	for _, name := range specialTokenNames {
		raw, ok := cfg[name]
		if !ok {
			continue
		}
		v, err := specialValue(raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %s: %w", name, err)
		}
		if v != nil {
			ct.special = append(ct.special, specialToken{name, v})
		}
	}
	src, err := templateSource(cfg["chat_template"])
	if err != nil {
		return nil, err
	}
	if src == "" {
		return ct, nil
	}
	if ct.tmpl, err = jinja.Parse(src); err != nil {
		return nil, fmt.Errorf("tokenizer: chat_template: %w", err)
	}
	ct.parts = ct.tmpl.IteratesContent()
	return ct, nil
}

// specialValue reads a special token: a string, an AddedToken object ({"content": ...}),
// or, for additional_special_tokens, a list of those. It returns nil for null, "" and [],
// which transformers leaves out of special_tokens_map.
func specialValue(raw json.RawMessage) (any, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return s, nil
	}
	var tok struct {
		Content *string `json:"content"`
	}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &tok); err != nil || tok.Content == nil {
			return nil, errors.New("neither a string nor an AddedToken")
		}
		if *tok.Content == "" {
			return nil, nil
		}
		return *tok.Content, nil
	}
	var list []json.RawMessage
	if len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(list))
		for _, e := range list {
			v, err := specialValue(e)
			if err != nil {
				return nil, err
			}
			if v != nil {
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	if string(raw) == "null" {
		return nil, nil
	}
	return nil, errors.New("neither a string nor an AddedToken")
}

func templateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("tokenizer: chat_template is neither a string nor a list of named templates: %w", err)
	}
	for _, t := range named {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return "", nil
}

// render appends the rendering of c to dst.
func (ct *chatTemplate) render(dst []byte, c *Conversation) ([]byte, error) {
	if ct == nil || ct.tmpl == nil {
		return dst, ErrNoChatTemplate
	}
	vars := make(map[string]any, len(ct.special)+len(c.Kwargs)+6)
	for _, s := range ct.special {
		vars[s.name] = s.value
	}
	msgs := make([]any, len(c.Messages))
	for i := range c.Messages {
		m, err := messageValue(&c.Messages[i])
		if err != nil {
			return dst, fmt.Errorf("tokenizer: message %d: %w", i, err)
		}
		msgs[i] = m
	}
	vars["messages"] = msgs
	var tools any // None when absent, as apply_chat_template passes it
	if len(c.Tools) > 0 {
		list := make([]any, len(c.Tools))
		for i, t := range c.Tools {
			v, err := jinja.ParseJSON(t)
			if err != nil {
				return dst, fmt.Errorf("tokenizer: tool %d: %w", i, err)
			}
			list[i] = v
		}
		tools = list
	}
	vars["tools"] = tools
	vars["documents"] = nil
	vars["add_generation_prompt"] = c.AddGenerationPrompt
	for k, raw := range c.Kwargs {
		v, err := jinja.ParseJSON(raw)
		if err != nil {
			return dst, fmt.Errorf("tokenizer: chat_template_kwargs %s: %w", k, err)
		}
		vars[k] = v
	}
	now := c.Now
	vars["strftime_now"] = jinja.Func(func(args []any, _ map[string]any) (any, error) {
		f, ok := firstString(args)
		if !ok {
			return nil, errors.New("strftime_now takes a format string")
		}
		if now.IsZero() {
			now = time.Now()
		}
		return jinja.Strftime(now, f), nil
	})
	start := len(dst)
	out, err := ct.tmpl.Render(dst, vars, jinja.Limits{})
	if err != nil {
		return dst, fmt.Errorf("tokenizer: chat template: %w", err)
	}
	if c.ContinueFinalMessage {
		return continueFinal(out, start, msgs)
	}
	return out, nil
}

// continueFinal cuts the rendering out[start:] right after the last message's content,
// as transformers' apply_chat_template(continue_final_message=True) does: at the last
// occurrence of the content with its surrounding whitespace trimmed, keeping the
// content's trailing whitespace when the template kept it.
func continueFinal(out []byte, start int, msgs []any) ([]byte, error) {
	if len(msgs) == 0 {
		return out[:start], errors.New("tokenizer: continue_final_message with no messages")
	}
	last, _ := msgs[len(msgs)-1].(*jinja.Dict)
	var final string
	switch c := dictGet(last, "content").(type) {
	case string:
		final = c
	case []any:
		found := false
		for i := len(c) - 1; i >= 0 && !found; i-- {
			if p, ok := c[i].(*jinja.Dict); ok {
				if t, ok := p.Get("text"); ok {
					final, found = jinja.Str(t), true
				}
			}
		}
		if !found {
			return out[:start], errors.New("tokenizer: continue_final_message: the final message has no text part")
		}
	default:
		return out[:start], errors.New("tokenizer: continue_final_message: the final message has no content")
	}
	rendered := string(out[start:])
	trimmed := strings.TrimFunc(final, unicode.IsSpace)
	at := strings.LastIndex(rendered, trimmed)
	if at < 0 {
		return out[:start], errors.New("tokenizer: continue_final_message: the final message does not appear in the rendering")
	}
	left := strings.TrimLeftFunc(final, unicode.IsSpace)
	end := at + len(trimmed)
	if strings.HasPrefix(rendered[at:], left) && rendered[at:at+len(left)] == final {
		end = at + len(left)
	}
	return out[:start+end], nil
}

func dictGet(d *jinja.Dict, k string) any {
	if d == nil {
		return nil
	}
	v, _ := d.Get(k)
	return v
}

func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}

// messageValue is the dict the template sees for m, its keys in the order vLLM builds
// them: role, content, tool_calls, reasoning, reasoning_content, tool_call_id, name.
func messageValue(m *Message) (*jinja.Dict, error) {
	d := jinja.NewDict(4)
	d.Set("role", m.Role)
	if m.Content != nil {
		v, err := jinja.ParseJSON(m.Content)
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		d.Set("content", v)
	}
	if m.ToolCalls != nil {
		calls := make([]any, len(m.ToolCalls))
		for i := range m.ToolCalls {
			tc := &m.ToolCalls[i]
			c := jinja.NewDict(3)
			if tc.ID != "" {
				c.Set("id", tc.ID)
			}
			if tc.Type != "" {
				c.Set("type", tc.Type)
			}
			f := jinja.NewDict(2)
			f.Set("name", tc.Function.Name)
			if tc.Function.Arguments != nil {
				a, err := jinja.ParseJSON(tc.Function.Arguments)
				if err != nil {
					return nil, fmt.Errorf("tool call %d arguments: %w", i, err)
				}
				f.Set("arguments", a)
			}
			c.Set("function", f)
			calls[i] = c
		}
		d.Set("tool_calls", calls)
	}
	if m.Reasoning != "" {
		d.Set("reasoning", m.Reasoning)
	}
	if m.ReasoningContent != "" {
		d.Set("reasoning_content", m.ReasoningContent)
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		d.Set("name", m.Name)
	}
	return d, nil
}
