package simfleet

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func decodeInto(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// Messages: a second turn that sends back the first's answer finds the conversation cached,
// and reports it as Anthropic does (input_tokens without the cache reads).
func TestMessages(t *testing.T) {
	url := startFleet(t, 1, nil).URLs()[0] + "/v1/messages"
	system := strings.Repeat("A system prompt long enough to fill several blocks. ", 8)
	turn1 := map[string]any{"model": "", "max_tokens": 8, "system": system,
		"messages": []map[string]any{{"role": "user", "content": "hello"}}}
	var a struct {
		Type    string `json:"type"`
		Content []struct{ Type, Text string }
		Usage   struct {
			Input     int `json:"input_tokens"`
			Output    int `json:"output_tokens"`
			CacheRead int `json:"cache_read_input_tokens"`
		}
	}
	decodeInto(t, post(t, url, turn1), &a)
	if a.Type != "message" || len(a.Content) != 1 || a.Content[0].Text == "" || a.Usage.Input == 0 || a.Usage.Output == 0 {
		t.Fatalf("turn 1: %+v", a)
	}
	turn2 := map[string]any{"model": "", "max_tokens": 8, "system": system, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "hello"},
			{"role": "assistant", "content": []map[string]string{{"type": "text", "text": a.Content[0].Text}}},
			{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t", "content": "ok"}}}}}
	resp := post(t, url, turn2)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := string(body)
	for _, want := range []string{"event: message_start", "event: content_block_delta", "event: message_delta", "event: message_stop"} {
		if !strings.Contains(events, want) {
			t.Errorf("stream lacks %q:\n%s", want, events)
		}
	}
	if !strings.Contains(events, `"cache_read_input_tokens":`) || strings.Contains(events, `"cache_read_input_tokens":0`) {
		t.Errorf("turn 2 reports no cache reads:\n%s", events)
	}
	// Errors in Anthropic's shape.
	resp = post(t, url, map[string]any{"model": "other", "max_tokens": 1, "messages": []map[string]any{{"role": "user", "content": "x"}}})
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.HasPrefix(string(body), `{"type":"error","error":{"type":"not_found_error"`) {
		t.Errorf("unknown model: %d %s", resp.StatusCode, body)
	}
}

// Responses: a stored response is continued by previous_response_id, with its conversation
// cached; an unknown id is a 404 naming the field.
func TestResponses(t *testing.T) {
	url := startFleet(t, 1, nil).URLs()[0] + "/v1/responses"
	type response struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			Content []struct{ Type, Text string }
		}
		Usage struct {
			Input   int `json:"input_tokens"`
			Output  int `json:"output_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		}
	}
	var r1 response
	decodeInto(t, post(t, url, map[string]any{"model": "", "instructions": strings.Repeat("Be precise and brief. ", 16), "input": "hello"}), &r1)
	if r1.ID == "" || len(r1.Output) != 1 || r1.Output[0].Content[0].Text == "" || r1.Usage.Input == 0 {
		t.Fatalf("turn 1: %+v", r1)
	}
	var r2 response
	decodeInto(t, post(t, url, map[string]any{"model": "", "previous_response_id": r1.ID, "input": "more", "max_output_tokens": 3}), &r2)
	if r2.Usage.Details.Cached == 0 || r2.Usage.Input <= r1.Usage.Input {
		t.Errorf("turn 2 usage %+v, want the conversation cached (turn 1: %+v)", r2.Usage, r1.Usage)
	}
	resp := post(t, url, map[string]any{"model": "", "previous_response_id": r2.ID, "input": "go on", "stream": true})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"event: response.created", "event: response.output_text.delta", `"cached_tokens":`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("stream lacks %q", want)
		}
	}
	if !strings.Contains(string(body), "event: response.completed") && !strings.Contains(string(body), "event: response.incomplete") {
		t.Errorf("stream has no last event:\n%s", body)
	}
	resp = post(t, url, map[string]any{"model": "", "previous_response_id": "resp_nope", "input": "x"})
	var e struct {
		Error struct{ Param, Code string }
	}
	decodeInto(t, resp, &e)
	if resp.StatusCode != 404 || e.Error.Param != "previous_response_id" {
		t.Errorf("unknown previous response: %d %+v", resp.StatusCode, e)
	}
	// Not stored: cannot be continued.
	var r3 response
	decodeInto(t, post(t, url, map[string]any{"model": "", "input": "x", "store": false}), &r3)
	if resp := post(t, url, map[string]any{"model": "", "input": "y", "previous_response_id": r3.ID}); resp.StatusCode != 404 {
		t.Errorf("continuing an unstored response: %d, want 404", resp.StatusCode)
	}
}

func TestEmbeddings(t *testing.T) {
	url := startFleet(t, 1, nil).URLs()[0] + "/v1/embeddings"
	type answer struct {
		Data []struct {
			Index     int
			Embedding []float64
		}
		Usage struct {
			Prompt int `json:"prompt_tokens"`
		}
	}
	var a, b answer
	decodeInto(t, post(t, url, map[string]any{"model": "", "input": []string{"one", "two words"}}), &a)
	decodeInto(t, post(t, url, map[string]any{"model": "", "input": "one", "dimensions": 16}), &b)
	if len(a.Data) != 2 || len(a.Data[0].Embedding) != defaultDimensions || a.Usage.Prompt == 0 {
		t.Fatalf("embeddings: %+v", a)
	}
	for i := range a.Data[0].Embedding {
		if a.Data[0].Embedding[i] != b.Data[0].Embedding[i] {
			t.Fatalf("the same input embeds differently: %v vs %v", a.Data[0].Embedding, b.Data[0].Embedding)
		}
	}
	if resp := post(t, url, map[string]any{"model": "", "input": map[string]any{}}); resp.StatusCode != 400 {
		t.Errorf("bad input: %d, want 400", resp.StatusCode)
	}
}

// The gateway's tokenizer renders Messages and Responses bodies as the server does, so its
// hashes are the engine's.
func TestTokenizerRendersAPIs(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":4,"system":"S","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"ls","input":{"a": 1}}]}]}`)
	text, err := RenderMessages(body)
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<tool_call>{\"name\":\"ls\",\"arguments\":{\"a\":1}}</tool_call><|im_end|>\n<|im_start|>assistant\n"
	if err != nil || text != want {
		t.Errorf("RenderMessages = %q, %v; want %q", text, err, want)
	}
	text, err = RenderResponses([]byte(`{"model":"m","instructions":"S","input":[{"role":"developer","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call_output","call_id":"c","output":"ok"}]}`))
	want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>system\nhi<|im_end|>\n<|im_start|>tool\n<tool_response>ok</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if err != nil || text != want {
		t.Errorf("RenderResponses = %q, %v; want %q", text, err, want)
	}
}

// count_tokens counts the tokens the Messages request would render to; embeddings come as
// floats or, asked for, as base64 of the same float32s; an unknown encoding is a 400.
func TestCountTokensAndBase64(t *testing.T) {
	base := startFleet(t, 1, nil).URLs()[0]
	body := map[string]any{"model": "", "system": "be brief", "messages": []map[string]any{{"role": "user", "content": "hello there"}}}
	var c struct {
		InputTokens int `json:"input_tokens"`
	}
	decodeInto(t, post(t, base+"/v1/messages/count_tokens", body), &c)
	raw, _ := json.Marshal(body)
	text, err := RenderMessages(raw)
	if err != nil || c.InputTokens != len(Tokenize(text)) || c.InputTokens == 0 {
		t.Errorf("count_tokens = %d, want %d (%v)", c.InputTokens, len(Tokenize(text)), err)
	}

	var floats struct {
		Data []struct{ Embedding []float64 }
	}
	decodeInto(t, post(t, base+"/v1/embeddings", map[string]any{"model": "", "input": "a b"}), &floats)
	var b64 struct{ Data []struct{ Embedding string } }
	decodeInto(t, post(t, base+"/v1/embeddings", map[string]any{"model": "", "input": "a b", "encoding_format": "base64"}), &b64)
	if len(floats.Data) != 1 || len(b64.Data) != 1 || b64.Data[0].Embedding != base64Floats(floats.Data[0].Embedding) {
		t.Errorf("base64 %v is not the floats %v encoded", b64.Data, floats.Data)
	}
	resp := post(t, base+"/v1/embeddings", map[string]any{"model": "", "input": "a", "encoding_format": "hex"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("encoding_format hex: %d, want 400", resp.StatusCode)
	}
}
