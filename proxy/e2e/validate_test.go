package e2e_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/proxy"
)

// TestRefusedValues sends the values no engine takes to each API through the gateway: each
// is refused with 400 in the endpoint's own error shape, naming the field, and never
// admitted; the values vLLM takes beyond OpenAI's ranges reach the server and are answered.
// Run with -v, it logs the table of refusals.
func TestRefusedValues(t *testing.T) {
	fleet := startFleet(t, 1)
	h, base := startHandler(t, testOptions(backendsOf(fleet)))
	msg := `"messages":[{"role":"user","content":"hi"}]`
	chat := func(f string) string { return `{"model":"usher/demo","max_tokens":2,` + f + `,` + msg + `}` }
	comp := func(f string) string { return `{"model":"usher/demo","max_tokens":2,"prompt":"hi",` + f + `}` }
	resp := func(f string) string { return `{"model":"usher/demo","max_output_tokens":2,"input":"hi",` + f + `}` }
	anth := func(f string) string { return `{"model":"usher/demo","max_tokens":2,` + msg + `,` + f + `}` }
	emb := func(f string) string { return `{"model":"usher/demo","input":"hi",` + f + `}` }
	parts := func(p string) string {
		return `{"model":"usher/demo","max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"see"},` + p + `]}]}`
	}
	tests := []struct {
		path, value, body string
		status            int // 0: 400
		code, param       string
	}{
		{"/v1/chat/completions", `temperature "NaN"`, chat(`"temperature":"NaN"`), 0, "invalid_type", "temperature"},
		{"/v1/chat/completions", `temperature -1`, chat(`"temperature":-1`), 0, "invalid_value", "temperature"},
		{"/v1/chat/completions", `temperature 1e309`, chat(`"temperature":1e309`), 0, "invalid_value", "temperature"},
		{"/v1/chat/completions", `logprobs "yes"`, chat(`"logprobs":"yes"`), 0, "invalid_type", "logprobs"},
		{"/v1/chat/completions", `logprobs 1`, chat(`"logprobs":1`), 0, "invalid_type", "logprobs"},
		{"/v1/chat/completions", `seed 1e999999999`, chat(`"seed":1e999999999`), 0, "invalid_type", "seed"},
		{"/v1/chat/completions", `seed 2^63`, chat(`"seed":9223372036854775808`), 0, "invalid_value", "seed"},
		{"/v1/chat/completions", `top_p 0`, chat(`"top_p":0`), 0, "invalid_value", "top_p"},
		{"/v1/chat/completions", `top_p 1.5`, chat(`"top_p":1.5`), 0, "invalid_value", "top_p"},
		{"/v1/chat/completions", `top_k -2`, chat(`"top_k":-2`), 0, "invalid_value", "top_k"},
		{"/v1/chat/completions", `top_logprobs 21`, chat(`"logprobs":true,"top_logprobs":21`), 0, "invalid_value", "top_logprobs"},
		{"/v1/chat/completions", `top_logprobs -1`, chat(`"logprobs":true,"top_logprobs":-1`), 0, "invalid_value", "top_logprobs"},
		{"/v1/chat/completions", `n 0`, chat(`"n":0`), 0, "invalid_value", "n"},
		{"/v1/chat/completions", `max_completion_tokens 0`, `{"model":"usher/demo","max_completion_tokens":0,` + msg + `}`, 0, "invalid_value", "max_completion_tokens"},
		{"/v1/chat/completions", `presence_penalty "1"`, chat(`"presence_penalty":"1"`), 0, "invalid_type", "presence_penalty"},
		{"/v1/chat/completions", `stop [1]`, chat(`"stop":[1]`), 0, "invalid_type", "stop[0]"},
		{"/v1/chat/completions", `logit_bias {"1":"x"}`, chat(`"logit_bias":{"1":"x"}`), 0, "invalid_type", "logit_bias.1"},
		{"/v1/chat/completions", `image_url 5`, parts(`{"type":"image_url","image_url":5}`), 0, "invalid_type", "messages[0].content[1].image_url"},
		{"/v1/chat/completions", `image_url {}`, parts(`{"type":"image_url","image_url":{}}`), 0, "missing_field", "messages[0].content[1].image_url.url"},
		{"/v1/chat/completions", `text part without text`, parts(`{"type":"text"}`), 0, "missing_field", "messages[0].content[1].text"},
		{"/v1/completions", `logprobs true`, comp(`"logprobs":true`), 0, "invalid_type", "logprobs"},
		{"/v1/completions", `logprobs 21`, comp(`"logprobs":21`), 0, "invalid_value", "logprobs"},
		{"/v1/completions", `temperature -0.5`, comp(`"temperature":-0.5`), 0, "invalid_value", "temperature"},
		{"/v1/completions", `max_tokens 0`, `{"model":"usher/demo","max_tokens":0,"prompt":"hi"}`, 0, "invalid_value", "max_tokens"},
		{"/v1/responses", `temperature "NaN"`, resp(`"temperature":"NaN"`), 0, "invalid_type", "temperature"},
		{"/v1/responses", `top_logprobs 21`, resp(`"top_logprobs":21`), 0, "invalid_value", "top_logprobs"},
		{"/v1/responses", `max_output_tokens 0`, `{"model":"usher/demo","max_output_tokens":0,"input":"hi"}`, 0, "invalid_value", "max_output_tokens"},
		{"/v1/responses", `input_image image_url 5`, `{"model":"usher/demo","input":[{"role":"user","content":[{"type":"input_image","image_url":5}]}]}`, 0, "invalid_type", "input[0].content[0].image_url"},
		{"/v1/messages", `temperature -1`, anth(`"temperature":-1`), 0, "invalid_value", "temperature"},
		{"/v1/messages", `top_k -2`, anth(`"top_k":-2`), 0, "invalid_value", "top_k"},
		{"/v1/messages", `top_p 0`, anth(`"top_p":0`), 0, "invalid_value", "top_p"},
		{"/v1/messages", `max_tokens 0`, `{"model":"usher/demo","max_tokens":0,` + msg + `}`, 0, "invalid_value", "max_tokens"},
		{"/v1/messages", `stop_sequences "x"`, anth(`"stop_sequences":"x"`), 0, "invalid_type", "stop_sequences"},
		{"/v1/embeddings", `dimensions 1.5`, emb(`"dimensions":1.5`), 0, "invalid_type", "dimensions"},
		// What vLLM takes beyond OpenAI's ranges, and its own sampling parameters, pass.
		{"/v1/chat/completions", `temperature 2.5`, chat(`"temperature":2.5`), 200, "", ""},
		{"/v1/chat/completions", `top_k -1, min_p, repetition_penalty`, chat(`"top_k":-1,"min_p":0.05,"repetition_penalty":1.1`), 200, "", ""},
		{"/v1/chat/completions", `top_k 50`, chat(`"top_k":50`), 200, "", ""},
		{"/v1/chat/completions", `logprobs true, top_logprobs 5`, chat(`"logprobs":true,"top_logprobs":5`), 200, "", ""},
		{"/v1/completions", `logprobs 5, temperature 3`, comp(`"logprobs":5,"temperature":3`), 200, "", ""},
		{"/v1/messages", `top_k 40, temperature 1`, anth(`"top_k":40,"temperature":1`), 200, "", ""},
	}
	var table strings.Builder
	table.WriteString("\n| endpoint | value | status | param | code |\n|---|---|---|---|---|\n")
	for _, tt := range tests {
		want := tt.status
		if want == 0 {
			want = http.StatusBadRequest
		}
		before := h.Queue().Stats().Dispatched
		req, _ := http.NewRequest(http.MethodPost, base+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s %s: status %d (%s), want %d", tt.path, tt.value, res.StatusCode, data, want)
			continue
		}
		if want == http.StatusOK {
			table.WriteString("| " + tt.path + " | `" + tt.value + "` | 200 | | |\n")
			continue
		}
		if after := h.Queue().Stats().Dispatched; after != before {
			t.Errorf("%s %s: a refused request was admitted", tt.path, tt.value)
		}
		code, param := checkErrorShape(t, tt.path, res, data)
		if tt.path != "/v1/messages" && (code != tt.code || param != tt.param) {
			t.Errorf("%s %s: code %q param %q, want %q %q", tt.path, tt.value, code, param, tt.code, tt.param)
		}
		if !strings.Contains(string(data), tt.param) {
			t.Errorf("%s %s: %s does not name %q", tt.path, tt.value, data, tt.param)
		}
		table.WriteString("| " + tt.path + " | `" + tt.value + "` | 400 | " + tt.param + " | " + tt.code + " |\n")
	}
	t.Log(table.String())
	closedExactlyOnce(t, h)
}

// checkErrorShape checks that data is an error answer in the shape of path's API — OpenAI's
// {"error":{...}}, or Anthropic's {"type":"error","error":{"type","message"}} on /v1/messages
// — with a request id, and returns the OpenAI code and param ("" for Anthropic's).
func checkErrorShape(t *testing.T, path string, res *http.Response, data []byte) (code, param string) {
	t.Helper()
	if res.Header.Get(proxy.RequestIDHeader) == "" {
		t.Errorf("%s: no %s", path, proxy.RequestIDHeader)
	}
	if path == "/v1/messages" {
		var out struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(data, &out); err != nil || out.Type != "error" || out.Error.Type == "" || out.Error.Message == "" {
			t.Errorf("%s: %s is not an Anthropic error", path, data)
		}
		return "", ""
	}
	e := decodeError(t, res, data)
	if e.Type != "invalid_request_error" {
		t.Errorf("%s: type %q, want invalid_request_error", path, e.Type)
	}
	return e.Code, e.Param
}

// recorder is a backend in front of a simulated server that notes, for each POST, its
// Content-Encoding and the body it received.
type recorder struct {
	mu     sync.Mutex
	coding []string
	bodies [][]byte
}

func startRecorder(t *testing.T, target string) (*recorder, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			rec.mu.Lock()
			rec.coding = append(rec.coding, r.Header.Get("Content-Encoding"))
			rec.bodies = append(rec.bodies, body)
			rec.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func deflated(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := zlib.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestContentEncoding sends bodies with a Content-Encoding: the OpenAI SDK's chat request
// gzipped (and deflated) reaches the server decoded and without the header; a gzip bomb is
// refused with 413 once its decoded bytes pass the limit; codings the gateway cannot decode
// get 415, and a body that is not what its coding says 400 — each in the endpoint's shape.
func TestContentEncoding(t *testing.T) {
	fleet := startFleet(t, 1)
	rec, backend := startRecorder(t, fleet.URLs()[0])
	opts := testOptions([]proxy.Backend{{URL: backend}})
	opts.MaxBodyBytes = 1 << 20
	h, base := startHandler(t, opts)
	ctx := context.Background()

	// The SDK's own request, compressed on its way out.
	encode := func(coding string) option.Middleware {
		return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			enc := deflated(t, body)
			if coding == "gzip" {
				enc = gzipped(t, body)
			}
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(enc)), int64(len(enc))
			req.GetBody = nil
			req.Header.Set("Content-Encoding", coding)
			return next(req)
		}
	}
	for _, coding := range []string{"gzip", "deflate"} {
		c := client(base, option.WithMiddleware(encode(coding)))
		answer, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
			Model: model, MaxTokens: oa.Int(3), Temperature: oa.Float(0.5),
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Hello, compressed world")},
		})
		if err != nil {
			t.Fatalf("%s: %v", coding, err)
		}
		if len(answer.Choices) != 1 || answer.Usage.CompletionTokens == 0 {
			t.Fatalf("%s: answer %+v, want one choice and usage", coding, answer)
		}
		rec.mu.Lock()
		got, body := rec.coding[len(rec.coding)-1], rec.bodies[len(rec.bodies)-1]
		rec.mu.Unlock()
		if got != "" || !json.Valid(body) || !bytes.Contains(body, []byte("Hello, compressed world")) {
			t.Errorf("%s: the backend got Content-Encoding %q and body %q, want the decoded JSON without the header", coding, got, body)
		}
	}

	plain := []byte(`{"model":"usher/demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	anthPlain := []byte(`{"model":"usher/demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	// 64 MiB of one byte inside a JSON string: about 64 KiB gzipped, 64 × the limit decoded.
	bomb := gzipped(t, []byte(`{"model":"usher/demo","messages":[{"role":"user","content":"`+strings.Repeat("a", 64<<20)+`"}]}`))
	truncated := gzipped(t, plain)
	truncated = truncated[:len(truncated)/2]
	tests := []struct {
		name, path, coding string
		body               []byte
		status             int
		code               string
	}{
		{"identity", "/v1/chat/completions", "identity", plain, 200, ""},
		{"x-gzip", "/v1/chat/completions", "x-gzip", gzipped(t, plain), 200, ""},
		{"gzip on Anthropic's endpoint", "/v1/messages", "gzip", gzipped(t, anthPlain), 200, ""},
		{"a gzip bomb", "/v1/chat/completions", "gzip", bomb, 413, "request_too_large"},
		{"br", "/v1/chat/completions", "br", plain, 415, "unsupported_content_encoding"},
		{"zstd", "/v1/chat/completions", "zstd", plain, 415, "unsupported_content_encoding"},
		{"br on Anthropic's endpoint", "/v1/messages", "br", anthPlain, 415, ""},
		{"two codings", "/v1/chat/completions", "gzip, gzip", gzipped(t, gzipped(t, plain)), 415, "unsupported_content_encoding"},
		{"gzip on a plain body", "/v1/chat/completions", "gzip", plain, 400, "invalid_content_encoding"},
		{"a cut gzip body", "/v1/chat/completions", "gzip", truncated, 400, "invalid_content_encoding"},
		{"deflate on a gzip body", "/v1/chat/completions", "deflate", gzipped(t, plain), 400, "invalid_content_encoding"},
		{"data after a deflate stream", "/v1/chat/completions", "deflate", append(deflated(t, plain), "{}"...), 400, "invalid_content_encoding"},
		{"data after a gzip stream", "/v1/chat/completions", "gzip", append(gzipped(t, plain), "{}"...), 400, "invalid_content_encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.Queue().Stats().Dispatched
			req, _ := http.NewRequest(http.MethodPost, base+tt.path, bytes.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", tt.coding)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			runtime.ReadMemStats(&m1)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", res.StatusCode, data, tt.status)
			}
			if tt.status == http.StatusRequestEntityTooLarge {
				// Decoding stopped at the limit: the process allocated a few times the 1 MiB
				// limit, not the bomb's 64 MiB (the scrapes running meanwhile are small).
				alloc := m1.TotalAlloc - m0.TotalAlloc
				t.Logf("a %d-byte gzip bomb of 64 MiB: %d bytes allocated while it was refused", len(tt.body), alloc)
				if alloc > 16<<20 || !strings.Contains(string(data), "once decoded") {
					t.Errorf("%d bytes allocated, answer %s; want the decoding stopped at the limit", alloc, data)
				}
			}
			if tt.status == http.StatusOK {
				return
			}
			if after := h.Queue().Stats().Dispatched; after != before {
				t.Errorf("a refused request was admitted")
			}
			code, _ := checkErrorShape(t, tt.path, res, data)
			if code != tt.code {
				t.Errorf("code %q (%s), want %q", code, data, tt.code)
			}
			if tt.status == http.StatusUnsupportedMediaType && !strings.Contains(string(data), "Content-Encoding") {
				t.Errorf("%s does not name Content-Encoding", data)
			}
		})
	}
	closedExactlyOnce(t, h)
}

// The official SDKs let through values no engine takes; the gateway refuses them, and each
// SDK reads the refusal as its own error type, the field named.
func TestSDKRefusedValues(t *testing.T) {
	fleet := startFleet(t, 1)
	h, base := startHandler(t, testOptions(backendsOf(fleet)))
	ctx := context.Background()

	c := client(base)
	_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
		Model: model, MaxTokens: oa.Int(3), Temperature: oa.Float(-1), TopLogprobs: oa.Int(30), Logprobs: oa.Bool(true),
		Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")},
	})
	var oe *oa.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadRequest || oe.Type != "invalid_request_error" ||
		oe.Code != "invalid_value" || oe.Param != "temperature" || !strings.Contains(oe.Message, `"temperature" must be at least 0`) {
		t.Errorf("chat with temperature -1: %v, want a 400 naming temperature", err)
	}

	ac := anthropic.NewClient(aoption.WithBaseURL(base+"/"), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(0))
	// This SDK has no sampling fields of its own: the way it sends one is an extra JSON field.
	_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{
		Model: model, MaxTokens: 4,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	}, aoption.WithJSONSet("top_k", -2))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest ||
		!strings.Contains(ae.RawJSON(), `"type":"invalid_request_error"`) || !strings.Contains(ae.RawJSON(), "top_k") {
		t.Errorf("messages with top_k -2: %v, want a 400 invalid_request_error naming top_k", err)
	}
	if st := h.Queue().Stats(); st.Dispatched != 0 {
		t.Errorf("a refused request was admitted: %+v", st)
	}
}
