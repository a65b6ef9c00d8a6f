package openai_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// apiCase is a body of a Messages, Responses or Embeddings request and what Parse must make
// of it: an error (code, param) or the fields below.
type apiCase struct {
	name  string
	ep    openai.API
	body  string
	code  string // the error's Code; "" for success
	param string
	// What a success reads.
	model, user, prev, conv, prompt string
	maxTokens                       int
	stream, store, priority         bool
}

const anthropicHi = `"messages":[{"role":"user","content":"hi"}]`

func anthropic(members string) string {
	if members != "" {
		members = "," + members
	}
	return `{"model":"claude","max_tokens":16,` + anthropicHi + members + `}`
}

func responses(members string) string {
	if members != "" {
		members = "," + members
	}
	return `{"model":"gpt","input":"hi"` + members + `}`
}

var apiCases = []apiCase{
	// Messages.
	{name: "messages minimal", ep: openai.Messages, body: anthropic(""), model: "claude", maxTokens: 16, prompt: "user\nhi\n"},
	{name: "messages full", ep: openai.Messages, body: `{"model":"claude","max_tokens":100,"stream":true,"priority":3,` +
		`"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],` +
		`"tools":[{"name":"ls","input_schema":{"type":"object"}}],"metadata":{"user_id":"u-7"},` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"List."},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"t1","name":"ls","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a b"}]}]}`,
		model: "claude", maxTokens: 100, stream: true, priority: true, user: "u-7",
		prompt: "system\nBe brief.\ntools\n" + `[{"name":"ls","input_schema":{"type":"object"}}]` + "\nuser\nList." +
			`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}` + "\nassistant\n" +
			`{"type":"thinking","thinking":"hm","signature":"s"}{"type":"tool_use","id":"t1","name":"ls","input":{}}` + "\nuser\n" +
			`{"type":"tool_result","tool_use_id":"t1","content":"a b"}` + "\n"},
	{name: "messages system string", ep: openai.Messages, body: anthropic(`"system":"Be \u0062rief."`), model: "claude", maxTokens: 16, prompt: "system\nBe brief.\nuser\nhi\n"},
	{name: "messages unknown block", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"type":"future_block","x":[1]}]}]}`, model: "c", maxTokens: 1, prompt: "user\n" + `{"type":"future_block","x":[1]}` + "\n"},
	{name: "messages without model", ep: openai.Messages, body: `{"max_tokens":1,` + anthropicHi + `}`, code: "missing_field", param: "model"},
	{name: "messages without max_tokens", ep: openai.Messages, body: `{"model":"c",` + anthropicHi + `}`, code: "missing_field", param: "max_tokens"},
	{name: "messages max_tokens null", ep: openai.Messages, body: `{"model":"c","max_tokens":null,` + anthropicHi + `}`, code: "missing_field", param: "max_tokens"},
	{name: "messages max_tokens zero", ep: openai.Messages, body: `{"model":"c","max_tokens":0,` + anthropicHi + `}`, code: "invalid_value", param: "max_tokens"},
	{name: "messages max_tokens a string", ep: openai.Messages, body: `{"model":"c","max_tokens":"9",` + anthropicHi + `}`, code: "invalid_type", param: "max_tokens"},
	{name: "messages without messages", ep: openai.Messages, body: `{"model":"c","max_tokens":1}`, code: "missing_field", param: "messages"},
	{name: "messages empty", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[]}`, code: "invalid_value", param: "messages"},
	{name: "messages system role", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, code: "invalid_value", param: "messages[0].role"},
	{name: "messages content null", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"assistant","content":null}]}`, code: "invalid_type", param: "messages[0].content"},
	{name: "messages no content", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"assistant"}]}`, code: "missing_field", param: "messages[0].content"},
	{name: "messages text block without text", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, code: "missing_field", param: "messages[0].content[0].text"},
	{name: "messages text block text a number", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, code: "invalid_type", param: "messages[0].content[0].text"},
	{name: "messages block not an object", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":["x"]}]}`, code: "invalid_type", param: "messages[0].content[0]"},
	{name: "messages block type a number", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"type":7}]}]}`, code: "invalid_type", param: "messages[0].content[0].type"},
	{name: "messages block without type", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, code: "missing_field", param: "messages[0].content[0].type"},
	{name: "messages role twice", ep: openai.Messages, body: `{"model":"c","max_tokens":1,"messages":[{"role":"user","role":"user","content":"x"}]}`, code: "duplicate_field", param: "messages[0].role"},
	{name: "messages system a number", ep: openai.Messages, body: anthropic(`"system":5`), code: "invalid_type", param: "system"},
	{name: "messages system block not text", ep: openai.Messages, body: anthropic(`"system":[{"type":"image","text":"x"}]`), code: "invalid_value", param: "system[0].type"},
	{name: "messages system block without text", ep: openai.Messages, body: anthropic(`"system":[{"type":"text"}]`), code: "missing_field", param: "system[0].text"},
	{name: "messages metadata a string", ep: openai.Messages, body: anthropic(`"metadata":"u"`), code: "invalid_type", param: "metadata"},
	{name: "messages user_id a number", ep: openai.Messages, body: anthropic(`"metadata":{"user_id":5}`), code: "invalid_type", param: "metadata.user_id"},
	{name: "messages user_id twice", ep: openai.Messages, body: anthropic(`"metadata":{"user_id":"a","user_id":"b"}`), code: "duplicate_field", param: "metadata.user_id"},
	{name: "messages tools an object", ep: openai.Messages, body: anthropic(`"tools":{}`), code: "invalid_type", param: "tools"},
	{name: "messages tool a string", ep: openai.Messages, body: anthropic(`"tools":["ls"]`), code: "invalid_type", param: "tools[0]"},
	{name: "messages stream a string", ep: openai.Messages, body: anthropic(`"stream":"true"`), code: "invalid_type", param: "stream"},
	{name: "messages stream twice", ep: openai.Messages, body: anthropic(`"stream":true,"stream":false`), code: "duplicate_field", param: "stream"},
	{name: "messages kv_transfer_params", ep: openai.Messages, body: anthropic(`"kv_transfer_params":{}`), code: "invalid_value", param: "kv_transfer_params"},
	{name: "messages Model in capitals", ep: openai.Messages, body: `{"Model":"c","max_tokens":1,` + anthropicHi + `}`, code: "missing_field", param: "model"},
	{name: "messages user is not a field", ep: openai.Messages, body: anthropic(`"user":"x"`), model: "claude", maxTokens: 16, prompt: "user\nhi\n"},

	// Responses.
	{name: "responses string input", ep: openai.Responses, body: responses(""), model: "gpt", store: true, prompt: "user\nhi\n"},
	{name: "responses full", ep: openai.Responses, body: `{"model":"gpt","instructions":"Be brief.","stream":true,"store":false,"max_output_tokens":50,"user":"u1",` +
		`"prompt_cache_key":"pk","previous_response_id":"resp_1","tools":[{"type":"function","name":"ls"}],"input":[` +
		`{"role":"user","content":"List."},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},` +
		`{"type":"function_call","call_id":"c1","name":"ls","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"a b"},` +
		`{"role":"developer","content":[{"type":"input_text","text":"more"},{"type":"input_image","image_url":"x"}]}]}`,
		model: "gpt", user: "u1", prev: "resp_1", conv: "pk", maxTokens: 50, stream: true,
		prompt: "system\nBe brief.\ntools\n" + `[{"type":"function","name":"ls"}]` + "\nuser\nList.\nassistant\nok\n" +
			`{"type":"function_call","call_id":"c1","name":"ls","arguments":"{}"}` + "\n" +
			`{"type":"function_call_output","call_id":"c1","output":"a b"}` + "\ndeveloper\nmore\n"},
	{name: "responses conversation string", ep: openai.Responses, body: responses(`"conversation":"conv_1","prompt_cache_key":"pk"`), model: "gpt", conv: "conv_1", store: true, prompt: "user\nhi\n"},
	{name: "responses conversation object", ep: openai.Responses, body: responses(`"conversation":{"id":"conv_2"},"store":null`), model: "gpt", conv: "conv_2", store: true, prompt: "user\nhi\n"},
	{name: "responses without input", ep: openai.Responses, body: `{"model":"gpt"}`, code: "missing_field", param: "input"},
	{name: "responses input a number", ep: openai.Responses, body: `{"model":"gpt","input":3}`, code: "invalid_type", param: "input"},
	{name: "responses input empty", ep: openai.Responses, body: `{"model":"gpt","input":[]}`, code: "invalid_value", param: "input"},
	{name: "responses item not an object", ep: openai.Responses, body: `{"model":"gpt","input":["hi"]}`, code: "invalid_type", param: "input[0]"},
	{name: "responses item type a number", ep: openai.Responses, body: `{"model":"gpt","input":[{"type":1}]}`, code: "invalid_type", param: "input[0].type"},
	{name: "responses message without role", ep: openai.Responses, body: `{"model":"gpt","input":[{"content":"x"}]}`, code: "missing_field", param: "input[0].role"},
	{name: "responses message bad role", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"tool","content":"x"}]}`, code: "invalid_value", param: "input[0].role"},
	{name: "responses message role a number", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":1,"content":"x"}]}`, code: "invalid_type", param: "input[0].role"},
	{name: "responses message without content", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"user"}]}`, code: "missing_field", param: "input[0].content"},
	{name: "responses message content a number", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"user","content":1}]}`, code: "invalid_type", param: "input[0].content"},
	{name: "responses input_text without text", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, code: "missing_field", param: "input[0].content[0].text"},
	{name: "responses part text a number", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"output_text","text":[]}]}]}`, code: "invalid_type", param: "input[1].content[1].text"},
	{name: "responses role twice", ep: openai.Responses, body: `{"model":"gpt","input":[{"role":"user","role":"user","content":"x"}]}`, code: "duplicate_field", param: "input[0].role"},
	{name: "responses unknown item", ep: openai.Responses, body: `{"model":"gpt","input":[{"type":"future","role":7}]}`, model: "gpt", store: true, prompt: `{"type":"future","role":7}` + "\n"},
	{name: "responses store a string", ep: openai.Responses, body: responses(`"store":"no"`), code: "invalid_type", param: "store"},
	{name: "responses max_output_tokens zero", ep: openai.Responses, body: responses(`"max_output_tokens":0`), code: "invalid_value", param: "max_output_tokens"},
	{name: "responses previous_response_id empty", ep: openai.Responses, body: responses(`"previous_response_id":""`), code: "invalid_value", param: "previous_response_id"},
	{name: "responses previous_response_id a number", ep: openai.Responses, body: responses(`"previous_response_id":1`), code: "invalid_type", param: "previous_response_id"},
	{name: "responses conversation and previous", ep: openai.Responses, body: responses(`"previous_response_id":"r","conversation":"c"`), code: "invalid_value", param: "previous_response_id"},
	{name: "responses conversation without id", ep: openai.Responses, body: responses(`"conversation":{}`), code: "missing_field", param: "conversation.id"},
	{name: "responses conversation id twice", ep: openai.Responses, body: responses(`"conversation":{"id":"a","id":"b"}`), code: "duplicate_field", param: "conversation.id"},
	{name: "responses conversation a number", ep: openai.Responses, body: responses(`"conversation":1`), code: "invalid_type", param: "conversation"},
	{name: "responses instructions a number", ep: openai.Responses, body: responses(`"instructions":1`), code: "invalid_type", param: "instructions"},
	{name: "responses input twice", ep: openai.Responses, body: responses(`"input":"again"`), code: "duplicate_field", param: "input"},
	{name: "responses kv_transfer_params", ep: openai.Responses, body: responses(`"kv_transfer_params":null`), code: "invalid_value", param: "kv_transfer_params"},
	{name: "responses messages is not a field", ep: openai.Responses, body: responses(`"messages":7,"max_tokens":"x"`), model: "gpt", store: true, prompt: "user\nhi\n"},

	// Embeddings.
	{name: "embeddings string", ep: openai.Embeddings, body: `{"model":"e","input":"hi","user":"u","priority":1}`, model: "e", user: "u", priority: true},
	{name: "embeddings strings", ep: openai.Embeddings, body: `{"model":"e","input":["a","b"],"encoding_format":"float"}`, model: "e"},
	{name: "embeddings token ids", ep: openai.Embeddings, body: `{"model":"e","input":[[1,2],[3]]}`, model: "e"},
	{name: "embeddings without input", ep: openai.Embeddings, body: `{"model":"e"}`, code: "missing_field", param: "input"},
	{name: "embeddings input empty", ep: openai.Embeddings, body: `{"model":"e","input":[]}`, code: "invalid_value", param: "input"},
	{name: "embeddings mixed input", ep: openai.Embeddings, body: `{"model":"e","input":["a",1]}`, code: "invalid_type", param: "input[1]"},
	{name: "embeddings negative token", ep: openai.Embeddings, body: `{"model":"e","input":[[1,-2]]}`, code: "invalid_value", param: "input[0][1]"},
	{name: "embeddings input an object", ep: openai.Embeddings, body: `{"model":"e","input":{}}`, code: "invalid_type", param: "input"},
	{name: "embeddings user a number", ep: openai.Embeddings, body: `{"model":"e","input":"x","user":1}`, code: "invalid_type", param: "user"},
	{name: "embeddings kv_transfer_params", ep: openai.Embeddings, body: `{"model":"e","input":"x","kv_transfer_params":{}}`, code: "invalid_value", param: "kv_transfer_params"},
	{name: "embeddings stream is not a field", ep: openai.Embeddings, body: `{"model":"e","input":"x","stream":"yes"}`, model: "e"},
}

func TestParseAPIs(t *testing.T) {
	for _, tc := range apiCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := openai.Parse([]byte(tc.body), tc.ep, openai.ParseLimits{})
			if tc.code != "" {
				checkError(t, err, tc.code, tc.param)
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := apiCase{name: tc.name, ep: r.API, body: string(r.Body), model: r.Model, user: r.User,
				prev: r.PreviousResponseID, conv: r.ConversationKey, prompt: string(r.AppendPrompt(nil)),
				maxTokens: r.MaxTokens, stream: r.Stream, store: r.Store, priority: r.HasPriority}
			if got != tc {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tc)
			}
			if tc.priority && strings.Contains(string(openaiwire.AppendUpstream(r, nil)), `"priority"`) {
				t.Errorf("AppendUpstream kept the priority: %s", openaiwire.AppendUpstream(r, nil))
			}
			if !tc.priority && string(openaiwire.Upstream(r)) != tc.body {
				t.Errorf("Upstream = %s, want the body unchanged", openaiwire.Upstream(r))
			}
		})
	}
}

// A later turn's prompt begins with the earlier turn's: the prefix cache can serve it.
func TestAppendPromptTurns(t *testing.T) {
	turn1 := `{"model":"c","max_tokens":9,"system":"S","tools":[{"name":"t"}],"messages":[{"role":"user","content":"one"}]}`
	turn2 := `{"model":"c","max_tokens":9,"system":"S","tools":[{"name":"t"}],"messages":[{"role":"user","content":"one"},` +
		`{"role":"assistant","content":[{"type":"text","text":"ok"}]},{"role":"user","content":"two"}]}`
	for _, ep := range []openai.API{openai.Messages, openai.Responses} {
		b1, b2 := turn1, turn2
		if ep == openai.Responses {
			b1 = strings.NewReplacer(`"max_tokens":9,"system"`, `"instructions"`, `"messages"`, `"input"`).Replace(turn1)
			b2 = strings.NewReplacer(`"max_tokens":9,"system"`, `"instructions"`, `"messages"`, `"input"`, `"text","text"`, `"output_text","text"`).Replace(turn2)
		}
		r1, err := openai.Parse([]byte(b1), ep, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := openai.Parse([]byte(b2), ep, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		p1, p2 := string(r1.AppendPrompt(nil)), string(r2.AppendPrompt(nil))
		if !strings.HasPrefix(p2, p1) || len(p2) <= len(p1) {
			t.Errorf("%v: turn 2 renders %q, which does not extend turn 1's %q", ep, p2, p1)
		}
	}
}

func TestSessionKey(t *testing.T) {
	for _, tc := range []struct {
		ep         openai.API
		body, want string
	}{
		{openai.Messages, anthropic(`"metadata":{"user_id":"u"}`), "u"},
		{openai.Responses, responses(`"user":"u"`), "u"},
		{openai.Responses, responses(`"user":"u","prompt_cache_key":"k"`), "k"},
		{openai.Responses, responses(`"user":"u","prompt_cache_key":"k","conversation":{"id":"c"}`), "c"},
		{openai.Chat, chat(`"user":"u"`), "u"},
	} {
		r, err := openai.Parse([]byte(tc.body), tc.ep, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.SessionKey(); got != tc.want {
			t.Errorf("SessionKey of %s = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestParseAnswer(t *testing.T) {
	for _, tc := range []struct {
		ep                         openai.API
		body                       string
		prompt, completion, cached int
		id                         string
		none                       bool
	}{
		{ep: openai.Messages, body: `{"id":"msg_1","type":"message","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":30,"cache_creation_input_tokens":2}}`, prompt: 42, completion: 5, cached: 30},
		{ep: openai.Messages, body: `{"usage":{"input_tokens":-3,"output_tokens":99999999999999}}`, prompt: 0, completion: 1 << 40},
		{ep: openai.Responses, body: `{"id":"resp_9","object":"response","usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":32},"output_tokens":7}}`, prompt: 50, completion: 7, cached: 32, id: "resp_9"},
		{ep: openai.Embeddings, body: `{"object":"list","usage":{"prompt_tokens":4,"total_tokens":4}}`, prompt: 4},
		{ep: openai.Chat, body: `{"usage":{"prompt_tokens":4,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`, prompt: 4, completion: 2, cached: 3},
		{ep: openai.Responses, body: `{"id":"r"}`, id: "r", none: true},
	} {
		a, err := openaiwire.ParseAnswer(tc.ep, []byte(tc.body))
		if err != nil {
			t.Fatalf("ParseAnswer(%s): %v", tc.body, err)
		}
		if a.ResponseID != tc.id || (a.Usage == nil) != tc.none {
			t.Errorf("ParseAnswer(%s) = %+v, want id %q, usage %v", tc.body, a, tc.id, !tc.none)
		}
		if a.Usage != nil && (a.Usage.PromptTokens != tc.prompt || a.Usage.CompletionTokens != tc.completion || a.Usage.Cached() != tc.cached) {
			t.Errorf("ParseAnswer(%s) usage = %d/%d/%d, want %d/%d/%d", tc.body, a.Usage.PromptTokens, a.Usage.CompletionTokens, a.Usage.Cached(), tc.prompt, tc.completion, tc.cached)
		}
	}
	if _, err := openaiwire.ParseAnswer(openai.Messages, []byte("nope")); !errors.Is(err, openaiwire.ErrAnswer) {
		t.Errorf("ParseAnswer of junk: %v, want ErrAnswer", err)
	}
}

func TestParseEvent(t *testing.T) {
	type want struct {
		token                      bool
		text                       string
		prompt, completion, cached int
		usage, end                 bool
		err, id                    string
	}
	for _, tc := range []struct {
		ep   openai.API
		data string
		want want
	}{
		{openai.Messages, `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":5,"cache_read_input_tokens":16,"output_tokens":1}}}`, want{usage: true, prompt: 21, cached: 16}},
		{openai.Messages, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, want{}},
		{openai.Messages, `{"type":"ping"}`, want{}},
		{openai.Messages, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, want{token: true, text: "Hi"}},
		{openai.Messages, `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a"}}`, want{token: true}},
		{openai.Messages, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}`, want{usage: true, completion: 12}},
		{openai.Messages, `{"type":"message_stop"}`, want{end: true}},
		{openai.Messages, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, want{end: true, err: "Overloaded"}},
		{openai.Responses, `{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}`, want{}},
		{openai.Responses, `{"type":"response.output_text.delta","item_id":"m","delta":"Hi"}`, want{token: true, text: "Hi"}},
		{openai.Responses, `{"type":"response.function_call_arguments.delta","delta":"{"}`, want{token: true}},
		{openai.Responses, `{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":3}}}`, want{usage: true, end: true, prompt: 40, completion: 3, cached: 32, id: "resp_1"}},
		{openai.Responses, `{"type":"response.failed","response":{"id":"r","error":{"code":"server_error","message":"boom"}}}`, want{end: true, err: "boom"}},
		{openai.Responses, `{"type":"error","code":"x","message":"bad","param":null}`, want{end: true, err: "bad"}},
		{openai.Chat, `{"choices":[{"delta":{"content":"x"}}]}`, want{token: true, text: "x"}},
	} {
		c, err := openaiwire.ParseEvent(tc.ep, []byte(tc.data))
		if err != nil {
			t.Fatalf("ParseEvent(%s): %v", tc.data, err)
		}
		got := want{token: c.Token, text: c.Text, usage: c.Usage != nil, end: c.End, err: c.Error, id: c.ResponseID}
		if c.Usage != nil {
			got.prompt, got.completion, got.cached = c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.Cached()
		}
		if got != tc.want {
			t.Errorf("ParseEvent(%v, %s) = %+v, want %+v", tc.ep, tc.data, got, tc.want)
		}
		if openaiwire.IsDeltaEvent([]byte(tc.data)) && (got.usage || got.end || got.err != "") {
			t.Errorf("IsDeltaEvent(%s) = true for an event that must be parsed", tc.data)
		}
	}
	if _, err := openaiwire.ParseEvent(openai.Messages, []byte("{")); !errors.Is(err, openaiwire.ErrChunk) {
		t.Errorf("ParseEvent of junk: %v, want ErrChunk", err)
	}
}

func TestErrorFor(t *testing.T) {
	e := &openai.Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "invalid_type", Param: "max_tokens", Message: `"max_tokens" must be an integer`}
	for _, tc := range []struct {
		ep          openai.API
		body, event string
	}{
		{openai.Messages, `{"type":"error","error":{"type":"invalid_request_error","message":"\"max_tokens\" must be an integer"}}`,
			"event: error\ndata: " + `{"type":"error","error":{"type":"invalid_request_error","message":"\"max_tokens\" must be an integer"}}` + "\n\n"},
		{openai.Responses, `{"error":{"message":"\"max_tokens\" must be an integer","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"}}`,
			"event: error\ndata: " + `{"type":"error","code":"invalid_type","message":"\"max_tokens\" must be an integer","param":"max_tokens"}` + "\n\n"},
		{openai.Chat, `{"error":{"message":"\"max_tokens\" must be an integer","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"}}`,
			"data: " + `{"error":{"message":"\"max_tokens\" must be an integer","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"}}` + "\n\n"},
	} {
		if got := string(openaiwire.AppendJSONFor(e, tc.ep, nil)); got != tc.body {
			t.Errorf("AppendJSONFor(%v) = %s, want %s", tc.ep, got, tc.body)
		}
		if got := string(openaiwire.AppendEventFor(e, tc.ep, nil)); got != tc.event {
			t.Errorf("AppendEventFor(%v) = %q, want %q", tc.ep, got, tc.event)
		}
		w := httptest.NewRecorder()
		openaiwire.WriteErrorFor(w, tc.ep, e)
		if w.Code != 400 || w.Body.String() != tc.body+"\n" || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("WriteErrorFor(%v) = %d %q", tc.ep, w.Code, w.Body.String())
		}
	}
	for status, want := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error",
		503: "overloaded_error", 529: "overloaded_error", 504: "timeout_error", 499: "invalid_request_error"} {
		got := string(openaiwire.AppendJSONFor(&openai.Error{Status: status}, openai.Messages, nil))
		if !strings.Contains(got, `"error":{"type":"`+want+`"`) {
			t.Errorf("status %d: %s, want type %q", status, got, want)
		}
	}
}

// TestParseAPIsAllocs holds the Messages, Responses and Embeddings parses to the
// allocations they make today: the Request, the strings of its fields, and the names of
// the system blocks' fields.
func TestParseAPIsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		ep   openai.API
		body string
		most float64
	}{
		{openai.Messages, anthropic(`"system":[{"type":"text","text":"s"}],"metadata":{"user_id":"u"},"priority":1`), 7},
		{openai.Responses, `{"model":"gpt","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","name":"f"}],"conversation":{"id":"c"}}`, 5},
		{openai.Embeddings, `{"model":"e","input":["a","b"]}`, 2},
	} {
		body := []byte(tc.body)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := openai.Parse(body, tc.ep, openai.ParseLimits{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > tc.most {
			t.Errorf("Parse(%s) for %v: %v allocations, want at most %v", tc.body, tc.ep, allocs, tc.most)
		}
	}
}
