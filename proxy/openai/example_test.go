package openai_test

import (
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// A gateway reads the request as the backend will, hashes the prompt for routing, and
// forwards the body with priority removed and usage requested.
func Example() {
	ep, ok := openai.APIOf("/openai/v1/chat/completions")
	if !ok {
		panic("not an endpoint usher schedules")
	}
	body := []byte(`{"model":"llama","priority":-10,"STREAM":false,` +
		`"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Caf\u00e9?"}]}],` +
		`"stream":true,"max_completion_tokens":64}`)
	r, err := openai.Parse(body, ep, openai.ParseLimits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.API, r.Model, "stream:", r.Stream, "max tokens:", r.MaxTokens, "priority:", r.HasPriority)
	fmt.Printf("prompt: %q\n", r.AppendPrompt(nil))
	fmt.Printf("upstream: %s\n", openaiwire.AppendUpstream(r, nil))
	// Output:
	// chat llama stream: true max tokens: 64 priority: true
	// prompt: "system\nBe brief.\nuser\nCafé?\n"
	// upstream: {"model":"llama","STREAM":false,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Caf\u00e9?"}]}],"stream":true,"max_completion_tokens":64,"stream_options":{"include_usage":true}}
}

// A refused request is answered with an OpenAI error that names the field; once a stream
// has started, the same error goes out as an event.
func ExampleError() {
	body := []byte(`{"model":"llama","messages":[{"role":"user","content":"Hi"}],"max_tokens":"64"}`)
	_, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	var e *openai.Error
	if !errors.As(err, &e) {
		panic(err)
	}
	fmt.Println(errors.Is(err, openai.ErrBadRequest))
	fmt.Println(err)

	w := httptest.NewRecorder()
	openaiwire.WriteError(w, e)
	fmt.Print(w.Code, " ", w.Body.String())

	busy := &openai.Error{Status: 503, Type: openai.TypeUnavailable, Message: "all backends are saturated"}
	fmt.Printf("%q\n", openaiwire.AppendEvent(busy, nil))
	// Output:
	// true
	// openai: "max_tokens" must be an integer, got a string (param max_tokens)
	// 400 {"error":{"message":"\"max_tokens\" must be an integer, got a string","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"}}
	// "data: {\"error\":{\"message\":\"all backends are saturated\",\"type\":\"service_unavailable\",\"param\":null,\"code\":null}}\n\n"
}

// Anthropic's Messages and OpenAI's Responses are read as strictly as chat: the prompt is
// rendered so that a conversation's next turn extends it, the session comes from the API's
// own fields, and usage and errors are read and written in each API's own shape.
func Example_otherAPIs() {
	body := []byte(`{"model":"claude","max_tokens":256,"stream":true,"metadata":{"user_id":"u-42"},` +
		`"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}`)
	r, err := openai.Parse(body, openai.Messages, openai.ParseLimits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.API, r.Model, "max tokens:", r.MaxTokens, "session:", r.SessionKey())
	fmt.Printf("prompt: %q\n", r.AppendPrompt(nil))
	c, _ := openaiwire.ParseEvent(openai.Messages, []byte(`{"type":"message_start","message":{"usage":{"input_tokens":8,"cache_read_input_tokens":64,"output_tokens":1}}}`))
	fmt.Println("prompt tokens:", c.Usage.PromptTokens, "cached:", c.Usage.Cached())

	body = []byte(`{"model":"gpt","previous_response_id":"resp_1","input":"And then?","prompt_cache_key":"chat-7"}`)
	if r, err = openai.Parse(body, openai.Responses, openai.ParseLimits{}); err != nil {
		panic(err)
	}
	fmt.Println(r.API, "continues", r.PreviousResponseID, "session:", r.SessionKey(), "store:", r.Store)
	a, _ := openaiwire.ParseAnswer(openai.Responses, []byte(`{"id":"resp_2","usage":{"input_tokens":90,"input_tokens_details":{"cached_tokens":64},"output_tokens":5}}`))
	fmt.Println("stored as", a.ResponseID, "cached:", a.Usage.Cached())

	_, err = openai.Parse([]byte(`{"model":"claude","messages":[{"role":"user","content":"Hi"}]}`), openai.Messages, openai.ParseLimits{})
	var e *openai.Error
	if errors.As(err, &e) {
		fmt.Printf("%s\n", openaiwire.AppendJSONFor(e, openai.Messages, nil))
	}
	// Output:
	// messages claude max tokens: 256 session: u-42
	// prompt: "system\nBe brief.\nuser\nHi\n"
	// prompt tokens: 72 cached: 64
	// responses continues resp_1 session: chat-7 store: true
	// stored as resp_2 cached: 64
	// {"type":"error","error":{"type":"invalid_request_error","message":"\"max_tokens\" is required (a positive integer)"}}
}
