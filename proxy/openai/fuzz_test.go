package openai_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// FuzzParse compares Parse with encoding/json decoding into map[string]any, whose keys are
// exact as a Python backend's are: whatever Parse accepts, the reference must read the
// same way, and AppendUpstream must change only what it says it changes.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.body), tc.ep == openai.Completions)
	}
	f.Add(chatBody(4, 40), false)
	f.Add([]byte(`{"model":"m","prompt":["a\u00e9\ud83d\ude00"],"stream":true,"stream_options":{"include_usage":null},"priority":1}`), true)
	f.Fuzz(func(t *testing.T, body []byte, completions bool) {
		ep := openai.Chat
		if completions {
			ep = openai.Completions
		}
		_ = openai.Message{Content: body}.AppendText(nil) // must not panic on anything
		r, err := openai.Parse(body, ep, openai.ParseLimits{MaxN: 4})
		if err != nil {
			checkFuzzError(t, body, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted invalid JSON %q", body)
		}
		ref := decode(t, body)
		compareRequest(t, r, ref)

		up := openaiwire.AppendUpstream(r, nil)
		if !json.Valid(up) {
			t.Fatalf("AppendUpstream(%q) = %q, not valid JSON", body, up)
		}
		want := decode(t, body)
		delete(want, "priority")
		if r.Stream && !r.IncludeUsage {
			opts, _ := want["stream_options"].(map[string]any)
			if opts == nil {
				opts = map[string]any{}
			}
			opts["include_usage"] = true
			want["stream_options"] = opts
		}
		if got := decode(t, up); !reflect.DeepEqual(got, want) {
			t.Fatalf("AppendUpstream(%q) = %q\ndecodes to %v\n      want %v", body, up, got, want)
		}
		if !r.HasPriority && (!r.Stream || r.IncludeUsage) && string(up) != string(body) {
			t.Fatalf("AppendUpstream(%q) = %q, want the body unchanged", body, up)
		}
	})
}

func checkFuzzError(t *testing.T, body []byte, err error) {
	var e *openai.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Type != openai.TypeInvalidRequest || e.Code == "" {
		t.Fatalf("Parse(%q) error = %#v, want a 400 *Error with a code", body, err)
	}
	valid := json.Valid(body)
	switch {
	case !valid && e.Code != "invalid_json" && e.Code != "invalid_utf8":
		t.Fatalf("Parse(%q) = %v on invalid JSON, want invalid_json", body, err)
	case valid && e.Code == "invalid_json" &&
		!strings.Contains(e.Message, "nesting deeper") && !strings.Contains(e.Message, "must be a JSON object"):
		t.Fatalf("Parse(%q) = %v on valid JSON", body, err)
	}
}

// decode decodes b as encoding/json does, numbers kept as their literals (a float64 cannot
// hold 1e700, which Python reads as inf).
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("encoding/json cannot decode %q: %v", b, err)
	}
	return m
}

// integer returns the JSON integer v, or false.
func integer(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(n))
	return i, err == nil
}

// compareRequest checks r against what encoding/json read of the same body.
func compareRequest(t *testing.T, r *openai.Request, ref map[string]any) {
	t.Helper()
	fail := func(field string, got, want any) {
		t.Helper()
		t.Fatalf("body %q: %s = %#v, encoding/json reads %#v", r.Body, field, got, want)
	}
	if want, _ := ref["model"].(string); r.Model != want {
		fail("Model", r.Model, ref["model"])
	}
	if want := ref["stream"] == true; r.Stream != want {
		fail("Stream", r.Stream, ref["stream"])
	}
	opts, _ := ref["stream_options"].(map[string]any)
	if want := opts["include_usage"] == true; r.IncludeUsage != want {
		fail("IncludeUsage", r.IncludeUsage, ref["stream_options"])
	}
	wantN := 1
	if n, ok := integer(ref["n"]); ok {
		wantN = n
	}
	if r.N != wantN {
		fail("N", r.N, ref["n"])
	}
	wantMax := 0
	if v, ok := integer(ref["max_tokens"]); ok {
		wantMax = v
	}
	if v, ok := integer(ref["max_completion_tokens"]); ok && r.API == openai.Chat {
		wantMax = v
	}
	if r.MaxTokens != wantMax {
		fail("MaxTokens", r.MaxTokens, wantMax)
	}
	if want, _ := ref["user"].(string); r.User != want {
		fail("User", r.User, ref["user"])
	}
	if want, _ := ref["cache_salt"].(string); r.CacheSalt != want {
		fail("CacheSalt", r.CacheSalt, ref["cache_salt"])
	}
	if _, want := ref["priority"]; r.HasPriority != want {
		fail("HasPriority", r.HasPriority, want)
	}
	if r.API == openai.Completions {
		comparePrompt(t, r, ref["prompt"])
		return
	}
	msgs, _ := ref["messages"].([]any)
	if len(r.Messages) != len(msgs) {
		fail("len(Messages)", len(r.Messages), len(msgs))
	}
	var prompt strings.Builder
	for i, m := range r.Messages {
		want := msgs[i].(map[string]any)
		if m.Role != want["role"] {
			fail("Messages[i].Role", m.Role, want["role"])
		}
		text := contentText(want["content"])
		if got := string(m.AppendText(nil)); got != text {
			fail("Messages[i].AppendText", got, text)
		}
		prompt.WriteString(m.Role + "\n" + text + "\n")
	}
	if got := string(r.AppendPrompt(nil)); got != prompt.String() {
		fail("AppendPrompt", got, prompt.String())
	}
}

// contentText is the reference for Message.AppendText.
func contentText(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if p := p.(map[string]any); p["type"] == "text" {
				b.WriteString(p["text"].(string))
			}
		}
		return b.String()
	}
	return ""
}

func comparePrompt(t *testing.T, r *openai.Request, want any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(r.Prompt))
	d.UseNumber()
	var got any
	if err := d.Decode(&got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q: Prompt = %s, encoding/json reads %#v", r.Body, r.Prompt, want)
	}
	text, isText := want.(string)
	if a, ok := want.([]any); ok && len(a) == 1 {
		text, isText = a[0].(string)
	}
	if s, ok := r.PromptText(); s != text || ok != isText {
		t.Fatalf("body %q: PromptText = %q, %v, want %q, %v", r.Body, s, ok, text, isText)
	}
	wantPrompt := text
	if !isText {
		wantPrompt = string(r.Prompt)
	}
	if got := string(r.AppendPrompt(nil)); got != wantPrompt {
		t.Fatalf("body %q: AppendPrompt = %q, want %q", r.Body, got, wantPrompt)
	}
}
