package simfleet

import (
	"encoding/json"
	"testing"
)

// FuzzPromptTokens feeds arbitrary JSON to the completions prompt decoder: it must not panic,
// and whatever it accepts as text must tokenize like the text does.
func FuzzPromptTokens(f *testing.F) {
	for _, s := range []string{`"hello"`, `["a"]`, `["a","b"]`, `[1,2,3]`, `[[1,2]]`, `null`, `{}`, `[-1]`, `""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tokens, err := promptTokens(raw)
		if err != nil {
			return
		}
		var text string
		if json.Unmarshal(raw, &text) == nil && TokenCount(text) != len(tokens) {
			t.Fatalf("prompt %q: %d tokens, TokenCount %d", text, len(tokens), TokenCount(text))
		}
	})
}

// FuzzRenderChat renders arbitrary message lists: no panic, and the rendered prompt of a
// conversation is a prefix of the rendering with one more message.
func FuzzRenderChat(f *testing.F) {
	f.Add([]byte(`[{"role":"user","content":"hi"}]`), "next")
	f.Add([]byte(`[{"role":"system","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]`), "")
	f.Fuzz(func(t *testing.T, raw []byte, more string) {
		var msgs []Message
		if json.Unmarshal(raw, &msgs) != nil {
			return
		}
		a, err := RenderChat(msgs, false)
		if err != nil {
			return
		}
		b, err := RenderChat(append(msgs, TextMessage("user", more)), true)
		if err != nil || len(b) < len(a) || b[:len(a)] != a {
			t.Fatalf("rendering %q is not extended by %q (%v)", a, b, err)
		}
	})
}
