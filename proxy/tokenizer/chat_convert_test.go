package tokenizer

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

// partsConfig is a template that loops over message content: vLLM passes content to it as
// a list of parts.
var partsConfig = config(`{% for m in messages %}{{ m.role }}:{% for p in m.content %}[{{ p.text }}]{% endfor %};{% endfor %}`, nil)

// TestConversationOf holds golden conversations: a request body of each API, and the Conversation
// vLLM renders for it (as JSON), or ErrNoConversation.
func TestConversationOf(t *testing.T) {
	tests := []struct {
		name   string
		api    openai.API
		config []byte // chatMLConfig when nil
		body   string
		want   string // the Conversation as JSON; "" with noChat
		noChat bool
	}{
		{
			name: "messages: system, tool use and result, thinking, tools",
			api:  openai.Messages,
			body: `{"model":"m","max_tokens":10,"system":"Be brief.",
				"tools":[{"name":"get_weather","description":"Weather.","input_schema":{"properties":{"city":{"type":"string"}}}}],
				"messages":[
				{"role":"user","content":"Weather in Paris?"},
				{"role":"assistant","content":[{"type":"thinking","thinking":"Use the tool.","signature":"s"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"21C"},{"type":"text","text":"Thanks"}]}]}`,
			want: `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},` +
				`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":{"city": "Paris"}}}],"reasoning":"Use the tool.","reasoning_content":"Use the tool."},` +
				`{"role":"tool","content":"21C"},{"role":"user","content":"Thanks"}],` +
				`"tools":[{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}}}],"add_generation_prompt":true}`,
		},
		{
			name: "messages: system blocks concatenated, empty message dropped, result in assistant, list result",
			api:  openai.Messages,
			body: `{"model":"m","max_tokens":10,"system":[{"type":"text","text":"A"},{"type":"text","text":"B"}],
				"messages":[
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"},{"type":"tool_result","id":"x","content":[{"type":"text","text":"r"}]}]},
				{"role":"assistant","content":[{"type":"tool_result","content":"late"}]}]}`,
			want: `{"messages":[{"role":"system","content":"AB"},{"role":"tool","content":"[{'type': 'text', 'text': 'r'}]","tool_call_id":"x"},` +
				`{"role":"user","content":"one\ntwo"},{"role":"assistant","content":"Tool result: late"}],"add_generation_prompt":true}`,
		},
		{
			name:   "messages: an image block",
			api:    openai.Messages,
			body:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`,
			noChat: true,
		},
		{
			name: "responses: instructions and a string",
			api:  openai.Responses,
			body: `{"model":"m","instructions":"Be kind.","input":"Hi"}`,
			want: `{"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi"}],"add_generation_prompt":true}`,
		},
		{
			name: "responses: items fold into assistant turns; function tools flattened",
			api:  openai.Responses,
			body: `{"model":"m","tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true},{"type":"web_search_preview"}],
				"input":[
				{"role":"user","content":[{"type":"input_text","text":"q1"},{"type":"input_text","text":"q2"}]},
				{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]},
				{"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"a\":1}"},
				{"type":"function_call","call_id":"call_2","name":"f","arguments":""},
				{"type":"function_call_output","call_id":"call_1","output":"out1"},
				{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"done","annotations":[]}]},
				{"role":"user","content":"next"}]}`,
			want: `{"messages":[{"role":"user","content":"q1\nq2"},` +
				`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{"a": 1}}},{"id":"call_2","type":"function","function":{"name":"f","arguments":{}}}],"reasoning":"think","reasoning_content":"think"},` +
				`{"role":"tool","content":"out1","tool_call_id":"call_1"},{"role":"assistant","content":"done"},{"role":"user","content":"next"}],` +
				`"tools":[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}, "strict": true}}],"add_generation_prompt":true}`,
		},
		{
			name: "responses: an incomplete final message is continued",
			api:  openai.Responses,
			body: `{"model":"m","input":[{"role":"user","content":"Write"},{"type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"Once upon"}]}]}`,
			want: `{"messages":[{"role":"user","content":"Write"},{"role":"assistant","content":"Once upon"}],"continue_final_message":true}`,
		},
		{
			name:   "responses: previous_response_id",
			api:    openai.Responses,
			body:   `{"model":"m","previous_response_id":"resp_1","input":"more"}`,
			noChat: true,
		},
		{
			name:   "responses: a stored conversation",
			api:    openai.Responses,
			body:   `{"model":"m","conversation":"conv_1","input":"more"}`,
			noChat: true,
		},
		{
			name: "chat: parts joined, null content, string arguments decoded, empty calls dropped, tools dumped, kwargs",
			api:  openai.Chat,
			body: `{"model":"m","add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false},
				"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
				"messages":[
				{"role":"system","content":[{"type":"text","text":"S1"},{"type":"text","text":"S2"}]},
				{"role":"user","content":"U","name":"bob"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\": [1, 2]}"}}]},
				{"role":"tool","content":"R","tool_call_id":"c1"},
				{"role":"assistant","content":"A","tool_calls":[],"reasoning":"why"}]}`,
			want: `{"messages":[{"role":"system","content":"S1\nS2"},{"role":"user","content":"U","name":"bob"},` +
				`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x": [1, 2]}}}]},` +
				`{"role":"tool","content":"R","tool_call_id":"c1"},{"role":"assistant","content":"A","reasoning":"why","reasoning_content":"why"}],` +
				`"tools":[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}}}],"chat_template_kwargs":{"enable_thinking":false}}`,
		},
		{
			name:   "chat: a template that loops over content gets parts",
			api:    openai.Chat,
			config: partsConfig,
			body:   `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null},{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"c"}]}]}`,
			want: `{"messages":[{"role":"user","content":[{"type": "text", "text": "a"}]},{"role":"assistant","content":[]},` +
				`{"role":"user","content":[{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}],"add_generation_prompt":true}`,
		},
		{
			name:   "chat: a request's own template",
			api:    openai.Chat,
			body:   `{"model":"m","chat_template":"{{ messages }}","messages":[{"role":"user","content":"a"}]}`,
			noChat: true,
		},
		{
			name:   "completions have no chat",
			api:    openai.Completions,
			body:   `{"model":"m","prompt":"x"}`,
			noChat: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.config
			if cfg == nil {
				cfg = chatMLConfig
			}
			m, err := parseChatOnly(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := openai.Parse([]byte(tt.body), tt.api, openai.ParseLimits{})
			if err != nil {
				t.Fatalf("openai.Parse: %v", err)
			}
			c, err := m.ConversationOf(r)
			if tt.noChat {
				if !errors.Is(err, ErrNoConversation) {
					t.Fatalf("got %v, want ErrNoConversation", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != compactJSON(t, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", got, compactJSON(t, tt.want))
			}
			if _, err := m.RenderChat(nil, c); err != nil {
				t.Errorf("RenderChat: %v", err)
			}
		})
	}
}

// compactJSON is s as encoding/json writes a Conversation: raw values kept as they are.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var c Conversation
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	b, _ := json.Marshal(&c)
	return string(b)
}

// TestContinueFinalMessage checks the cut transformers makes after the final message.
func TestContinueFinalMessage(t *testing.T) {
	m, err := parseChatOnly(chatMLConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ content, want string }{
		{"Once upon", "<|im_start|>user\nWrite<|im_end|>\n<|im_start|>assistant\nOnce upon"},
		{"Once upon ", "<|im_start|>user\nWrite<|im_end|>\n<|im_start|>assistant\nOnce upon "},
	} {
		c := &Conversation{ContinueFinalMessage: true, Messages: []Message{{Role: "user", Content: jstr("Write")}, {Role: "assistant", Content: jstr(tt.content)}}}
		got, err := m.RenderChat(nil, c)
		if err != nil || string(got) != tt.want {
			t.Errorf("%q: got %q, %v; want %q", tt.content, got, err, tt.want)
		}
	}
}
