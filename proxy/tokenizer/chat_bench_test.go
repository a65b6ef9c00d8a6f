package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

// chat20 is a 20-message conversation: a system prompt, two tools, nine user turns, one
// tool-call round, and assistant answers.
func chat20() *Conversation {
	c := &Conversation{AddGenerationPrompt: true, Now: fixedNow}
	c.Messages = append(c.Messages, Message{Role: "system", Content: jstr("You are a helpful assistant. Answer briefly and cite sources.")})
	c.Tools = []json.RawMessage{json.RawMessage(genTools[0]), json.RawMessage(genTools[1])}
	for i := range 9 {
		c.Messages = append(c.Messages, Message{Role: "user", Content: jstr(fmt.Sprintf("Question %d: %s", i, genTexts[i%len(genTexts)]))})
		if i == 4 {
			var tc ToolCall
			tc.ID, tc.Type = "call_1", "function"
			tc.Function.Name = "get_weather"
			tc.Function.Arguments = json.RawMessage(`{"city": "Paris", "unit": "celsius"}`)
			c.Messages = append(c.Messages, Message{Role: "assistant", Content: jstr(""), ToolCalls: []ToolCall{tc}})
			c.Messages = append(c.Messages, Message{Role: "tool", ToolCallID: "call_1", Content: jstr(`{"temp": 21}`)})
			continue
		}
		c.Messages = append(c.Messages, Message{Role: "assistant", Content: jstr(fmt.Sprintf("Answer %d: %s", i, genTexts[(i+3)%len(genTexts)]))})
	}
	c.Messages = c.Messages[:20]
	return c
}

// BenchmarkRenderChat renders a 20-message conversation with each family's template:
// the real ones from USHER_TOKDATA when it is set (see TestRenderFamiliesAgainstJinja2),
// and an inline ChatML template always.
func BenchmarkRenderChat(b *testing.B) {
	models := map[string]*Encoder{}
	m, err := parseChatOnly(chatMLConfig)
	if err != nil {
		b.Fatal(err)
	}
	models["chatml-inline"] = m
	if dir := os.Getenv("USHER_TOKDATA"); dir != "" {
		for _, fam := range []string{"qwen3", "gpt-oss", "deepseek-v3", "mistral"} {
			cfg, err := os.ReadFile(filepath.Join(dir, fam, "tokenizer_config.json"))
			if err != nil {
				continue
			}
			var raw map[string]any
			json.Unmarshal(cfg, &raw)
			if raw["chat_template"] == nil {
				tpl, err := os.ReadFile(filepath.Join(dir, fam, "chat_template.jinja"))
				if err != nil {
					continue
				}
				raw["chat_template"] = string(tpl)
				cfg, _ = json.Marshal(raw)
			}
			if models[fam], err = parseChatOnly(cfg); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := chat20()
	alt := &Conversation{AddGenerationPrompt: true} // 20 messages, user/assistant only, for Mistral v0.1
	for i := range 20 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		alt.Messages = append(alt.Messages, Message{Role: role, Content: jstr(fmt.Sprintf("Turn %d: %s", i, genTexts[i%len(genTexts)]))})
	}
	for _, fam := range []string{"chatml-inline", "qwen3", "gpt-oss", "deepseek-v3", "mistral"} {
		m, ok := models[fam]
		if !ok {
			continue
		}
		chat := c
		if fam == "mistral" {
			chat = alt
		}
		b.Run(fam, func(b *testing.B) {
			dst, err := m.RenderChat(nil, chat)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = m.RenderChat(dst[:0], chat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenderChatLength renders the inline ChatML template over conversations of
// growing length (messages of about 400 bytes): the time grows linearly.
func BenchmarkRenderChatLength(b *testing.B) {
	m, err := parseChatOnly(chatMLConfig)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{2, 20, 200} {
		c := &Conversation{AddGenerationPrompt: true}
		for i := range n {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			c.Messages = append(c.Messages, Message{Role: role, Content: jstr(strings.Repeat(genTexts[i%len(genTexts)]+" ", 400/(len(genTexts[i%len(genTexts)])+1)+1))})
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dst, err := m.RenderChat(nil, c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = m.RenderChat(dst[:0], c)
			}
		})
	}
}

// BenchmarkConversationOf converts a 20-message Anthropic Messages request (text, a tool
// round, tools) to the conversation vLLM renders, and renders it.
func BenchmarkConversationOf(b *testing.B) {
	m, err := parseChatOnly(chatMLConfig)
	if err != nil {
		b.Fatal(err)
	}
	var msgs []string
	for i := range 20 {
		switch {
		case i == 9:
			msgs = append(msgs, `{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]}`)
		case i == 10:
			msgs = append(msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"21C"}]}`)
		case i%2 == 0:
			msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, genTexts[i%len(genTexts)]))
		default:
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":%q}]}`, genTexts[i%len(genTexts)]))
		}
	}
	body := []byte(`{"model":"m","max_tokens":100,"system":"Be brief.","tools":[{"name":"get_weather","description":"Weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"messages":[` + strings.Join(msgs, ",") + `]}`)
	r, err := openai.Parse(body, openai.Messages, openai.ParseLimits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("convert", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.ConversationOf(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("convert+render", func(b *testing.B) {
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			c, err := m.ConversationOf(r)
			if err != nil {
				b.Fatal(err)
			}
			if dst, err = m.RenderChat(dst[:0], c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
