package corpus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Conversation is one chat request as a chat template sees it, in the OpenAI chat shape.
type Conversation struct {
	Messages            []Message         `json:"messages"`
	Tools               []json.RawMessage `json:"tools,omitempty"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs,omitempty"`
}

// Message is one message of a [Conversation]. Content is a JSON string or null; absent when nil.
type Message struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content,omitempty"`
	Name             string          `json:"name,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
}

// ToolCall is an assistant's call of a function; Arguments is a JSON string (the OpenAI wire
// form) or a JSON object (as some servers pass it to the template).
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments.
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type tool struct {
	name   string
	schema string // the whole {"type":"function","function":{...}} object
	args   func(g *gen) string
}

var tools = []tool{
	{"get_weather", `{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city. Météo actuelle — 天气.", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City and country, e.g. \"Paris, France\""}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"location": %q, "unit": %q}`, g.pick([]string{"Paris, France", "東京", "São Paulo", "Zürich", "New York"}), g.pick([]string{"celsius", "fahrenheit"}))
		}},
	{"search", `{"type": "function", "function": {"name": "search", "description": "Search the web.", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}, "filters": {"type": "object", "properties": {"site": {"type": "string"}, "after": {"type": "string", "format": "date"}}, "additionalProperties": false}}, "required": ["query"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"query": %q, "max_results": %d}`, g.pick(english)+" "+g.pick(foreign), g.between(1, 50))
		}},
	{"run_python", `{"type": "function", "function": {"name": "run_python", "description": "Run Python code in a sandbox and return stdout.\nUse it for arithmetic.", "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The program."}, "timeout_s": {"type": "number"}}, "required": ["code"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"code": %q, "timeout_s": %d.5}`, "print(sum(range("+strconv.Itoa(g.n(1000))+")))\n", g.n(30))
		}},
	{"create_event", `{"type": "function", "function": {"name": "create_event", "description": "Create a calendar event.", "parameters": {"type": "object", "properties": {"title": {"type": "string"}, "attendees": {"type": "array", "items": {"type": "string", "format": "email"}}, "start": {"type": "string"}, "all_day": {"type": "boolean"}, "reminders": {"type": "array", "items": {"type": "object", "properties": {"minutes": {"type": "integer"}, "method": {"type": "string", "enum": ["email", "popup"]}}}}}, "required": ["title", "start"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"title": %q, "attendees": ["a@example.com", "b@example.org"], "start": "2026-12-%02dT10:00:00Z", "all_day": %t}`, g.pick(english)+" sync", g.between(1, 28), g.coin(0.5))
		}},
	{"read_file", `{"type": "function", "function": {"name": "read_file", "description": "Read a file from the repository.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": ["integer", "null"]}}, "required": ["path"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"path": "src/%s.go", "offset": null}`, g.pick(idents))
		}},
	{"translate", `{"type": "function", "function": {"name": "translate", "description": "Traduire un texte — 翻译文本 — перевести.", "parameters": {"type": "object", "properties": {"text": {"type": "string"}, "target": {"type": "string", "enum": ["en", "fr", "zh", "ru", "ar"]}}, "required": ["text", "target"]}}}`,
		func(g *gen) string {
			return fmt.Sprintf(`{"text": %q, "target": %q}`, g.pick(foreign), g.pick([]string{"en", "fr", "zh", "ru", "ar"}))
		}},
	{"no_params", `{"type": "function", "function": {"name": "no_params", "description": "", "parameters": {"type": "object", "properties": {}}}}`,
		func(*gen) string { return `{}` }},
	{"nested", `{"type": "function", "function": {"name": "nested", "description": "Deeply nested schema with <|im_start|> and [INST] in it.", "parameters": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"c": {"type": "number"}}}]}}}}}}}}`,
		func(g *gen) string { return fmt.Sprintf(`{"a": {"b": ["x", {"c": %d}]}}`, g.n(100)) }},
}

var systemPrompts = []string{
	"You are a helpful assistant.",
	"You are Usher, a routing assistant. Answer briefly.\nAlways cite sources.",
	"Tu es un assistant utile. Réponds en français.",
	"你是一个乐于助人的助手。",
	"  Leading and trailing spaces.  ",
	"Knowledge cutoff: 2024-06\nCurrent date: 2026-12-07\n\nReasoning: high",
	"",
}

// text returns message content: a short piece from one of the prompt categories.
func (g *gen) text() string {
	if g.coin(0.03) {
		return ""
	}
	s := leaves[g.n(len(leaves))](g)
	if len(s) > 400 {
		s = strings.ToValidUTF8(s[:400], "")
	}
	return s
}

func jsonString(s string) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // cannot happen for a string
	}
	return b
}

// Conversations returns NumConversations conversations. About a third are plain alternating
// user/assistant chats with no system prompt or tools (what the simplest templates accept); the
// rest mix system prompts, tools, tool calls, tool results and reasoning.
func Conversations(seed uint64) []Conversation {
	g := newGen(seed, 2)
	out := make([]Conversation, 0, NumConversations)
	for i := range NumConversations {
		var c Conversation
		if i%3 == 0 {
			c = g.plainConversation()
		} else {
			c = g.fullConversation()
		}
		c.AddGenerationPrompt = g.coin(0.5)
		if g.coin(0.1) {
			c.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
		}
		out = append(out, c)
	}
	return out
}

func (g *gen) plainConversation() Conversation {
	var c Conversation
	turns := g.between(1, 6)
	for t := range turns {
		c.Messages = append(c.Messages, Message{Role: "user", Content: jsonString(g.text())})
		if t < turns-1 || g.coin(0.3) {
			c.Messages = append(c.Messages, Message{Role: "assistant", Content: jsonString(g.text())})
		}
	}
	return c
}

func (g *gen) fullConversation() Conversation {
	var c Conversation
	if g.coin(0.8) {
		c.Messages = append(c.Messages, Message{Role: "system", Content: jsonString(g.pick(systemPrompts))})
	}
	var offered []tool
	if g.coin(0.75) {
		start := g.n(len(tools))
		for k := range g.between(1, 4) {
			tl := tools[(start+k)%len(tools)]
			offered = append(offered, tl)
			c.Tools = append(c.Tools, json.RawMessage(tl.schema))
		}
	}
	turns := g.between(1, 5)
	callN := 0
	for t := range turns {
		c.Messages = append(c.Messages, Message{Role: "user", Content: jsonString(g.text())})
		last := t == turns-1
		if last && g.coin(0.5) {
			break // ends on the user's turn
		}
		if len(offered) > 0 && g.coin(0.6) {
			m := Message{Role: "assistant"}
			switch k := g.n(10); {
			case k == 0:
				m.Content = json.RawMessage("null")
			case k < 4:
				m.Content = jsonString("")
			default:
				m.Content = jsonString(g.text())
			}
			if g.coin(0.2) {
				m.ReasoningContent = g.text()
			}
			n := g.between(1, 3)
			for range n {
				tl := offered[g.n(len(offered))]
				callN++
				args := tl.args(g)
				var raw json.RawMessage
				if g.coin(0.75) {
					raw = jsonString(args)
				} else {
					raw = json.RawMessage(args)
				}
				m.ToolCalls = append(m.ToolCalls, ToolCall{
					ID: fmt.Sprintf("call_%d_%x", callN, g.r.Uint32()), Type: "function",
					Function: FunctionCall{Name: tl.name, Arguments: raw},
				})
			}
			c.Messages = append(c.Messages, m)
			for k := range n {
				res := Message{Role: "tool", ToolCallID: m.ToolCalls[k].ID, Content: jsonString(g.toolResult())}
				if g.coin(0.3) {
					res.Name = m.ToolCalls[k].Function.Name
				}
				c.Messages = append(c.Messages, res)
			}
			if last && g.coin(0.5) {
				break // ends on the tool results: the model is to continue
			}
		}
		m := Message{Role: "assistant", Content: jsonString(g.text())}
		if g.coin(0.15) {
			m.ReasoningContent = g.text()
		} else if g.coin(0.1) {
			m.Content = jsonString("<think>\n" + g.text() + "\n</think>\n\n" + g.text())
		}
		c.Messages = append(c.Messages, m)
	}
	return c
}

func (g *gen) toolResult() string {
	switch g.n(4) {
	case 0:
		return fmt.Sprintf(`{"temperature": %d, "conditions": %q}`, g.between(-30, 45), g.pick([]string{"sunny", "ensoleillé", "多云"}))
	case 1:
		return "Error: " + g.pick(english) + " not found"
	case 2:
		return strconv.Itoa(g.r.IntN(1 << 30))
	default:
		return g.text()
	}
}
