package tokenizer

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func config(template string, extra map[string]any) []byte {
	m := map[string]any{"chat_template": template}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// chatMLConfig is a small ChatML template in the style of Qwen's, with tools.
var chatMLConfig = config(`{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant\n' + message.content }}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}{{ tool_call.arguments }}{% else %}{{ tool_call.arguments | tojson }}{% endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}`, map[string]any{"eos_token": "<|im_end|>", "bos_token": nil})

// llamaConfig is a [INST] template in the style of Mistral's, reading bos_token and
// eos_token (one of them an AddedToken object) and raising on bad roles.
var llamaConfig = config(`{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}`,
	map[string]any{"bos_token": "<s>", "eos_token": map[string]any{"__type": "AddedToken", "content": "</s>"}})

// deepseekConfig is in the style of DeepSeek-V3's: a namespace, system prompts gathered
// first, tool calls with string arguments, tool outputs.
var deepseekConfig = config(`{% set ns = namespace(system_prompt='', is_tool=false) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- for tool in message['tool_calls'] %}{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n`+"```json"+`\n' + tool['function']['arguments'] + '\n`+"```"+`<｜tool▁call▁end｜>'}}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}`,
	map[string]any{"bos_token": map[string]any{"__type": "AddedToken", "content": "<｜begin▁of▁sentence｜>"}})

// harmonyConfig is in the style of GPT-OSS's: macros, a date from strftime_now, kwargs
// with defaults, and the tool's arguments as JSON.
var harmonyConfig = config(`{%- macro sys() -%}
    {%- if model_identity is not defined %}{%- set model_identity = "You are ChatGPT." %}{%- endif %}
    {{- model_identity + "\nCurrent date: " + strftime_now("%Y-%m-%d") + "\n\nReasoning: " + (reasoning_effort if reasoning_effort is defined else "medium") }}
    {%- if builtin_tools %}{{- "\n# Tools: " + builtin_tools|join(", ") }}{%- endif %}
{%- endmacro -%}
{{- "<|start|>system<|message|>" + sys() + "<|end|>" }}
{%- for message in messages -%}
    {%- if message.role == 'assistant' and message.tool_calls -%}
        {{- "<|start|>assistant to=functions." + message.tool_calls[0].function.name + "<|channel|>commentary json<|message|>" + message.tool_calls[0].function.arguments|tojson + "<|call|>" }}
    {%- else -%}
        {{- "<|start|>" + message.role + "<|message|>" + message.content + "<|end|>" }}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|start|>assistant
{%- endif -%}`, map[string]any{"bos_token": "<|startoftext|>"})

func toolCall(id, name, args string) ToolCall {
	var tc ToolCall
	tc.ID, tc.Type = id, "function"
	tc.Function.Name = name
	tc.Function.Arguments = json.RawMessage(args)
	return tc
}

func TestRenderChat(t *testing.T) {
	tests := []struct {
		name   string
		config []byte
		chat   Conversation
		want   string
		err    string // a substring of the error, when one is expected
	}{
		{
			name:   "chatml system and turns",
			config: chatMLConfig,
			chat: Conversation{AddGenerationPrompt: true, Messages: []Message{
				{Role: "system", Content: jstr("Be brief.")},
				{Role: "user", Content: jstr("Hi")},
				{Role: "assistant", Content: jstr("Hello!")},
				{Role: "user", Content: jstr("Bye")},
			}},
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name:   "chatml tools, a call with object arguments, and enable_thinking false",
			config: chatMLConfig,
			chat: Conversation{
				AddGenerationPrompt: true,
				Tools:               []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f","description":"é","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}`)},
				Kwargs:              map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")},
				Messages: []Message{
					{Role: "user", Content: jstr("call f")},
					{Role: "assistant", Content: jstr(""), ToolCalls: []ToolCall{toolCall("c1", "f", `{"x": 1, "y": [true, null, 1.5]}`)}},
					{Role: "tool", ToolCallID: "c1", Content: jstr("42")},
				},
			},
			want: "<|im_start|>system\n# Tools\n<tools>\n" +
				`{"type": "function", "function": {"name": "f", "description": "é", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}` +
				"\n</tools><|im_end|>\n<|im_start|>user\ncall f<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n" +
				`{"name": "f", "arguments": {"x": 1, "y": [true, null, 1.5]}}` +
				"\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name:   "chatml string arguments are written as given",
			config: chatMLConfig,
			chat: Conversation{Messages: []Message{
				{Role: "assistant", Content: jstr("ok"), ToolCalls: []ToolCall{toolCall("c1", "f", `"{\"x\":1}"`)}},
			}},
			want: "<|im_start|>assistant\nok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":1}}\n</tool_call><|im_end|>\n",
		},
		{
			name:   "llama bos and eos from the config",
			config: llamaConfig,
			chat: Conversation{Messages: []Message{
				{Role: "user", Content: jstr("a")}, {Role: "assistant", Content: jstr("b")}, {Role: "user", Content: jstr("c")},
			}},
			want: "<s>[INST] a [/INST]b</s> [INST] c [/INST]",
		},
		{
			name:   "llama raises on a system message",
			config: llamaConfig,
			chat:   Conversation{Messages: []Message{{Role: "system", Content: jstr("s")}, {Role: "user", Content: jstr("u")}}},
			err:    "Conversation roles must alternate",
		},
		{
			name:   "deepseek system gathered, tool call with string arguments, tool output",
			config: deepseekConfig,
			chat: Conversation{AddGenerationPrompt: true, Messages: []Message{
				{Role: "system", Content: jstr("S")},
				{Role: "user", Content: jstr("U")},
				{Role: "assistant", Content: json.RawMessage("null"), ToolCalls: []ToolCall{toolCall("c", "f", `"{\"a\": 1}"`)}},
				{Role: "tool", Content: jstr("R")},
			}},
			want: "<｜begin▁of▁sentence｜>S<｜User｜>U<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜><｜tool▁output▁begin｜>R<｜tool▁output▁end｜>",
		},
		{
			name:   "deepseek object arguments cannot be concatenated",
			config: deepseekConfig,
			chat: Conversation{Messages: []Message{
				{Role: "assistant", Content: json.RawMessage("null"), ToolCalls: []ToolCall{toolCall("c", "f", `{"a": 1}`)}},
			}},
			err: "unsupported operand",
		},
		{
			name:   "harmony defaults, date and generation prompt",
			config: harmonyConfig,
			chat:   Conversation{AddGenerationPrompt: true, Messages: []Message{{Role: "user", Content: jstr("hi")}}},
			want:   "<|start|>system<|message|>You are ChatGPT.\nCurrent date: 2026-01-02\n\nReasoning: medium<|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
		},
		{
			name:   "harmony kwargs",
			config: harmonyConfig,
			chat: Conversation{
				Kwargs: map[string]json.RawMessage{"reasoning_effort": jstr("high"), "builtin_tools": json.RawMessage(`["browser","python"]`), "model_identity": jstr("I am X.")},
				Messages: []Message{
					{Role: "user", Content: jstr("q")},
					{Role: "assistant", Content: jstr(""), ToolCalls: []ToolCall{toolCall("c", "lookup", `"{\"k\":\"v\"}"`)}},
				},
			},
			want: "<|start|>system<|message|>I am X.\nCurrent date: 2026-01-02\n\nReasoning: high\n# Tools: browser, python<|end|><|start|>user<|message|>q<|end|><|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>\"{\\\"k\\\":\\\"v\\\"}\"<|call|>",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseChatOnly(tt.config)
			if err != nil {
				t.Fatal(err)
			}
			c := tt.chat
			c.Now = fixedNow
			got, err := m.RenderChat([]byte("prefix:"), &c)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "prefix:"+tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, "prefix:"+tt.want)
			}
		})
	}
}

func TestRenderChatNoTemplate(t *testing.T) {
	for _, cfg := range []string{``, `{}`, `{"chat_template": null}`} {
		m, err := parseChatOnly([]byte(cfg))
		if err != nil {
			t.Fatalf("%q: %v", cfg, err)
		}
		if _, err := m.RenderChat(nil, &Conversation{}); !errors.Is(err, ErrNoChatTemplate) {
			t.Errorf("%q: got %v, want ErrNoChatTemplate", cfg, err)
		}
	}
}

func TestNewChatTemplateErrors(t *testing.T) {
	for _, cfg := range []string{`[`, `{"chat_template": 3}`, `{"chat_template": "{% if %}"}`, `{"bos_token": 5}`} {
		if _, err := parseChatOnly([]byte(cfg)); err == nil {
			t.Errorf("%s: no error", cfg)
		}
	}
}

func TestNamedChatTemplates(t *testing.T) {
	m, err := parseChatOnly([]byte(`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.RenderChat(nil, &Conversation{Messages: []Message{{Role: "user"}}})
	if err != nil || string(got) != "D1" {
		t.Errorf("got %q, %v; want \"D1\"", got, err)
	}
}

func TestRenderChatAllocs(t *testing.T) {
	m, err := parseChatOnly(chatMLConfig)
	if err != nil {
		t.Fatal(err)
	}
	c := chat20()
	dst, _ := m.RenderChat(nil, c)
	allocs := testing.AllocsPerRun(20, func() {
		dst, _ = m.RenderChat(dst[:0], c)
	})
	// The template's values (message dicts, strings it builds) are allocated per render;
	// the budget keeps that from growing unnoticed.
	if allocs > 1500 {
		t.Errorf("%v allocations per 20-message render, budget 1500", allocs)
	}
	t.Logf("%v allocations per 20-message render", allocs)
}

// TestInlineTemplatesAgainstJinja2 checks the inline family templates of TestRenderChat
// on generated conversations against Jinja2, so their expectations are the reference's.
func TestInlineTemplatesAgainstJinja2(t *testing.T) {
	configs := map[string]json.RawMessage{"chatml": chatMLConfig, "llama": llamaConfig, "deepseek": deepseekConfig, "harmony": harmonyConfig}
	gen := map[string]string{"chatml": "qwen3", "llama": "mistral", "deepseek": "deepseek-v3", "harmony": "gpt-oss"}
	var family []string
	var chats []*Conversation
	for _, name := range []string{"chatml", "llama", "deepseek", "harmony"} {
		rng := rand.New(rand.NewPCG(7, uint64(len(name))))
		for range 100 {
			family = append(family, name)
			chats = append(chats, genChat(rng, gen[name]))
		}
	}
	want := renderReference(t, configs, family, chats)
	for i, c := range chats {
		m, err := parseChatOnly(configs[family[i]])
		if err != nil {
			t.Fatal(err)
		}
		c.Now = fixedNow
		got, err := m.RenderChat(nil, c)
		switch w := want[i]; {
		case (w.Err != "") != (err != nil):
			t.Errorf("%s #%d: error %v, reference error %q", family[i], i, err, w.Err)
		case err == nil && string(got) != w.Out:
			t.Errorf("%s #%d:\n got %q\nwant %q", family[i], i, got, w.Out)
		}
	}
}
