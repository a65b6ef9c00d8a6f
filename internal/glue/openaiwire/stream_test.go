package openaiwire_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
)

func TestParseStreamChunk(t *testing.T) {
	for _, tc := range []struct {
		data           string
		token          bool
		text           string
		choices        int
		prompt, cached int
		hasUsage       bool
		errMsg         string
	}{
		{data: `{"choices":[{"delta":{"role":"assistant"}}]}`, choices: 1},                        // a chat stream's opening
		{data: `{"choices":[{"delta":{"content":"Hel"}}]}`, token: true, text: "Hel", choices: 1}, // chat content
		{data: `{"choices":[{"text":"lo"}]}`, token: true, text: "lo", choices: 1},                // completions
		{data: `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, token: true, choices: 1},    // reasoning
		{data: `{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, token: true, choices: 1},   // tool calls
		{data: `{"choices":[{"delta":{"tool_calls":null}}]}`, choices: 1},                         // null tool calls are none
		{data: `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":12}}}`, hasUsage: true, prompt: 9, cached: 9},
		{data: `{"choices":[{"delta":{}}],"usage":null}`, choices: 1},
		{data: `{"error":{"message":"engine died"}}`, errMsg: "engine died"},
		{data: `{"error":{}}`, errMsg: "the server reported an error"},
	} {
		c, err := openaiwire.ParseStreamChunk([]byte(tc.data))
		if err != nil {
			t.Errorf("%s: %v", tc.data, err)
			continue
		}
		if c.Token != tc.token || c.Text != tc.text || c.Choices != tc.choices || c.Error != tc.errMsg || (c.Usage != nil) != tc.hasUsage {
			t.Errorf("%s: got %+v", tc.data, c)
		}
		if c.Usage != nil && (c.Usage.PromptTokens != tc.prompt || c.Usage.Cached() != tc.cached) {
			t.Errorf("%s: usage %+v, cached %d", tc.data, *c.Usage, c.Usage.Cached())
		}
		if openaiwire.ChunkHasUsage([]byte(tc.data)) != tc.hasUsage {
			t.Errorf("%s: ChunkHasUsage = %v", tc.data, !tc.hasUsage)
		}
	}
	for _, bad := range []string{"", "[DONE]", "{", `{"choices":"x"}`} {
		if _, err := openaiwire.ParseStreamChunk([]byte(bad)); !errors.Is(err, openaiwire.ErrChunk) {
			t.Errorf("%q: error %v, want ErrChunk", bad, err)
		}
	}
	for ct, want := range map[string]bool{"text/event-stream": true, "text/event-stream; charset=utf-8": true, "application/json": false, "": false, "text/event-stream;;": false} {
		if got := openaiwire.IsEventStream(ct); got != want {
			t.Errorf("IsEventStream(%q) = %v", ct, got)
		}
	}
}

// FuzzParseStreamChunk: any bytes give a chunk or ErrChunk, never a panic, and ChunkHasUsage
// (the cheap pre-check) never misses a usage object the parse finds.
func FuzzParseStreamChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"delta":{"content":"x"}}]}`, `{"choices":[],"usage":{"prompt_tokens":1}}`,
		`{"error":{"message":"m"}}`, `{"usage" : {}}`, `"usage":`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := openaiwire.ParseStreamChunk(data)
		if err != nil {
			if !errors.Is(err, openaiwire.ErrChunk) {
				t.Fatalf("error %v does not wrap ErrChunk", err)
			}
			return
		}
		if c.Usage != nil && !openaiwire.ChunkHasUsage(data) {
			t.Fatalf("ChunkHasUsage missed the usage of %q", data)
		}
		if c.Usage != nil && (c.Usage.Cached() < 0 || c.Usage.Cached() > max(c.Usage.PromptTokens, 0)) {
			t.Fatalf("Cached() = %d outside [0, %d]", c.Usage.Cached(), c.Usage.PromptTokens)
		}
	})
}

// A reader of a completion stream: skip chunks cheaply after the first token, parse the ones
// that carry output before it and the usage chunk at the end. Safe for concurrent use: the
// functions are pure.
func ExampleParseStreamChunk() {
	events := []string{
		`{"choices":[{"delta":{"role":"assistant"}}]}`,
		`{"choices":[{"delta":{"content":"Hello"}}]}`,
		`{"choices":[{"delta":{"content":" world"}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}`,
		"[DONE]",
	}
	first := false
	for _, data := range events {
		if data == string(openaiwire.DoneData) {
			fmt.Println("done")
			break
		}
		if first && !openaiwire.ChunkHasUsage([]byte(data)) {
			continue // after the first token only the usage matters here
		}
		c, err := openaiwire.ParseStreamChunk([]byte(data))
		if err != nil {
			panic(err)
		}
		if c.Token && !first {
			first = true
			fmt.Printf("first token: %q\n", c.Text)
		}
		if c.Usage != nil {
			fmt.Println("usage:", c.Usage.PromptTokens, "prompt,", c.Usage.Cached(), "cached,", c.Usage.CompletionTokens, "out")
		}
	}
	// Output:
	// first token: "Hello"
	// usage: 12 prompt, 8 cached, 2 out
	// done
}
