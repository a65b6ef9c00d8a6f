package openai_test

import (
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/usher-llm/usher/proxy/openai"
)

// view is what a test checks of a Request.
type view struct {
	API          openai.API
	Model        string
	Messages     []msg
	Prompt       string
	Stream       bool
	IncludeUsage bool
	MaxTokens    int
	N            int // 0 in a want: 1
	User         string
	CacheSalt    string
	HasPriority  bool
}

type msg struct{ Role, Content string }

func viewOf(r *openai.Request) view {
	v := view{
		API:          r.API,
		Model:        r.Model,
		Prompt:       string(r.Prompt),
		Stream:       r.Stream,
		IncludeUsage: r.IncludeUsage,
		MaxTokens:    r.MaxTokens,
		N:            r.N,
		User:         r.User,
		CacheSalt:    r.CacheSalt,
		HasPriority:  r.HasPriority,
	}
	for _, m := range r.Messages {
		c := string(m.Content)
		if m.Content == nil {
			c = "<absent>"
		}
		v.Messages = append(v.Messages, msg{m.Role, c})
	}
	return v
}

type parseCase struct {
	name  string
	ep    openai.API // 0: Chat
	lim   openai.ParseLimits
	body  string
	want  view   // when code is ""
	code  string // the error's Code
	param string // the error's Param
}

const hi = `[{"role":"user","content":"hi"}]`

var userHi = []msg{{"user", `"hi"`}}

// chat returns a chat body with the given members before the messages.
func chat(members string) string {
	if members != "" {
		members += ","
	}
	return `{"model":"m",` + members + `"messages":` + hi + `}`
}

func completions(members string) string {
	return `{"model":"m",` + members + `}`
}

func deep(n int) string {
	// the top-level object is level 1, the messages array 2, a message 3, ...
	return `{"model":"m","messages":[{"role":"user","content":"x","x":` +
		strings.Repeat("[", n-3) + strings.Repeat("]", n-3) + `}]}`
}

var parseCases = []parseCase{
	// Valid chat bodies.
	{name: "minimal", body: chat(""), want: view{Model: "m", Messages: userHi}},
	{
		name: "full",
		body: `{"model":"llama","messages":[` +
			`{"role":"system","content":"be brief"},` +
			`{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"u"}}]},` +
			`{"role":"assistant","tool_calls":[{"id":"1"}]},` +
			`{"role":"tool","content":"42","tool_call_id":"1"},` +
			`{"role":"developer","content":"d"},{"role":"function","content":"f","name":"g"},` +
			`{"role":"assistant","content":null}],` +
			`"stream":true,"stream_options":{"include_usage":true},"n":1,"max_tokens":100,` +
			`"user":"u1","cache_salt":"salt","priority":5,"temperature":0.5,"tools":[{"a":[1,2,{"b":null}]}]}`,
		want: view{Model: "llama", Messages: []msg{
			{"system", `"be brief"`},
			{"user", `[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"u"}}]`},
			{"assistant", "<absent>"},
			{"tool", `"42"`},
			{"developer", `"d"`},
			{"function", `"f"`},
			{"assistant", "null"},
		}, Stream: true, IncludeUsage: true, MaxTokens: 100, User: "u1", CacheSalt: "salt", HasPriority: true},
	},
	{name: "STREAM is not stream", body: chat(`"STREAM":true`), want: view{Model: "m", Messages: userHi}},
	{name: "Stream is not stream", body: chat(`"Stream":true,"stream":false`), want: view{Model: "m", Messages: userHi}},
	{name: "escaped key", body: chat(`"\u0073tream":true`), want: view{Model: "m", Messages: userHi, Stream: true}},
	{name: "escaped long key", body: chat(`"\u006d\u0061\u0078\u005f\u0063\u006f\u006d\u0070\u006c\u0065\u0074\u0069\u006f\u006e\u005f\u0074\u006f\u006b\u0065\u006e\u0073":7`),
		want: view{Model: "m", Messages: userHi, MaxTokens: 7}},
	{name: "escaped model", body: `{"model":"caf\u00e9\/x","messages":` + hi + `}`, want: view{Model: "café/x", Messages: userHi}},
	{name: "escaped role", body: `{"model":"m","messages":[{"role":"us\u0065r","content":"hi"}]}`, want: view{Model: "m", Messages: userHi}},
	{name: "Model and model", body: `{"Model":"x","model":"m","messages":` + hi + `}`, want: view{Model: "m", Messages: userHi}},
	{name: "max_completion_tokens wins", body: chat(`"max_tokens":10,"max_completion_tokens":20`), want: view{Model: "m", Messages: userHi, MaxTokens: 20}},
	{name: "null max_completion_tokens", body: chat(`"max_completion_tokens":null,"max_tokens":10`), want: view{Model: "m", Messages: userHi, MaxTokens: 10}},
	{name: "max_tokens at limit", body: chat(`"max_tokens":1048576`), want: view{Model: "m", Messages: userHi, MaxTokens: 1 << 20}},
	{
		name: "nulls",
		body: chat(`"stream":null,"stream_options":null,"n":null,"max_tokens":null,"user":null,"cache_salt":null,"priority":null`),
		want: view{Model: "m", Messages: userHi, HasPriority: true},
	},
	{name: "include_usage false", body: chat(`"stream":true,"stream_options":{"include_usage":false}`), want: view{Model: "m", Messages: userHi, Stream: true}},
	{name: "include_usage null", body: chat(`"stream":true,"stream_options":{"include_usage":null,"x":1}`), want: view{Model: "m", Messages: userHi, Stream: true}},
	{name: "whitespace", body: " \t\r\n{ \"model\" :\n\"m\" , \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"hi\" } ] }\n ",
		want: view{Model: "m", Messages: userHi}},
	{name: "unknown duplicates pass", body: chat(`"a":1,"a":2,"Priority":"x"`), want: view{Model: "m", Messages: userHi}},
	{name: "prompt is unknown to chat", body: chat(`"prompt":5`), want: view{Model: "m", Messages: userHi}},
	{name: "empty parts", body: `{"model":"m","messages":[{"role":"user","content":[]}]}`, want: view{Model: "m", Messages: []msg{{"user", "[]"}}}},
	{name: "escaped part type", body: `{"model":"m","messages":[{"role":"user","content":[{"text":"a","type":"t\u0065xt"}]}]}`,
		want: view{Model: "m", Messages: []msg{{"user", `[{"text":"a","type":"t\u0065xt"}]`}}}},
	{name: "n within MaxN", lim: openai.ParseLimits{MaxN: 4}, body: chat(`"n":4`), want: view{Model: "m", Messages: userHi, N: 4}},
	{name: "depth 64", body: deep(64), want: view{Model: "m", Messages: []msg{{"user", `"x"`}}}},
	{name: "negative priority", body: chat(`"priority":-9223372036854775808`), want: view{Model: "m", Messages: userHi, HasPriority: true}},
	{name: "number beyond float64", body: `{"model":"0","":1e700,"messages":[{"role":"user","content":"hi"}]}`, want: view{Model: "0", Messages: userHi}}, // found by FuzzParse (in the harness)
	{name: "exponents", body: chat(`"temperature":1e-3,"top_p":0.5E-0,"x_top_p":-0.5E+2`), want: view{Model: "m", Messages: userHi}},

	// Valid completions bodies.
	{name: "prompt string", ep: openai.Completions, body: completions(`"prompt":"say \"hi\""`),
		want: view{Model: "m", Prompt: `"say \"hi\""`}},
	{name: "prompt one string", ep: openai.Completions, body: completions(`"prompt":["x"],"max_tokens":3,"stream":true`),
		want: view{Model: "m", Prompt: `["x"]`, MaxTokens: 3, Stream: true}},
	{name: "prompt strings", ep: openai.Completions, body: completions(`"prompt":["a", "b"]`), want: view{Model: "m", Prompt: `["a", "b"]`}},
	{name: "prompt token ids", ep: openai.Completions, body: completions(`"prompt":[1,0,3]`), want: view{Model: "m", Prompt: `[1,0,3]`}},
	{name: "prompt token id arrays", ep: openai.Completions, body: completions(`"prompt":[[1,2],[3]]`), want: view{Model: "m", Prompt: `[[1,2],[3]]`}},
	{name: "max_completion_tokens is unknown to completions", ep: openai.Completions, body: completions(`"prompt":"p","max_completion_tokens":"x"`),
		want: view{Model: "m", Prompt: `"p"`}},
	{name: "messages is unknown to completions", ep: openai.Completions, body: completions(`"prompt":"p","messages":7`),
		want: view{Model: "m", Prompt: `"p"`}},

	// Not one JSON object.
	{name: "invalid UTF-8 in a string", body: chat(`"user":"a` + "\xff" + `"`), code: "invalid_utf8"},
	{name: "invalid UTF-8 in a key", body: chat(`"` + "\xc3" + `":1`), code: "invalid_utf8"},
	{name: "empty body", body: "", code: "invalid_json"},
	{name: "only whitespace", body: "  \n", code: "invalid_json"},
	{name: "array", body: `[` + chat("") + `]`, code: "invalid_json"},
	{name: "string", body: `"model"`, code: "invalid_json"},
	{name: "trailing garbage", body: chat("") + ` x`, code: "invalid_json"},
	{name: "two objects", body: chat("") + chat(""), code: "invalid_json"},
	{name: "unterminated", body: `{"model":"m","messages":[`, code: "invalid_json"},
	{name: "missing colon", body: `{"model" "m"}`, code: "invalid_json"},
	{name: "trailing comma", body: chat(`"a":1,`)[:len(chat(""))-1] + `,}`, code: "invalid_json"},
	{name: "trailing comma in array", body: chat(`"a":[1,]`), code: "invalid_json"},
	{name: "single quotes", body: `{'model':'m'}`, code: "invalid_json"},
	{name: "NaN", body: chat(`"temperature":NaN`), code: "invalid_json"},
	{name: "leading zero", body: chat(`"temperature":01`), code: "invalid_json"},
	{name: "bare minus", body: chat(`"temperature":-`), code: "invalid_json"},
	{name: "dot without digits", body: chat(`"temperature":1.`), code: "invalid_json"},
	{name: "bad literal", body: chat(`"stream":tru`), code: "invalid_json"},
	{name: "bad escape", body: chat(`"user":"\x41"`), code: "invalid_json"},
	{name: "short unicode escape", body: chat(`"user":"\u12g4"`), code: "invalid_json"},
	{name: "raw newline in string", body: chat(`"user":"a` + "\n" + `b"`), code: "invalid_json"},
	{name: "byte order mark", body: "\ufeff" + chat(""), code: "invalid_json"},
	{name: "depth 65", body: deep(65), code: "invalid_json"},
	{name: "depth limit", lim: openai.ParseLimits{MaxDepth: 2}, body: chat(""), code: "invalid_json"},
	{name: "syntax error after a field error", body: `{"stream":"yes","model":}`, code: "invalid_json"},
	{name: "depth after a field error", body: `{"stream":"yes","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, code: "invalid_json"},

	// Fields.
	{name: "Model is not model", body: `{"Model":"m","messages":` + hi + `}`, code: "missing_field", param: "model"},
	{name: "no model", body: `{"messages":` + hi + `}`, code: "missing_field", param: "model"},
	{name: "empty object", body: `{}`, code: "missing_field", param: "model"},
	{name: "empty model", body: `{"model":"","messages":` + hi + `}`, code: "invalid_value", param: "model"},
	{name: "model number", body: `{"model":5,"messages":` + hi + `}`, code: "invalid_type", param: "model"},
	{name: "model null", body: `{"model":null,"messages":` + hi + `}`, code: "invalid_type", param: "model"},
	{name: "duplicate model", body: `{"model":"a","model":"m","messages":` + hi + `}`, code: "duplicate_field", param: "model"},
	{name: "duplicate stream", body: chat(`"stream":false,"stream":true`), code: "duplicate_field", param: "stream"},
	{name: "duplicate escaped stream", body: chat(`"stream":false,"\u0073tream":true`), code: "duplicate_field", param: "stream"},
	{name: "duplicate priority", body: chat(`"priority":1,"priority":2`), code: "duplicate_field", param: "priority"},
	{name: "stream string", body: chat(`"stream":"true"`), code: "invalid_type", param: "stream"},
	{name: "stream number", body: chat(`"stream":1`), code: "invalid_type", param: "stream"},
	{name: "stream_options without stream", body: chat(`"stream_options":{"include_usage":true}`), code: "invalid_value", param: "stream_options"},
	{name: "stream_options with stream false", body: chat(`"stream":false,"stream_options":{}`), code: "invalid_value", param: "stream_options"},
	{name: "stream_options number", body: chat(`"stream":true,"stream_options":1`), code: "invalid_type", param: "stream_options"},
	{name: "include_usage string", body: chat(`"stream":true,"stream_options":{"include_usage":"yes"}`), code: "invalid_type", param: "stream_options.include_usage"},
	{name: "duplicate include_usage", body: chat(`"stream":true,"stream_options":{"include_usage":true,"include_usage":false}`),
		code: "duplicate_field", param: "stream_options.include_usage"},
	{name: "n 2", body: chat(`"n":2`), code: "invalid_value", param: "n"},
	{name: "n 0", lim: openai.ParseLimits{MaxN: 4}, body: chat(`"n":0`), code: "invalid_value", param: "n"},
	{name: "n string", body: chat(`"n":"1"`), code: "invalid_type", param: "n"},
	{name: "n float", body: chat(`"n":1.0`), code: "invalid_type", param: "n"},
	{name: "max_tokens negative", body: chat(`"max_tokens":-1`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens zero", body: chat(`"max_tokens":0`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens -0", body: chat(`"max_tokens":-0`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens above limit", body: chat(`"max_tokens":1048577`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens above a set limit", lim: openai.ParseLimits{MaxTokens: 100}, body: chat(`"max_tokens":101`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens beyond int64", body: chat(`"max_tokens":99999999999999999999999`), code: "invalid_value", param: "max_tokens"},
	{name: "max_tokens fraction", body: chat(`"max_tokens":1.5`), code: "invalid_type", param: "max_tokens"},
	{name: "max_tokens exponent", body: chat(`"max_tokens":1e3`), code: "invalid_type", param: "max_tokens"},
	{name: "max_tokens string", body: chat(`"max_tokens":"10"`), code: "invalid_type", param: "max_tokens"},
	{name: "max_tokens bool", body: chat(`"max_tokens":true`), code: "invalid_type", param: "max_tokens"},
	{name: "max_completion_tokens zero", body: chat(`"max_completion_tokens":0`), code: "invalid_value", param: "max_completion_tokens"},
	{name: "max_completion_tokens array", body: chat(`"max_completion_tokens":[1]`), code: "invalid_type", param: "max_completion_tokens"},
	{name: "user number", body: chat(`"user":5`), code: "invalid_type", param: "user"},
	{name: "cache_salt empty", body: chat(`"cache_salt":""`), code: "invalid_value", param: "cache_salt"},
	{name: "cache_salt object", body: chat(`"cache_salt":{}`), code: "invalid_type", param: "cache_salt"},
	{name: "priority string", body: chat(`"priority":"high"`), code: "invalid_type", param: "priority"},
	{name: "priority float", body: chat(`"priority":1.5`), code: "invalid_type", param: "priority"},
	{name: "priority overflow", body: chat(`"priority":9223372036854775808`), code: "invalid_value", param: "priority"},

	// Messages.
	{name: "no messages", body: `{"model":"m"}`, code: "missing_field", param: "messages"},
	{name: "empty messages", body: `{"model":"m","messages":[]}`, code: "invalid_value", param: "messages"},
	{name: "messages object", body: `{"model":"m","messages":{}}`, code: "invalid_type", param: "messages"},
	{name: "messages null", body: `{"model":"m","messages":null}`, code: "invalid_type", param: "messages"},
	{name: "message number", body: `{"model":"m","messages":[1]}`, code: "invalid_type", param: "messages[0]"},
	{name: "too many messages", lim: openai.ParseLimits{MaxMessages: 2}, body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"a"},{"role":"user","content":"a"}]}`,
		code: "invalid_value", param: "messages"},
	{name: "bad role", body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"bogus","content":"a"}]}`, code: "invalid_value", param: "messages[1].role"},
	{name: "role case", body: `{"model":"m","messages":[{"role":"User","content":"a"}]}`, code: "invalid_value", param: "messages[0].role"},
	{name: "role number", body: `{"model":"m","messages":[{"role":1,"content":"a"}]}`, code: "invalid_type", param: "messages[0].role"},
	{name: "no role", body: `{"model":"m","messages":[{"role":"user","content":"a"},{"content":"a"}]}`, code: "missing_field", param: "messages[1].role"},
	{name: "Role is not role", body: `{"model":"m","messages":[{"Role":"user","content":"a"}]}`, code: "missing_field", param: "messages[0].role"},
	{name: "duplicate role", body: `{"model":"m","messages":[{"role":"user","role":"system","content":"a"}]}`, code: "duplicate_field", param: "messages[0].role"},
	{name: "duplicate content", body: `{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`, code: "duplicate_field", param: "messages[0].content"},
	{name: "no content", body: `{"model":"m","messages":[{"role":"user"}]}`, code: "missing_field", param: "messages[0].content"},
	{name: "null content", body: `{"model":"m","messages":[{"role":"system","content":null}]}`, code: "missing_field", param: "messages[0].content"},
	{name: "content number", body: `{"model":"m","messages":[{"role":"user","content":5}]}`, code: "invalid_type", param: "messages[0].content"},
	{name: "content object", body: `{"model":"m","messages":[{"role":"user","content":{"type":"text"}}]}`, code: "invalid_type", param: "messages[0].content"},
	{name: "part string", body: `{"model":"m","messages":[{"role":"user","content":["a"]}]}`, code: "invalid_type", param: "messages[0].content[0]"},
	{name: "part without type", body: `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`, code: "missing_field", param: "messages[0].content[0].type"},
	{name: "part type number", body: `{"model":"m","messages":[{"role":"user","content":[{"type":5}]}]}`, code: "invalid_type", param: "messages[0].content[0].type"},
	{name: "text part without text", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}]}`,
		code: "missing_field", param: "messages[0].content[1].text"},
	{name: "text part text number", body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"text","text":"a"},{"text":5,"type":"text"}]}]}`,
		code: "invalid_type", param: "messages[1].content[1].text"},
	{name: "text part text null", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":null}]}]}`,
		code: "invalid_type", param: "messages[0].content[0].text"},
	{name: "duplicate part text", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`,
		code: "duplicate_field", param: "messages[0].content[0].text"},

	// Prompts.
	{name: "no prompt", ep: openai.Completions, body: `{"model":"m"}`, code: "missing_field", param: "prompt"},
	{name: "prompt null", ep: openai.Completions, body: completions(`"prompt":null`), code: "invalid_type", param: "prompt"},
	{name: "prompt object", ep: openai.Completions, body: completions(`"prompt":{}`), code: "invalid_type", param: "prompt"},
	{name: "prompt empty", ep: openai.Completions, body: completions(`"prompt":[]`), code: "invalid_value", param: "prompt"},
	{name: "prompt mixed", ep: openai.Completions, body: completions(`"prompt":["a",1]`), code: "invalid_type", param: "prompt[1]"},
	{name: "prompt negative id", ep: openai.Completions, body: completions(`"prompt":[1,-2]`), code: "invalid_value", param: "prompt[1]"},
	{name: "prompt float id", ep: openai.Completions, body: completions(`"prompt":[1.5]`), code: "invalid_type", param: "prompt[0]"},
	{name: "prompt null element", ep: openai.Completions, body: completions(`"prompt":[null]`), code: "invalid_type", param: "prompt[0]"},
	{name: "prompt empty inner", ep: openai.Completions, body: completions(`"prompt":[[1],[]]`), code: "invalid_value", param: "prompt[1]"},
	{name: "prompt inner string", ep: openai.Completions, body: completions(`"prompt":[[1],[2,"x"]]`), code: "invalid_type", param: "prompt[1][1]"},
	{name: "prompt inner not array", ep: openai.Completions, body: completions(`"prompt":[[1],2]`), code: "invalid_type", param: "prompt[1]"},
	{name: "prompt huge id", ep: openai.Completions, body: completions(`"prompt":[99999999999999999999]`), code: "invalid_value", param: "prompt[0]"},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.ep
			if ep == 0 {
				ep = openai.Chat
			}
			r, err := openai.Parse([]byte(tc.body), ep, tc.lim)
			if tc.code != "" {
				checkError(t, err, tc.code, tc.param)
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := tc.want
			want.API = ep
			if want.N == 0 {
				want.N = 1
			}
			if got := viewOf(r); !reflect.DeepEqual(got, want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
			}
			if string(r.Body) != tc.body {
				t.Errorf("Body = %q, want the body", r.Body)
			}
		})
	}
}

// goNames matches what Go's encoding/json would put in an error message.
var goNames = regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|bool|interface|struct|map\[|json:|Go )\b|\[\]`)

func checkError(t *testing.T, err error, code, param string) {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse error = %v (%T), want an *openai.Error", err, err)
	}
	if e.Status != http.StatusBadRequest || e.Type != openai.TypeInvalidRequest || e.Code != code || e.Param != param {
		t.Errorf("Parse error = {Status %d, Type %q, Code %q, Param %q}, want {400, %q, %q, %q}; message %q",
			e.Status, e.Type, e.Code, e.Param, openai.TypeInvalidRequest, code, param, e.Message)
	}
	if !errors.Is(err, openai.ErrBadRequest) {
		t.Errorf("errors.Is(%v, ErrBadRequest) = false", err)
	}
	if param != "" && !strings.Contains(e.Message, param) {
		t.Errorf("message %q does not name %q", e.Message, param)
	}
	if goName := goNames.FindString(e.Message); goName != "" {
		t.Errorf("message %q holds the Go name %q", e.Message, goName)
	}
}

func TestParseMessages(t *testing.T) {
	// Past the 16 messages a chat Request has room for.
	for _, n := range []int{1, 15, 16, 17, 300, 5000} {
		body := chatBody(n, 10)
		for range 2 { // the second time with a pooled scratch slice
			r, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
			if err != nil {
				t.Fatalf("%d messages: %v", n, err)
			}
			if len(r.Messages) != n {
				t.Fatalf("%d messages: got %d", n, len(r.Messages))
			}
			for i, m := range r.Messages {
				if m.Role == "" || len(m.Content) == 0 {
					t.Fatalf("%d messages: message %d is %+v", n, i, m)
				}
			}
		}
	}
}

func TestParseErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{chat(`"stream":"yes"`), `"stream" must be a boolean, got a string`},
		{chat(`"max_tokens":1.5`), `"max_tokens" must be an integer, got the number 1.5`},
		{chat(`"max_tokens":0`), `"max_tokens" must be between 1 and 1048576, got 0`},
		{chat(`"n":3`), `"n" must be 1, got 3`},
		{chat("") + " x", `invalid JSON at byte offset 58: unexpected 'x' after the top-level object`},
		{`{"model":"m","messages":[{"role":"robot","content":"x"}]}`, `"messages[0].role" must be one of "system", "user", "assistant", "tool", "developer", "function", got "robot"`},
		{chat(`"stream_options":{}`), `stream_options is only allowed when stream is true`},
		{`{"model":"m",` + "\n" + `"messages":[}`, `invalid JSON at byte offset 26: unexpected '}' looking for a value`},
	} {
		_, err := openai.Parse([]byte(tc.body), openai.Chat, openai.ParseLimits{})
		var e *openai.Error
		if !errors.As(err, &e) || e.Message != tc.want {
			t.Errorf("Parse(%s) error = %v, want message %q", tc.body, err, tc.want)
		}
	}
}

func TestParseUnknownAPI(t *testing.T) {
	_, err := openai.Parse([]byte(chat("")), 0, openai.ParseLimits{})
	var e *openai.Error
	if !errors.As(err, &e) || e.Status != http.StatusInternalServerError || errors.Is(err, openai.ErrBadRequest) {
		t.Errorf("Parse with endpoint 0: %v, want a 500 server error", err)
	}
}

func TestParseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, n := range []int{1, 14} {
		body := chatBody(n, 1200)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := openai.Parse(body, openai.Chat, openai.ParseLimits{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 2 {
			t.Errorf("Parse of %d messages: %v allocations, want at most 2", n, allocs)
		}
	}
	// The checks of the fields passed on, and of content parts, allocate nothing.
	for _, body := range []string{
		chat(samplingFields + `"temperature":1` + strings.Repeat("0", 30) + `,"stop_token_ids":[1,2],"tool_choice":"auto"`),
		chatParts(`{"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"high"}},{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}`),
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 2 {
			t.Errorf("Parse(%s): %v allocations, want at most 2", body, allocs)
		}
	}
	body := []byte(completions(`"prompt":[[1,2,3],[4]],"user":"u","cache_salt":"s","stream":true,"temperature":0.7,"logprobs":5,"stop":["\n"]`))
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := openai.Parse(body, openai.Completions, openai.ParseLimits{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("Parse of a completions body: %v allocations, want at most 2", allocs)
	}
}

func TestRawMessages(t *testing.T) {
	msgs := `[ {"role":"user","content":"hi","name":"x"} ,{"role":"assistant","tool_calls":[]}]`
	r, err := openai.Parse([]byte(`{"model":"m","messages":`+msgs+` ,"stream":false}`), openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.RawMessages) != msgs {
		t.Errorf("RawMessages = %q, want %q", r.RawMessages, msgs)
	}
	if r, _ := openai.Parse([]byte(`{"model":"m","prompt":"p"}`), openai.Completions, openai.ParseLimits{}); r.RawMessages != nil {
		t.Errorf("completions RawMessages = %q, want nil", r.RawMessages)
	}
}
