package simfleet

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

// With Options.Tokens, the prompts of all three APIs and /tokenize's messages are the
// table's ids; a request not in the table is a 400.
func TestTokenTable(t *testing.T) {
	msgs := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}}
	chat := map[string]any{"model": "", "max_tokens": 4, "messages": msgs}
	messages := map[string]any{"model": "", "max_tokens": 4, "system": "be brief",
		"messages": []map[string]any{{"role": "user", "content": "hello"}}}
	responses := map[string]any{"model": "", "max_output_tokens": 4, "store": false, "instructions": "be brief", "input": "hello"}
	ids := func(n, base uint32) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = base + uint32(i)
		}
		return out
	}
	table := TokenTable{}
	add := func(api openai.API, body any, v []uint32) {
		b, _ := json.Marshal(body)
		key, err := TableKey(api, b)
		if err != nil {
			t.Fatal(err)
		}
		table[key] = v
	}
	add(openai.Chat, chat, ids(37, 1000))
	add(openai.Messages, messages, ids(41, 2000))
	add(openai.Responses, responses, ids(43, 3000))
	url := startFleet(t, 1, func(_ int, o *Options) { o.Tokens = table }).URLs()[0]

	// The order of top-level fields, white space and fields outside the prompt do not
	// change the key.
	reordered := []byte(`{ "max_tokens": 4, "stream": false, "messages": [{"content": "be brief", "role": "system"}, {"content":"hello","role":"user"}], "model": "" }`)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(reordered))
	if err != nil {
		t.Fatal(err)
	}
	if got := decode[chatResponse](t, resp, http.StatusOK); got.Usage == nil || got.Usage.PromptTokens != 37 {
		t.Errorf("chat: usage %+v, want 37 prompt tokens", got.Usage)
	}
	var m struct {
		Usage struct {
			Input int `json:"input_tokens"`
		}
	}
	decodeInto(t, post(t, url+"/v1/messages", messages), &m)
	if m.Usage.Input != 41 {
		t.Errorf("messages: %d input tokens, want 41", m.Usage.Input)
	}
	var c struct {
		Input int `json:"input_tokens"`
	}
	decodeInto(t, post(t, url+"/v1/messages/count_tokens", messages), &c)
	if c.Input != 41 {
		t.Errorf("count_tokens: %d, want 41", c.Input)
	}
	var r struct {
		Usage struct {
			Input int `json:"input_tokens"`
		}
	}
	decodeInto(t, post(t, url+"/v1/responses", responses), &r)
	if r.Usage.Input != 43 {
		t.Errorf("responses: %d input tokens, want 43", r.Usage.Input)
	}
	tok := decode[struct{ Tokens []uint32 }](t, post(t, url+"/tokenize", map[string]any{"model": "", "messages": msgs}), http.StatusOK)
	if !slices.Equal(tok.Tokens, ids(37, 1000)) {
		t.Errorf("tokenize: %v, want the chat prompt's ids", tok.Tokens)
	}
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/v1/chat/completions", map[string]any{"model": "", "max_tokens": 4, "messages": msgs[1:]}},
		{"/v1/chat/completions", json.RawMessage(`{"model": "", "max_tokens": 4, "messages": [{"content": "be brief", "role": "system"}, {"role": "user", "content": "hello"}]}`)}, // keys in another order
		{"/v1/messages", map[string]any{"model": "", "max_tokens": 4, "messages": messages["messages"]}},
		{"/v1/responses", map[string]any{"model": "", "input": "bye"}},
		{"/tokenize", map[string]any{"model": "", "prompt": "hello"}},
	} {
		resp := post(t, url+tc.path, tc.body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s not in the table: status %d, want 400", tc.path, resp.StatusCode)
		}
	}
}
