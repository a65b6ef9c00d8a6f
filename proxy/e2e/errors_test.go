//go:build unix

package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/proxy"
)

// frontedServer serves one simulated server on a listener of its own, with answer (when not
// nil) answering the POSTs to /v1/... in its place: a backend whose metrics and model list
// are healthy while its API answers what the test says.
func frontedServer(t *testing.T, answer http.HandlerFunc) string {
	t.Helper()
	s := startFleet(t, 1).Servers()[0]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answer != nil && r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") {
			answer(w, r)
			return
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL
}

// sdkError is what an SDK's typed error says, for the figure and the checks.
type sdkError struct {
	status                       int
	typ, message, param, request string
}

func (e sdkError) String() string {
	return fmt.Sprintf("%d | %s | %q | %q | %s", e.status, e.typ, e.message, e.param, e.request)
}

// openAIError reads the OpenAI SDK's *Error (the zero sdkError if err is not one).
func openAIError(err error) (sdkError, bool) {
	var oe *oa.Error
	if !errors.As(err, &oe) {
		return sdkError{}, false
	}
	rid := ""
	if oe.Response != nil {
		rid = oe.Response.Header.Get(proxy.RequestIDHeader)
	}
	return sdkError{oe.StatusCode, oe.Type, oe.Message, oe.Param, rid}, true
}

// anthropicError reads the Anthropic SDK's *Error. The SDK's RequestID comes from the
// request-id header, which must carry the same id as X-Request-Id; a mismatch reads as no id.
func anthropicError(err error) (sdkError, bool) {
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		return sdkError{}, false
	}
	rid := ae.RequestID
	if ae.Response == nil || ae.Response.Header.Get(proxy.RequestIDHeader) != rid {
		rid = ""
	}
	return sdkError{ae.StatusCode, string(ae.Type()), ae.Message, "", rid}, true
}

// sdkCalls makes one request per API through the official SDKs and reads the typed error
// each returns.
func sdkCalls(base string) map[string]func(context.Context) (sdkError, bool) {
	c := client(base)
	ac := anthropic.NewClient(aoption.WithBaseURL(base+"/"), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
	user := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}
	return map[string]func(context.Context) (sdkError, bool){
		"chat": func(ctx context.Context) (sdkError, bool) {
			_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model, Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")}})
			return openAIError(err)
		},
		"completions": func(ctx context.Context) (sdkError, bool) {
			_, err := c.Completions.New(ctx, oa.CompletionNewParams{Model: model, Prompt: oa.CompletionNewParamsPromptUnion{OfString: oa.String("hi")}})
			return openAIError(err)
		},
		"embeddings": func(ctx context.Context) (sdkError, bool) {
			_, err := c.Embeddings.New(ctx, oa.EmbeddingNewParams{Model: model, Input: oa.EmbeddingNewParamsInputUnion{OfString: oa.String("hi")}})
			return openAIError(err)
		},
		"responses": func(ctx context.Context) (sdkError, bool) {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("hi")}})
			return openAIError(err)
		},
		"responses (stream)": func(ctx context.Context) (sdkError, bool) {
			s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("hi")}})
			for s.Next() {
			}
			return openAIError(s.Err())
		},
		"messages": func(ctx context.Context) (sdkError, bool) {
			_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: 8, Messages: user})
			return anthropicError(err)
		},
		"messages (stream)": func(ctx context.Context) (sdkError, bool) {
			s := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: model, MaxTokens: 8, Messages: user})
			for s.Next() {
			}
			return anthropicError(s.Err())
		},
	}
}

var sdkAPIs = []string{"chat", "completions", "embeddings", "responses", "responses (stream)", "messages", "messages (stream)"}

// A backend's 400 and 500 reach both official SDKs as their typed errors, in the shape of
// the API called: the backend's status and message, the field it named, the API's own error
// type (not vLLM's exception names), the request id; no backend address.
func TestBackendErrorsReachSDKs(t *testing.T) {
	vllm400 := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","param":"max_tokens","code":400}}`)
	}
	for _, tc := range []struct {
		name                  string
		answer                func(base string) http.HandlerFunc
		status                int
		openAIType, anthType  string
		message, anthMessage  string
		param                 string
		retryAfter, forbidden bool
	}{
		{name: "400 (vLLM, naming a field)", answer: func(string) http.HandlerFunc { return vllm400 }, status: 400,
			openAIType: "invalid_request_error", anthType: "invalid_request_error",
			message: "max_tokens must be at least 1, got 0.", anthMessage: "max_tokens must be at least 1, got 0.", param: "max_tokens"},
		{name: "500 (the simulator's fault)", answer: func(string) http.HandlerFunc {
			return simfleet.Faults{Status: 500}.Wrap(http.NotFoundHandler()).ServeHTTP
		}, status: 500, openAIType: "server_error", anthType: "api_error",
			message: "simulated fault: answering Internal Server Error", anthMessage: "simulated fault: answering Internal Server Error"},
		{name: "503 with Retry-After and an address in the message", answer: func(base string) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, `{"error":{"message":"engine at %s is draining","type":"ServiceUnavailableError","param":null,"code":503}}`, base)
			}
		}, status: 503, openAIType: "service_unavailable", anthType: "overloaded_error",
			message: "engine at [address] is draining", anthMessage: "engine at [address] is draining", retryAfter: true, forbidden: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			var answer http.HandlerFunc
			url = frontedServer(t, func(w http.ResponseWriter, r *http.Request) { answer(w, r) })
			answer = tc.answer(url)
			leak := strings.TrimPrefix(url, "http://") // the backend's address, which must not reach the client
			opts := testOptions([]proxy.Backend{{URL: url}})
			h, base := startHandler(t, opts)
			calls := sdkCalls(base)
			t.Logf("API | status | type | message | param | request id")
			for _, api := range sdkAPIs {
				got, ok := calls[api](context.Background())
				t.Logf("%s | %s", api, got)
				if !ok {
					t.Errorf("%s: not the SDK's typed error", api)
					continue
				}
				want := sdkError{status: tc.status, typ: tc.openAIType, message: tc.message, param: tc.param}
				if strings.HasPrefix(api, "messages") {
					want = sdkError{status: tc.status, typ: tc.anthType, message: tc.anthMessage}
				}
				if got.request == "" {
					t.Errorf("%s: no request id", api)
				}
				got.request = ""
				if got != want {
					t.Errorf("%s: got %s, want %s", api, got, want)
				}
				if tc.forbidden && strings.Contains(got.message, leak) {
					t.Errorf("%s: the backend's address reached the client: %q", api, got.message)
				}
			}
			// The request id, Retry-After and the content type, on the wire.
			resp, err := http.Post(base+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Header.Get(proxy.RequestIDHeader) == "" || resp.Header.Get("Content-Type") != "application/json" ||
				(tc.retryAfter && resp.Header.Get("Retry-After") != "7") || strings.Contains(string(body), leak) {
				t.Errorf("wire: %d %v %s; want the request id, JSON, Retry-After kept, no address", resp.StatusCode, resp.Header, body)
			}
			closedExactlyOnce(t, h)
		})
	}
}

// A Responses stream that breaks mid-way ends as OpenAI's do: an error event, then
// response.failed carrying the response (status failed, its error), every event numbered on
// from the backend's sequence_number.
func TestResponsesStreamFailed(t *testing.T) {
	p := simproc.Start(t, simproc.Options{})
	_, base := startHandler(t, testOptions([]proxy.Backend{{URL: p.URL}}))
	c := client(base)
	s := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: model, MaxOutputTokens: oa.Int(2000), Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("hi")},
	})
	var types []string
	var seqs []int64
	var failed responses.Response
	var createdID string
	killed := false
	for s.Next() {
		ev := s.Current()
		types, seqs = append(types, ev.Type), append(seqs, ev.SequenceNumber)
		switch ev.Type {
		case "response.created":
			createdID = ev.Response.ID
		case "response.output_text.delta":
			if !killed {
				killed = true
				p.Kill() // mid-stream
			}
		case "response.failed":
			failed = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v (types %v)", err, types)
	}
	n := len(types)
	t.Logf("%d events, the last: %v, sequence numbers %v", n, types[max(0, n-3):], seqs[max(0, n-3):])
	if n < 3 || types[n-2] != "error" || types[n-1] != "response.failed" {
		t.Fatalf("stream ends %v, want ... error, response.failed", types[max(0, n-3):])
	}
	for i := range seqs {
		if seqs[i] != int64(i) {
			t.Fatalf("sequence numbers %v: want 0, 1, 2, ... with no gap or repeat", seqs)
		}
	}
	if failed.Status != "failed" || failed.Error.Message == "" || failed.Error.Code != "server_error" || failed.ID != createdID || createdID == "" {
		t.Errorf("response.failed carries %q status %q error %+v; want the created response %q, failed, with its error",
			failed.ID, failed.Status, failed.Error, createdID)
	}
}

// Errors a backend reports inside its streams are handed on in the API's events: a chat
// chunk {"error":...} with OpenAI's types, a Responses error event without a number numbered
// and followed by response.failed.
func TestStreamErrorsTranslated(t *testing.T) {
	sse := func(events ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, e := range events {
				fmt.Fprint(w, e)
			}
		}
	}
	for _, tc := range []struct {
		path, body string
		events     []string
		want       []string
	}{
		{"/v1/chat/completions", `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{`data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n",
				`data: {"error":{"message":"oops","type":"BadRequestError","param":null,"code":400}}` + "\n\n", "data: [DONE]\n\n"},
			[]string{`data: {"error":{"message":"oops","type":"invalid_request_error","param":null,"code":null}}` + "\n\n", "data: [DONE]\n\n"}},
		{"/v1/responses", `{"model":"` + model + `","stream":true,"input":"hi"}`,
			[]string{`event: response.created` + "\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_9","object":"response","status":"in_progress","model":"m","output":[]}}` + "\n\n",
				`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":1,"delta":"x"}` + "\n\n",
				`event: error` + "\n" + `data: {"type":"error","code":"server_error","message":"aborted","param":null}` + "\n\n"},
			[]string{`data: {"type":"error","code":"server_error","message":"aborted","param":null,"sequence_number":2}`,
				`event: response.failed` + "\n" + `data: {"type":"response.failed","response":{"error":{"code":"server_error","message":"aborted"},"id":"resp_9","model":"m","object":"response","output":[],"status":"failed"},"sequence_number":3}`}},
		{"/v1/messages", `{"model":"` + model + `","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{`event: message_start` + "\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":3}}}` + "\n\n",
				`data: {"error":{"message":"engine died","type":"InternalServerError","param":null,"code":500}}` + "\n\n"},
			[]string{"event: error\ndata: " + `{"type":"error","error":{"type":"api_error","message":"engine died"}}` + "\n\n"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			url := frontedServer(t, sse(tc.events...))
			_, base := startHandler(t, testOptions([]proxy.Backend{{URL: url}}))
			resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, w := range tc.want {
				if !strings.Contains(string(got), w) {
					t.Errorf("stream %q\nwant it to hold %q", got, w)
				}
			}
		})
	}
}

func TestModelsGet(t *testing.T) {
	fleet := startFleet(t, 1)
	_, base := startHandler(t, testOptions(backendsOf(fleet)))
	c := client(base)
	ctx := context.Background()
	m, err := c.Models.Get(ctx, model) // "usher/demo": the id holds a '/'
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if m.ID != model || m.Object != "model" || m.OwnedBy == "" || m.Created == 0 {
		t.Errorf("model %+v, want id %q, object model, owned_by and created", m, model)
	}
	_, err = c.Models.Get(ctx, "no-such-model")
	if got, ok := openAIError(err); !ok || got.status != 404 || got.param != "model" || !strings.Contains(got.message, "no-such-model") {
		t.Errorf("unknown model: %v (%+v), want 404 naming model", err, got)
	}
	var oe *oa.Error
	if errors.As(err, &oe) && oe.Code != "model_not_found" {
		t.Errorf("code %q, want model_not_found", oe.Code)
	}

	// Configured models and adapters: OpenAI's fields and vLLM's root and parent.
	opts := testOptions([]proxy.Backend{{URL: fleet.URLs()[0], Models: []string{model}, Adapters: []string{"sql-lora"}}})
	_, base = startHandler(t, opts)
	resp, err := http.Get(base + "/v1/models/sql-lora")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&obj)
	resp.Body.Close()
	if obj["id"] != "sql-lora" || obj["object"] != "model" || obj["parent"] != model || obj["root"] != "sql-lora" || obj["created"] == nil {
		t.Errorf("adapter object %v, want id, object, created, root and parent %q", obj, model)
	}
}

func TestCountTokens(t *testing.T) {
	params := anthropic.MessageCountTokensParams{
		Model:    model,
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("You review Go code.")},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Review this: func f() {}"))},
	}
	count := func(t *testing.T, base string) int64 {
		t.Helper()
		ac := anthropic.NewClient(aoption.WithBaseURL(base+"/"), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
		n, err := ac.Messages.CountTokens(context.Background(), params)
		if err != nil {
			t.Fatalf("count_tokens: %v", err)
		}
		return n.InputTokens
	}
	// Forwarded to a server that counts.
	fleet := startFleet(t, 1)
	_, base := startHandler(t, testOptions(backendsOf(fleet)))
	forwarded := count(t, base)

	// A server without the endpoint: the gateway's tokenizer counts, exactly with the
	// simulator's Tokenizer, and the server is not asked again for a while.
	var asked atomic.Int64
	lacking := frontedServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages/count_tokens" {
			asked.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"detail":"Not Found"}`)
			return
		}
		http.Error(w, "unexpected", http.StatusTeapot)
	})
	_, base = startHandler(t, testOptions([]proxy.Backend{{URL: lacking}}))
	exact, again := count(t, base), count(t, base)
	// And with the default BytesTokenizer: an estimate.
	opts := testOptions([]proxy.Backend{{URL: lacking}})
	opts.Tokenizer = nil
	_, base = startHandler(t, opts)
	estimate := count(t, base)
	t.Logf("input_tokens: forwarded %d, the simulator's Tokenizer %d, BytesTokenizer %d", forwarded, exact, estimate)
	if forwarded <= 0 || exact != forwarded || again != exact || estimate <= 0 {
		t.Errorf("counts forwarded %d, tokenizer %d then %d, bytes %d; want forwarded > 0 = the tokenizer's, bytes > 0", forwarded, exact, again, estimate)
	}
	if asked.Load() != 2 { // once per Handler; the second count of the first was not sent
		t.Errorf("the server without count_tokens was asked %d times, want 2 (once per gateway)", asked.Load())
	}

	// Bad input: Anthropic's errors naming the field.
	for body, want := range map[string]string{
		`{"model":"` + model + `"}`:                                          `"type":"invalid_request_error","message":"\"messages\" is required"`,
		`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`:       `"type":"not_found_error","message":"model: the model \"nope\" does not exist here"`,
		`{"model":"` + model + `","messages":[{"role":"user","content":5}]}`: `"type":"invalid_request_error"`,
	} {
		resp, err := http.Post(base+"/v1/messages/count_tokens", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || !strings.Contains(string(got), want) {
			t.Errorf("%s: %d %s, want %s", body, resp.StatusCode, got, want)
		}
	}
}

// Embeddings through the OpenAI SDK's default call are the simulator's vectors, and a
// request for base64 (what the Node and Python SDKs send by default) gets the same vectors as
// little-endian float32s.
func TestEmbeddingsEncodings(t *testing.T) {
	fleet := startFleet(t, 1)
	_, base := startHandler(t, testOptions(backendsOf(fleet)))
	c := client(base)
	emb, err := c.Embeddings.New(context.Background(), oa.EmbeddingNewParams{
		Model: model, Input: oa.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a b", "c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	norm := 0.0
	for _, x := range emb.Data[0].Embedding {
		norm += x * x
	}
	if len(emb.Data) != 2 || math.Abs(norm-1) > 1e-6 {
		t.Fatalf("embeddings %+v: want 2 unit vectors", emb.Data)
	}
	resp, err := http.Post(base+"/v1/embeddings", "application/json",
		strings.NewReader(`{"model":"`+model+`","input":["a b","c"],"encoding_format":"base64"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || len(out.Data) != 2 {
		t.Fatalf("base64 answer: %v, %d vectors", err, len(out.Data))
	}
	for i, d := range out.Data {
		raw, err := base64.StdEncoding.DecodeString(d.Embedding)
		if err != nil || len(raw) != 4*len(emb.Data[i].Embedding) {
			t.Fatalf("vector %d: %v, %d bytes for %d floats", i, err, len(raw), len(emb.Data[i].Embedding))
		}
		for j, want := range emb.Data[i].Embedding {
			got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			if float32(want) != got {
				t.Fatalf("vector %d[%d] = %v in base64, %v as floats", i, j, got, want)
			}
		}
	}
}

// A backend's 502 handed on once the retries are spent gets a log line with the request id.
func TestBackendErrorLogged(t *testing.T) {
	failing := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, `{"error":{"message":"engine dead","type":"BadGatewayError","code":502}}`)
	}
	var log syncBuffer
	opts := testOptions([]proxy.Backend{{URL: fakeBackend(t, failing).URL}, {URL: fakeBackend(t, failing).URL}})
	opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
	_, base := startHandler(t, opts)
	resp, e := post(t, base+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	rid := resp.Header.Get(proxy.RequestIDHeader)
	if resp.StatusCode != http.StatusBadGateway || e.Type != "server_error" || e.Message != "engine dead" || rid == "" {
		t.Errorf("answer %d %+v id %q, want the backend's 502 as server_error with its message and an id", resp.StatusCode, e, rid)
	}
	line := ""
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "backend error handed on") {
			line = l
		}
	}
	for _, want := range []string{"request_id=" + rid + " ", "attempts=2, retries exhausted", "answered 502", "engine dead"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q, want it to hold %q", line, want)
		}
	}
}
