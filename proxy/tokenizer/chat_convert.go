package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer/internal/jinja"
)

// ErrNoConversation is returned (wrapped) by [Encoder.ConversationOf] for a request whose prompt
// vLLM does not build from chat messages the router can see: a Completions or Embeddings
// request, a Responses request continuing a stored response or conversation
// (previous_response_id, conversation: the history is on the server), a Chat request
// with its own chat_template, or input vLLM itself rejects (encrypted reasoning, images
// for a text-only template).
var ErrNoConversation = errors.New("tokenizer: no chat to render for this request")

// ConversationOf returns the conversation vLLM renders with this model's chat template
// for r, a request of the Chat, Messages or Responses API, so that
// RenderChat(ConversationOf(r)) is the prompt text the engine tokenizes. It follows vLLM's
// serving code (entrypoints/anthropic/serving.py, entrypoints/openai/responses/utils.py,
// entrypoints/chat_utils.py):
//
// Messages (Anthropic): a "system" string becomes a system message when it is not empty;
// a list of blocks becomes one system message, the texts of its text blocks concatenated
// with nothing between them. Each message with string content is kept as it is. Of a
// message with content blocks: text blocks with text become text parts, thinking blocks
// are joined into the message's reasoning, tool_use blocks become tool calls (id, name,
// arguments the JSON of "input", {} when absent), and tool_result blocks of a user message
// become tool messages placed before it, tool_call_id the block's "id" (vLLM reads "id",
// not "tool_use_id", so it is usually ""), content str(content) as Python writes it; in an
// assistant message they become the text part "Tool result: " + str(content). One text
// part becomes string content, several a list; a message left with no text, calls or
// reasoning is dropped. Tools become {"type": "function", "function": {"name",
// "description", "parameters"}} with "parameters" the input_schema, "type": "object"
// appended when it has none. add_generation_prompt is true.
//
// Responses (OpenAI): "instructions", when not empty, becomes a system message; string
// input a user message. Input items fold in order: a function_call becomes a tool call
// (id call_id) added to the previous message when it is an assistant message, else a new
// assistant message; a reasoning item's text (its first content text, else its first
// summary text) becomes the reasoning of the previous assistant message when that has none,
// else a new assistant message; an assistant message's text (its string content or first
// part's text) becomes the previous assistant message's content when that has none, else a
// new assistant message; a function_call_output becomes a tool message (content the
// output, tool_call_id call_id); any other item is a chat message as it is. Function tools
// are flattened into the chat form as for Messages. add_generation_prompt is true unless
// the last input item is a message or reasoning item with status "in_progress" or
// "incomplete", which is continued (ContinueFinalMessage).
//
// Chat Completions (OpenAI): the messages, "tools", "add_generation_prompt" (default true),
// "continue_final_message" and "chat_template_kwargs" of the body.
//
// Then, for all three, each message is rebuilt as vLLM's chat parser does: content null or
// absent is an empty list of parts; a string is one text part; text, input_text,
// output_text, refusal and thinking parts are text. When the template loops over message
// content the content is passed as a list of {"type": "text", "text": ...}; otherwise the
// texts are joined with "\n" into a string (so null content becomes ""). An image, audio
// or video part is an error (ErrNoConversation): its placeholder is the multimodal processor's.
// An assistant message keeps its tool_calls and gets "reasoning" and "reasoning_content"
// from its reasoning; a tool message keeps tool_call_id; any message keeps a string
// "name". Last, an assistant message's empty tool_calls list is removed, and each call's
// arguments are decoded from their JSON string ({} when empty or absent), as vLLM's
// _postprocess_messages does. Each tool is passed in pydantic's dump of vLLM's tool
// model: {"type", "function": {"name", "description" (null when absent), "parameters"
// (null when absent), other keys as given}}.
//
// ConversationOf reads r.Body (the proxy/openai Request does not keep the Chat API's
// tools and template options, nor the blocks the conversion reads), runs in
// O(len(r.Body)), and may be called by any number of goroutines at once.
func (e *Encoder) ConversationOf(r *openai.Request) (*Conversation, error) {
	body, err := jinja.ParseJSON(r.Body)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: request body: %w", err)
	}
	top, ok := body.(*jinja.Dict)
	if !ok {
		return nil, fmt.Errorf("%w: the body is not an object", ErrNoConversation)
	}
	c := &Conversation{AddGenerationPrompt: true}
	var msgs []*jinja.Dict
	var tools []any
	switch r.API {
	case openai.Chat:
		if get(top, "chat_template") != nil {
			return nil, fmt.Errorf("%w: the request brings its own chat_template", ErrNoConversation)
		}
		list, _ := get(top, "messages").([]any)
		for _, x := range list {
			d, ok := x.(*jinja.Dict)
			if !ok {
				return nil, fmt.Errorf("%w: a message is not an object", ErrNoConversation)
			}
			msgs = append(msgs, d)
		}
		tl, _ := get(top, "tools").([]any)
		for _, t := range tl {
			tools = append(tools, chatTool(t))
		}
		if v, ok := top.Get("add_generation_prompt"); ok && v != nil {
			c.AddGenerationPrompt = jinja.Truthy(v)
		}
		if v, ok := top.Get("continue_final_message"); ok && v != nil {
			c.ContinueFinalMessage = jinja.Truthy(v)
		}
		if kw, ok := get(top, "chat_template_kwargs").(*jinja.Dict); ok {
			c.Kwargs = make(map[string]json.RawMessage, kw.Len())
			for _, k := range kw.Keys {
				v, _ := kw.Get(k)
				b, err := jinja.AppendJSON(nil, v)
				if err != nil {
					return nil, err
				}
				c.Kwargs[k] = b
			}
		}
	case openai.Messages:
		if msgs, err = anthropicMessages(top); err != nil {
			return nil, err
		}
		tl, _ := get(top, "tools").([]any)
		for _, t := range tl {
			td, ok := t.(*jinja.Dict)
			if !ok {
				return nil, fmt.Errorf("%w: a tool is not an object", ErrNoConversation)
			}
			schema, _ := get(td, "input_schema").(*jinja.Dict)
			if schema != nil {
				if _, ok := schema.Get("type"); !ok {
					schema.Set("type", "object")
				}
			}
			f := jinja.NewDict(3)
			f.Set("name", get(td, "name"))
			f.Set("description", get(td, "description"))
			f.Set("parameters", schemaValue(schema))
			tools = append(tools, toolDump(f))
		}
	case openai.Responses:
		if r.PreviousResponseID != "" {
			return nil, fmt.Errorf("%w: previous_response_id %q continues a response stored on the server", ErrNoConversation, r.PreviousResponseID)
		}
		if get(top, "conversation") != nil {
			return nil, fmt.Errorf("%w: the conversation is stored on the server", ErrNoConversation)
		}
		if msgs, c.ContinueFinalMessage, err = responsesMessages(top); err != nil {
			return nil, err
		}
		c.AddGenerationPrompt = !c.ContinueFinalMessage
		tl, _ := get(top, "tools").([]any)
		for _, t := range tl {
			td, ok := t.(*jinja.Dict)
			if !ok || get(td, "type") != "function" {
				continue // built-in tools are not rendered by the chat template
			}
			f := jinja.NewDict(td.Len())
			for _, k := range td.Keys {
				if k != "type" {
					v, _ := td.Get(k)
					f.Set(k, v)
				}
			}
			tools = append(tools, toolDump(f))
		}
	default:
		return nil, fmt.Errorf("%w: the %v API has no chat", ErrNoConversation, r.API)
	}
	parts := e.chat != nil && e.chat.parts
	if c.Messages, err = vllmMessages(msgs, parts); err != nil {
		return nil, err
	}
	for _, t := range tools {
		b, err := jinja.AppendJSON(nil, t)
		if err != nil {
			return nil, err
		}
		c.Tools = append(c.Tools, b)
	}
	return c, nil
}

// get returns d[k], nil when absent or d is nil.
func get(d *jinja.Dict, k string) any {
	if d == nil {
		return nil
	}
	v, _ := d.Get(k)
	return v
}

func schemaValue(s *jinja.Dict) any {
	if s == nil {
		return nil
	}
	return s
}

// toolDump is ChatCompletionToolsParam(type="function", function=f).model_dump(): the
// function's declared fields name, description and parameters first (null when absent),
// then the extra keys in their order.
func toolDump(f *jinja.Dict) *jinja.Dict {
	fn := jinja.NewDict(f.Len() + 3)
	for _, k := range [...]string{"name", "description", "parameters"} {
		fn.Set(k, get(f, k))
	}
	for _, k := range f.Keys {
		if k != "name" && k != "description" && k != "parameters" {
			v, _ := f.Get(k)
			fn.Set(k, v)
		}
	}
	t := jinja.NewDict(2)
	t.Set("type", "function")
	t.Set("function", fn)
	return t
}

// chatTool is a Chat Completions tool as vLLM dumps it: its function normalised by
// toolDump, the tool's other keys kept after it.
func chatTool(t any) any {
	td, ok := t.(*jinja.Dict)
	if !ok {
		return t
	}
	f, _ := get(td, "function").(*jinja.Dict)
	if f == nil {
		f = jinja.NewDict(0)
	}
	out := toolDump(f)
	for _, k := range td.Keys {
		if k != "type" && k != "function" {
			v, _ := td.Get(k)
			out.Set(k, v)
		}
	}
	return out
}

// anthropicMessages converts a Messages body's system and messages to chat messages, as
// vLLM's _convert_anthropic_to_openai_request does.
func anthropicMessages(top *jinja.Dict) ([]*jinja.Dict, error) {
	var out []*jinja.Dict
	switch s := get(top, "system").(type) {
	case string:
		if s != "" {
			out = append(out, msgDict("system", s))
		}
	case []any:
		if len(s) > 0 {
			text := ""
			for _, b := range s {
				bd, _ := b.(*jinja.Dict)
				if t, ok := get(bd, "text").(string); ok && get(bd, "type") == "text" {
					text += t
				}
			}
			out = append(out, msgDict("system", text))
		}
	}
	list, _ := get(top, "messages").([]any)
	for _, x := range list {
		md, ok := x.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("%w: a message is not an object", ErrNoConversation)
		}
		role := get(md, "role")
		msg := jinja.NewDict(3)
		msg.Set("role", role)
		switch c := get(md, "content").(type) {
		case string:
			msg.Set("content", c)
		case []any:
			var parts, calls []any
			reasoning, hasReasoning := "", false
			for _, b := range c {
				bd, ok := b.(*jinja.Dict)
				if !ok {
					return nil, fmt.Errorf("%w: a content block is not an object", ErrNoConversation)
				}
				switch get(bd, "type") {
				case "text":
					if t, ok := get(bd, "text").(string); ok && t != "" {
						parts = append(parts, textPart(t))
					}
				case "image":
					if get(bd, "source") != nil {
						return nil, fmt.Errorf("%w: an image block", ErrNoConversation)
					}
				case "thinking":
					if t, ok := get(bd, "thinking").(string); ok {
						reasoning += t
						hasReasoning = true
					}
				case "tool_use":
					id, _ := get(bd, "id").(string)
					if id == "" {
						return nil, fmt.Errorf("%w: a tool_use block without an id (vLLM makes one from the clock)", ErrNoConversation)
					}
					name, _ := get(bd, "name").(string)
					input := get(bd, "input")
					if !jinja.Truthy(input) {
						input = jinja.NewDict(0)
					}
					args, err := jinja.AppendJSON(nil, input)
					if err != nil {
						return nil, err
					}
					f := jinja.NewDict(2)
					f.Set("name", name)
					f.Set("arguments", string(args))
					tc := jinja.NewDict(3)
					tc.Set("id", id)
					tc.Set("type", "function")
					tc.Set("function", f)
					calls = append(calls, tc)
				case "tool_result":
					content := ""
					if bc := get(bd, "content"); jinja.Truthy(bc) {
						content = jinja.Str(bc)
					}
					if role == "user" {
						id, _ := get(bd, "id").(string)
						t := jinja.NewDict(3)
						t.Set("role", "tool")
						t.Set("tool_call_id", id)
						t.Set("content", content)
						out = append(out, t)
					} else {
						parts = append(parts, textPart("Tool result: "+content))
					}
				}
			}
			if hasReasoning {
				msg.Set("reasoning", reasoning)
			}
			if len(calls) > 0 {
				msg.Set("tool_calls", calls)
			}
			switch {
			case len(parts) == 1:
				msg.Set("content", get(parts[0].(*jinja.Dict), "text"))
			case len(parts) > 1:
				msg.Set("content", parts)
			case len(calls) == 0 && !hasReasoning:
				continue
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

func msgDict(role string, content any) *jinja.Dict {
	d := jinja.NewDict(2)
	d.Set("role", role)
	d.Set("content", content)
	return d
}

func textPart(t string) *jinja.Dict {
	d := jinja.NewDict(2)
	d.Set("type", "text")
	d.Set("text", t)
	return d
}

// responsesMessages converts a Responses body's instructions and input to chat
// messages, as vLLM's construct_input_messages does, and reports whether the last item
// is a partial message to continue.
func responsesMessages(top *jinja.Dict) ([]*jinja.Dict, bool, error) {
	var out []*jinja.Dict
	if s, ok := get(top, "instructions").(string); ok && s != "" {
		out = append(out, msgDict("system", s))
	}
	switch in := get(top, "input").(type) {
	case string:
		return append(out, msgDict("user", in)), false, nil
	case []any:
		first := len(out)
		for _, x := range in {
			item, ok := x.(*jinja.Dict)
			if !ok {
				return nil, false, fmt.Errorf("%w: an input item is not an object", ErrNoConversation)
			}
			var prev *jinja.Dict
			if len(out) > first && get(out[len(out)-1], "role") == "assistant" {
				prev = out[len(out)-1]
			}
			msg, err := responseItem(item, prev)
			if err != nil {
				return nil, false, err
			}
			if msg != nil {
				out = append(out, msg)
			}
		}
		cont := false
		if len(in) > 0 {
			last, _ := in[len(in)-1].(*jinja.Dict)
			typ, ok := get(last, "type").(string)
			if !ok {
				typ = "message"
			}
			st := get(last, "status")
			cont = (typ == "message" || typ == "reasoning") && (st == "in_progress" || st == "incomplete")
		}
		return out, cont, nil
	}
	return out, false, nil
}

// responseItem is vLLM's _construct_message_from_response_item: a new message, or nil
// when the item was folded into prev (the previous message, when it is an assistant's).
func responseItem(item, prev *jinja.Dict) (*jinja.Dict, error) {
	switch get(item, "type") {
	case "function_call":
		if ns, _ := get(item, "namespace").(string); ns != "" {
			return nil, fmt.Errorf("%w: a namespaced function_call", ErrNoConversation)
		}
		f := jinja.NewDict(2)
		f.Set("name", get(item, "name"))
		f.Set("arguments", get(item, "arguments"))
		tc := jinja.NewDict(3)
		tc.Set("id", get(item, "call_id"))
		tc.Set("function", f)
		tc.Set("type", "function")
		if prev != nil {
			switch calls := get(prev, "tool_calls").(type) {
			case nil:
				prev.Set("tool_calls", []any{tc})
				return nil, nil
			case []any:
				prev.Set("tool_calls", append(calls, tc))
				return nil, nil
			}
		}
		d := jinja.NewDict(2)
		d.Set("role", "assistant")
		d.Set("tool_calls", []any{tc})
		return d, nil
	case "reasoning":
		if jinja.Truthy(get(item, "encrypted_content")) {
			return nil, fmt.Errorf("%w: encrypted reasoning content", ErrNoConversation)
		}
		reasoning := any("")
		if c, _ := get(item, "content").([]any); len(c) > 0 {
			reasoning = get(asDict(c[0]), "text")
		} else if s, _ := get(item, "summary").([]any); len(s) > 0 {
			reasoning = get(asDict(s[0]), "text")
		}
		if prev != nil {
			if _, ok := prev.Get("reasoning"); !ok || get(prev, "reasoning") == nil {
				prev.Set("reasoning", reasoning)
				return nil, nil
			}
		}
		d := jinja.NewDict(2)
		d.Set("role", "assistant")
		d.Set("reasoning", reasoning)
		return d, nil
	case "function_call_output":
		d := jinja.NewDict(3)
		d.Set("role", "tool")
		d.Set("content", get(item, "output"))
		d.Set("tool_call_id", get(item, "call_id"))
		return d, nil
	}
	if get(item, "role") == "assistant" {
		var text any
		switch c := get(item, "content").(type) {
		case string:
			text = c
		case []any:
			if len(c) > 0 {
				text = get(asDict(c[0]), "text")
			}
		}
		if text != nil {
			if prev != nil && get(prev, "content") == nil {
				prev.Set("content", text)
				return nil, nil
			}
			return msgDict("assistant", text), nil
		}
	}
	return item, nil
}

func asDict(v any) *jinja.Dict {
	d, _ := v.(*jinja.Dict)
	return d
}

// vllmMessages rebuilds each message as vLLM's _parse_chat_message_content and
// _postprocess_messages do (see [Encoder.ConversationOf]).
func vllmMessages(in []*jinja.Dict, parts bool) ([]Message, error) {
	out := make([]Message, 0, len(in))
	for i, src := range in {
		role, ok := get(src, "role").(string)
		if !ok {
			return nil, fmt.Errorf("%w: message %d has no role", ErrNoConversation, i)
		}
		var items []any
		switch c := get(src, "content").(type) {
		case nil:
		case string:
			items = []any{textPart(c)}
		case []any:
			items = c
		default:
			return nil, fmt.Errorf("%w: message %d: content is a %T", ErrNoConversation, i, c)
		}
		var texts []string
		for _, p := range items {
			if s, ok := p.(string); ok {
				texts = append(texts, s)
				continue
			}
			pd := asDict(p)
			typ, _ := get(pd, "type").(string)
			switch typ {
			case "text", "input_text", "output_text", "thinking", "refusal":
				key := "text"
				if typ == "refusal" {
					key = "refusal"
				} else if typ == "thinking" {
					key = "thinking"
				}
				t, ok := get(pd, key).(string)
				if !ok {
					continue // vLLM skips a text part without text
				}
				texts = append(texts, t)
			default:
				return nil, fmt.Errorf("%w: message %d has a %q part", ErrNoConversation, i, typ)
			}
		}
		m := Message{Role: role}
		var content any
		if parts {
			list := make([]any, len(texts))
			for j, t := range texts {
				list[j] = textPart(t)
			}
			content = list
		} else {
			joined := ""
			for j, t := range texts {
				if j > 0 {
					joined += "\n"
				}
				joined += t
			}
			content = joined
		}
		b, err := jinja.AppendJSON(nil, content)
		if err != nil {
			return nil, err
		}
		m.Content = b
		switch role {
		case "assistant":
			if calls, ok := get(src, "tool_calls").([]any); ok {
				if len(calls) > 0 { // an empty list is dropped by _postprocess_messages
					if m.ToolCalls, err = toolCalls(calls); err != nil {
						return nil, fmt.Errorf("%w: message %d: %v", ErrNoConversation, i, err)
					}
				}
			}
			if r, ok := get(src, "reasoning").(string); ok {
				m.Reasoning, m.ReasoningContent = r, r
			}
		case "tool":
			if id, ok := get(src, "tool_call_id").(string); ok {
				m.ToolCallID = id
			}
		}
		if n, ok := get(src, "name").(string); ok {
			m.Name = n
		}
		out = append(out, m)
	}
	return out, nil
}

func toolCalls(calls []any) ([]ToolCall, error) {
	out := make([]ToolCall, 0, len(calls))
	for _, c := range calls {
		cd := asDict(c)
		if cd == nil {
			return nil, errors.New("a tool call is not an object")
		}
		var tc ToolCall
		tc.ID, _ = get(cd, "id").(string)
		tc.Type, _ = get(cd, "type").(string)
		f := asDict(get(cd, "function"))
		tc.Function.Name, _ = get(f, "name").(string)
		args := get(f, "arguments")
		switch a := args.(type) {
		case string:
			if a == "" {
				args = jinja.NewDict(0)
			} else {
				v, err := jinja.ParseJSON([]byte(a))
				if err != nil {
					return nil, fmt.Errorf("tool call arguments are not JSON: %v", err)
				}
				args = v
			}
		case *jinja.Dict, []any:
		default:
			if !jinja.Truthy(a) {
				args = jinja.NewDict(0)
			}
		}
		b, err := jinja.AppendJSON(nil, args)
		if err != nil {
			return nil, err
		}
		tc.Function.Arguments = b
		out = append(out, tc)
	}
	return out, nil
}
