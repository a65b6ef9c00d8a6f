package openai_test

import (
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/usher-llm/usher/proxy/openai"
)

// A gateway reads the request as the backend will, hashes the prompt for routing, and
// forwards the body with priority removed and usage requested.
func Example() {
	ep, ok := openai.EndpointOf("/openai/v1/chat/completions")
	if !ok {
		panic("not an endpoint usher schedules")
	}
	body := []byte(`{"model":"llama","priority":-10,"STREAM":false,` +
		`"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Caf\u00e9?"}]}],` +
		`"stream":true,"max_completion_tokens":64}`)
	r, err := openai.Parse(body, ep, openai.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Endpoint, r.Model, "stream:", r.Stream, "max tokens:", r.MaxTokens, "priority:", r.HasPriority)
	fmt.Printf("prompt: %q\n", r.AppendPrompt(nil))
	fmt.Printf("upstream: %s\n", r.AppendUpstream(nil))
	// Output:
	// chat llama stream: true max tokens: 64 priority: true
	// prompt: "system\nBe brief.\nuser\nCafé?\n"
	// upstream: {"model":"llama","STREAM":false,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Caf\u00e9?"}]}],"stream":true,"max_completion_tokens":64,"stream_options":{"include_usage":true}}
}

// A refused request is answered with an OpenAI error that names the field; once a stream
// has started, the same error goes out as an event.
func ExampleError() {
	body := []byte(`{"model":"llama","messages":[{"role":"user","content":"Hi"}],"max_tokens":"64"}`)
	_, err := openai.Parse(body, openai.Chat, openai.Limits{})
	var e *openai.Error
	if !errors.As(err, &e) {
		panic(err)
	}
	fmt.Println(errors.Is(err, openai.ErrInvalidRequest))
	fmt.Println(err)

	w := httptest.NewRecorder()
	openai.WriteError(w, e)
	fmt.Print(w.Code, " ", w.Body.String())

	busy := &openai.Error{Status: 503, Type: openai.TypeUnavailable, Message: "all backends are saturated"}
	fmt.Printf("%q\n", busy.AppendEvent(nil))
	// Output:
	// true
	// openai: "max_tokens" must be an integer, got a string (param max_tokens)
	// 400 {"error":{"message":"\"max_tokens\" must be an integer, got a string","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"}}
	// "data: {\"error\":{\"message\":\"all backends are saturated\",\"type\":\"service_unavailable\",\"param\":null,\"code\":null}}\n\n"
}
