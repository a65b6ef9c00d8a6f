package openai_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

var apiEndpoints = [...]openai.API{openai.Messages, openai.Responses, openai.Embeddings}

// FuzzParseAPIs checks Parse on Messages, Responses and Embeddings bodies against
// encoding/json: whatever it accepts is JSON the reference reads the same way, and
// AppendUpstream removes the priority and nothing else.
func FuzzParseAPIs(f *testing.F) {
	for _, tc := range apiCases {
		for i, ep := range apiEndpoints {
			if ep == tc.ep {
				f.Add([]byte(tc.body), uint8(i))
			}
		}
	}
	for _, tc := range parseCases {
		f.Add([]byte(tc.body), uint8(0))
	}
	for _, tc := range checkCases {
		for i, ep := range apiEndpoints {
			if ep == tc.ep {
				f.Add([]byte(tc.body), uint8(i))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		ep := apiEndpoints[int(which)%len(apiEndpoints)]
		r, err := openai.Parse(body, ep, openai.ParseLimits{})
		if err != nil {
			checkFuzzError(t, body, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted invalid JSON %q", body)
		}
		ref := decode(t, body)
		if bad := refChecks(ep, ref); bad != "" {
			t.Fatalf("Parse accepted %q, whose %s no engine takes", body, bad)
		}
		if want, _ := ref["model"].(string); r.Model != want || want == "" {
			t.Fatalf("body %q: Model %q, encoding/json reads %#v", body, r.Model, ref["model"])
		}
		if want := ref["stream"] == true && ep != openai.Embeddings; r.Stream != want {
			t.Fatalf("body %q: Stream %v, encoding/json reads %#v", body, r.Stream, ref["stream"])
		}
		switch ep {
		case openai.Messages:
			meta, _ := ref["metadata"].(map[string]any)
			if want, _ := meta["user_id"].(string); r.User != want {
				t.Fatalf("body %q: User %q, encoding/json reads %#v", body, r.User, meta)
			}
			if want, ok := integer(ref["max_tokens"]); !ok || r.MaxTokens != want {
				t.Fatalf("body %q: MaxTokens %d, encoding/json reads %#v", body, r.MaxTokens, ref["max_tokens"])
			}
			if msgs, _ := ref["messages"].([]any); len(msgs) != len(r.Messages) {
				t.Fatalf("body %q: %d messages, encoding/json reads %d", body, len(r.Messages), len(msgs))
			}
		case openai.Responses:
			if want, _ := ref["previous_response_id"].(string); r.PreviousResponseID != want {
				t.Fatalf("body %q: PreviousResponseID %q, encoding/json reads %#v", body, r.PreviousResponseID, ref["previous_response_id"])
			}
			if want := ref["store"] != false; r.Store != want {
				t.Fatalf("body %q: Store %v, encoding/json reads %#v", body, r.Store, ref["store"])
			}
		}
		_ = r.AppendPrompt(nil) // must not panic
		up := openaiwire.AppendUpstream(r, nil)
		want := decode(t, body)
		delete(want, "priority")
		got := decode(t, up)
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("AppendUpstream(%q) = %q, want the body without priority", body, up)
		}
	})
}

// FuzzParseEvent feeds arbitrary data to the readers of answers and stream events of every
// endpoint: they must not panic, and the counts they return are never negative nor beyond
// the clamp.
func FuzzParseEvent(f *testing.F) {
	for _, d := range []string{
		`{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":16,"output_tokens":1}}}`,
		`{"type":"message_delta","usage":{"output_tokens":-12}}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":9e99,"input_tokens_details":{"cached_tokens":3},"output_tokens":2}}}`,
		`{"type":"error","error":{"message":"m"}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	} {
		for ep := openai.Chat; ep <= openai.Embeddings; ep++ {
			f.Add([]byte(d), uint8(ep))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		ep := openai.API(which%5) + 1
		check := func(u *openaiwire.TokenUsage) {
			if u == nil {
				return
			}
			const limit = 3 << 40
			if ep != openai.Chat && ep != openai.Completions && ep != openai.Embeddings &&
				(u.PromptTokens < 0 || u.PromptTokens > limit || u.CompletionTokens < 0 || u.CompletionTokens > limit) {
				t.Fatalf("%v %q: usage %+v out of range", ep, data, *u)
			}
			if c := u.Cached(); c < 0 || c > max(u.PromptTokens, 0) {
				t.Fatalf("%v %q: cached %d out of range", ep, data, c)
			}
		}
		if c, err := openaiwire.ParseEvent(ep, data); err == nil {
			check(c.Usage)
		}
		if a, err := openaiwire.ParseAnswer(ep, data); err == nil {
			check(a.Usage)
		}
		_ = openaiwire.IsDeltaEvent(data)
	})
}

// FuzzErrorFor checks that an error renders as valid JSON and a well-formed event in every
// API's shape, whatever its strings hold.
func FuzzErrorFor(f *testing.F) {
	f.Add("msg \"quoted\"\n", "messages[0].content", "invalid_type", 400)
	f.Add("\xff\u2028", "", "", 529)
	f.Fuzz(func(t *testing.T, msg, param, code string, status int) {
		e := &openai.Error{Status: status, Type: openai.TypeInvalidRequest, Code: code, Param: param, Message: msg}
		for ep := openai.Chat; ep <= openai.Embeddings; ep++ {
			if b := openaiwire.AppendJSONFor(e, ep, nil); !json.Valid(b) {
				t.Fatalf("AppendJSONFor(%v) = %q, not JSON", ep, b)
			}
			ev := string(openaiwire.AppendEventFor(e, ep, nil))
			_, data, ok := strings.Cut(ev, "data: ")
			if !ok || !strings.HasSuffix(ev, "\n\n") || strings.Count(ev, "\n") != strings.Count(ev[:len(ev)-len(data)], "\n")+2 ||
				!json.Valid([]byte(strings.TrimSuffix(data, "\n\n"))) {
				t.Fatalf("AppendEventFor(%v) = %q, not one event with JSON data", ep, ev)
			}
		}
	})
}
