package openai_test

import (
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

func TestAppendText(t *testing.T) {
	for _, tc := range []struct {
		content, want string
	}{
		{`"plain"`, "plain"},
		{`""`, ""},
		{`"a\nb\tc\r\"d\"\\e\/f\b\f"`, "a\nb\tc\r\"d\"\\e/f\b\f"},
		{`"caf\u00e9 \u00E9"`, "café é"},
		{`"\ud83d\ude00!"`, "😀!"},
		{`"\ud83d"`, "\ufffd"},
		{`"\ude00\ud83d\ude00"`, "\ufffd😀"},
		{`"\ud83d\ud83d\ude00"`, "\ufffd😀"},
		{`"\ud83dx"`, "\ufffdx"},
		{`"\u0000"`, "\x00"},
		{`"日本"`, "日本"},
		{`null`, ""},
		{`[]`, ""},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x","text":"no"}},{"text":"b\n\u00e9","type":"text"}]`, "ab\né"},
		{` [ { "type" : "text" , "text" : "x" } , { "type" : "t\u0065xt", "text" : "y" } ] `[1:], "xy"},
		{`[{"type":"input_audio","text":"not text"},{"type":"text","text":"","extra":[1,{"text":"z"}]}]`, ""},
		{`[{"type":"refusal","refusal":"no"}]`, ""},
	} {
		m := openai.Message{Role: "user", Content: []byte(tc.content)}
		if got := string(m.AppendText([]byte("»"))); got != "»"+tc.want {
			t.Errorf("AppendText(%s) = %q, want %q", tc.content, got, "»"+tc.want)
		}
	}
	if got := (openai.Message{Role: "assistant"}).AppendText(nil); len(got) != 0 {
		t.Errorf("AppendText of absent content = %q, want nothing", got)
	}
}

// AppendText on content that is not from Parse must not panic.
func TestAppendTextMalformed(t *testing.T) {
	for _, c := range []string{
		`"`, `"\`, `"\u12"`, `"\ud83d\u"`, `[`, `[{`, `[{"type"`, `[{"type":`, `[{"type":"text","text":"a`,
		`[{"type":"text","text":"a\"}]`, `[{"type":"text","text"}]`, `[{"}]`, `[1,`, `[{"a":}]`, `[[[[`, `[{"text":"x","type":"text",`,
		`[ ,,, {}}}]`, `{}`, `[{"type":"text","text":"x\`,
	} {
		m := openai.Message{Content: []byte(c)}
		_ = m.AppendText(nil)
	}
}

func TestAppendPrompt(t *testing.T) {
	for _, tc := range []struct {
		ep         openai.API
		body, want string
		text       string
		isText     bool
	}{
		{openai.Chat, `{"model":"m","messages":[{"role":"system","content":"Be \"brief\"."},{"role":"user","content":[{"type":"text","text":"caf\u00e9"},{"type":"text","text":" \ud83d\ude00"}]},{"role":"assistant","tool_calls":[]}]}`,
			"system\nBe \"brief\".\nuser\ncafé 😀\nassistant\n\n", "", false},
		{openai.Completions, `{"model":"m","prompt":"Once\nupon \u00e9"}`, "Once\nupon é", "Once\nupon é", true},
		{openai.Completions, `{"model":"m","prompt":["Once"]}`, "Once", "Once", true},
		{openai.Completions, `{"model":"m","prompt":[ "a", "b" ]}`, `[ "a", "b" ]`, "", false},
		{openai.Completions, `{"model":"m","prompt":[1, 2]}`, `[1, 2]`, "", false},
		{openai.Completions, `{"model":"m","prompt":[[1],[2]]}`, `[[1],[2]]`, "", false},
	} {
		r, err := openai.Parse([]byte(tc.body), tc.ep, openai.ParseLimits{})
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.body, err)
		}
		if got := string(r.AppendPrompt([]byte("»"))); got != "»"+tc.want {
			t.Errorf("AppendPrompt(%s) = %q, want %q", tc.body, got, "»"+tc.want)
		}
		if text, ok := r.PromptText(); text != tc.text || ok != tc.isText {
			t.Errorf("PromptText(%s) = %q, %v, want %q, %v", tc.body, text, ok, tc.text, tc.isText)
		}
	}
}
