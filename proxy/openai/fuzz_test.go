package openai_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
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
	for _, tc := range checkCases {
		if tc.ep == 0 || tc.ep == openai.Completions {
			f.Add([]byte(tc.body), tc.ep == openai.Completions)
		}
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
		if bad := refChecks(ep, ref); bad != "" {
			t.Fatalf("Parse accepted %q, whose %s no engine takes", body, bad)
		}

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

// refChecks is the reference for the checks of the fields Parse passes on: it returns the
// first field of the decoded body ref (numbers as json.Number) that no engine takes on ep's
// endpoint, as the checks' documentation states them, or "". It is written apart from the
// parser (encoding/json's view, strconv's numbers) so that FuzzParse and FuzzParseAPIs can
// compare the two.
func refChecks(ep openai.API, ref map[string]any) string {
	isFloat := func(v any, ok func(float64) bool) bool {
		n, isNum := v.(json.Number)
		if !isNum {
			return false
		}
		f, _ := strconv.ParseFloat(string(n), 64)
		return !math.IsInf(f, 0) && ok(f)
	}
	anyFloat := func(float64) bool { return true }
	isInt := func(v any, lo, hi int64) bool {
		n, isNum := v.(json.Number)
		if !isNum {
			return false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil && lo <= i && i <= hi
	}
	isList := func(v any, elem func(any) bool) bool {
		l, ok := v.([]any)
		for _, e := range l {
			ok = ok && elem(e)
		}
		return ok
	}
	isString := func(v any) bool { _, ok := v.(string); return ok }
	isBool := func(v any) bool { _, ok := v.(bool); return ok }
	isObject := func(v any) bool { _, ok := v.(map[string]any); return ok }
	isInt64 := func(v any) bool { return isInt(v, math.MinInt64, math.MaxInt64) }
	rules := map[string]func(any) bool{
		"temperature": func(v any) bool { return isFloat(v, func(f float64) bool { return f >= 0 }) },
		"top_p":       func(v any) bool { return isFloat(v, func(f float64) bool { return f > 0 && f <= 1 }) },
	}
	logprobs := func(v any) bool { return isInt(v, 0, openai.DefaultMaxLogprobs) }
	switch ep {
	case openai.Chat, openai.Completions:
		rules["top_k"] = func(v any) bool { return isInt(v, -1, math.MaxInt64) }
		for _, f := range []string{"frequency_penalty", "presence_penalty", "min_p", "repetition_penalty", "length_penalty"} {
			rules[f] = func(v any) bool { return isFloat(v, anyFloat) }
		}
		for _, f := range []string{"seed", "best_of", "min_tokens", "prompt_logprobs", "truncate_prompt_tokens"} {
			rules[f] = isInt64
		}
		for _, f := range []string{"use_beam_search", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "echo", "add_special_tokens"} {
			rules[f] = isBool
		}
		rules["stop"] = func(v any) bool { return isString(v) || isList(v, isString) }
		rules["logit_bias"] = func(v any) bool {
			m, ok := v.(map[string]any)
			for _, x := range m {
				ok = ok && isFloat(x, anyFloat)
			}
			return ok
		}
		rules["stop_token_ids"] = func(v any) bool { return isList(v, isInt64) }
		rules["allowed_token_ids"] = rules["stop_token_ids"]
		rules["bad_words"] = func(v any) bool { return isList(v, isString) }
		rules["response_format"] = isObject
		if ep == openai.Completions {
			rules["logprobs"] = logprobs
			rules["suffix"] = isString
			break
		}
		rules["logprobs"] = isBool
		rules["top_logprobs"] = logprobs
		for _, f := range []string{"add_generation_prompt", "continue_final_message", "parallel_tool_calls", "store"} {
			rules[f] = isBool
		}
		rules["tools"] = func(v any) bool { return isList(v, isObject) }
		rules["tool_choice"] = func(v any) bool { return isString(v) || isObject(v) }
		rules["reasoning_effort"], rules["service_tier"], rules["metadata"] = isString, isString, isObject
	case openai.Responses:
		rules["top_logprobs"] = logprobs
		rules["parallel_tool_calls"], rules["background"] = isBool, isBool
		rules["max_tool_calls"] = isInt64
		rules["truncation"], rules["service_tier"] = isString, isString
		rules["reasoning"], rules["text"], rules["metadata"] = isObject, isObject, isObject
		rules["tool_choice"] = func(v any) bool { return isString(v) || isObject(v) }
		rules["include"] = func(v any) bool { return isList(v, isString) }
	case openai.Messages:
		rules["top_k"] = func(v any) bool { return isInt(v, -1, math.MaxInt64) }
		rules["stop_sequences"] = func(v any) bool { return isList(v, isString) }
		rules["tool_choice"], rules["thinking"] = isObject, isObject
		rules["service_tier"] = isString
	case openai.Embeddings:
		rules = map[string]func(any) bool{"encoding_format": isString, "dimensions": isInt64}
	}
	for name, ok := range rules {
		if v, given := ref[name]; given && v != nil && !ok(v) {
			return name
		}
	}
	// The image of an image_url part of a chat message.
	msgs, _ := ref["messages"].([]any)
	for _, m := range msgs {
		m, _ := m.(map[string]any)
		parts, _ := m["content"].([]any)
		for _, p := range parts {
			if p, _ := p.(map[string]any); ep == openai.Chat && p["type"] == "image_url" {
				img, _ := p["image_url"].(map[string]any)
				if _, ok := img["url"].(string); !ok {
					return "image_url"
				}
			}
		}
	}
	return ""
}
