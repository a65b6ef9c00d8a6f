package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/proxy"
)

// TestBadInput sends what a careless or hostile client might, and checks the status and the
// OpenAI error (type, code, param) of each answer, and that nothing rejected was admitted.
func TestBadInput(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.MaxBodyBytes = 1 << 20
	h, base := startHandler(t, opts)
	chat, comp := base+"/v1/chat/completions", base+"/v1/completions"
	resp, emb := base+"/v1/responses", base+"/v1/embeddings"
	msg := `"messages":[{"role":"user","content":"hi"}]`
	deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	tests := []struct {
		name, url, body string
		header          http.Header
		status          int
		typ, code       string
		param           string
	}{
		{"malformed JSON", chat, `{"model": "usher/demo", "messages": [`, nil, 400, "invalid_request_error", "invalid_json", ""},
		{"trailing data", chat, `{"model":"usher/demo",` + msg + `} {}`, nil, 400, "invalid_request_error", "invalid_json", ""},
		{"not an object", chat, `[1,2,3]`, nil, 400, "invalid_request_error", "invalid_json", ""},
		{"empty body", chat, ``, nil, 400, "invalid_request_error", "invalid_json", ""},
		{"invalid UTF-8", chat, "{\"model\":\"usher/demo\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", nil, 400, "invalid_request_error", "invalid_utf8", ""},
		{"deep nesting", chat, `{"model":"usher/demo",` + msg + `,"x":` + deep + `}`, nil, 400, "invalid_request_error", "invalid_json", ""},
		{"Model in capitals", chat, `{"Model":"usher/demo",` + msg + `}`, nil, 400, "invalid_request_error", "missing_field", "model"},
		{"Messages in capitals", chat, `{"model":"usher/demo","Messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "missing_field", "messages"},
		{"no model", chat, `{` + msg + `}`, nil, 400, "invalid_request_error", "missing_field", "model"},
		{"model not a string", chat, `{"model":7,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "model"},
		{"unknown model", chat, `{"model":"gpt-7",` + msg + `}`, nil, 404, "invalid_request_error", "model_not_found", "model"},
		{"stream a string", chat, `{"model":"usher/demo","stream":"yes",` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "stream"},
		{"stream a number", chat, `{"model":"usher/demo","stream":1,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "stream"},
		{"stream twice", chat, `{"model":"usher/demo","stream":false,"stream":true,` + msg + `}`, nil, 400, "invalid_request_error", "duplicate_field", "stream"},
		{"stream_options without stream", chat, `{"model":"usher/demo","stream_options":{"include_usage":true},` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "stream_options"},
		{"negative max_tokens", chat, `{"model":"usher/demo","max_tokens":-1,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "max_tokens"},
		{"zero max_tokens", chat, `{"model":"usher/demo","max_tokens":0,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "max_tokens"},
		{"huge max_tokens", chat, `{"model":"usher/demo","max_tokens":99999999999999999999,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "max_tokens"},
		{"fractional max_tokens", chat, `{"model":"usher/demo","max_tokens":1.5,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "max_tokens"},
		{"max_tokens a string", chat, `{"model":"usher/demo","max_completion_tokens":"10",` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "max_completion_tokens"},
		{"n above 1", chat, `{"model":"usher/demo","n":2,` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "n"},
		{"no messages", chat, `{"model":"usher/demo","messages":[]}`, nil, 400, "invalid_request_error", "invalid_value", "messages"},
		{"messages not an array", chat, `{"model":"usher/demo","messages":"hi"}`, nil, 400, "invalid_request_error", "invalid_type", "messages"},
		{"unknown role", chat, `{"model":"usher/demo","messages":[{"role":"wizard","content":"hi"}]}`, nil, 400, "invalid_request_error", "invalid_value", "messages[0].role"},
		{"role in capitals", chat, `{"model":"usher/demo","messages":[{"ROLE":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "missing_field", "messages[0].role"},
		{"content a number", chat, `{"model":"usher/demo","messages":[{"role":"user","content":5}]}`, nil, 400, "invalid_request_error", "invalid_type", "messages[0].content"},
		{"text part without text", chat, `{"model":"usher/demo","messages":[{"role":"user","content":[{"type":"text"}]}]}`, nil, 400, "invalid_request_error", "missing_field", "messages[0].content[0].text"},
		{"priority a string", chat, `{"model":"usher/demo","priority":"high",` + msg + `}`, nil, 400, "invalid_request_error", "invalid_type", "priority"},
		{"kv_transfer_params from a client", chat, `{"model":"usher/demo","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.9","remote_port":5600},` + msg + `}`, nil, 400, "invalid_request_error", "invalid_value", "kv_transfer_params"},
		{"completions without prompt", comp, `{"model":"usher/demo"}`, nil, 400, "invalid_request_error", "missing_field", "prompt"},
		{"completions prompt a number", comp, `{"model":"usher/demo","prompt":5}`, nil, 400, "invalid_request_error", "invalid_type", "prompt"},
		{"body over the limit", chat, `{"model":"usher/demo","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}`, nil, 413, "invalid_request_error", "request_too_large", ""},
		{"huge headers", chat, `{"model":"usher/demo",` + msg + `}`, http.Header{"X-Padding": {strings.Repeat("p", 100<<10)}}, 431, "invalid_request_error", "headers_too_large", ""},
		{"unknown route", base + "/v1/audio/speech", `{}`, nil, 404, "not_found_error", "unknown_url", ""},
		// The Responses API: OpenAI's error shape, the field named.
		{"responses without input", resp, `{"model":"usher/demo"}`, nil, 400, "invalid_request_error", "missing_field", "input"},
		{"responses input a number", resp, `{"model":"usher/demo","input":7}`, nil, 400, "invalid_request_error", "invalid_type", "input"},
		{"responses item role", resp, `{"model":"usher/demo","input":[{"role":"tool","content":"x"}]}`, nil, 400, "invalid_request_error", "invalid_value", "input[0].role"},
		{"responses part text", resp, `{"model":"usher/demo","input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`, nil, 400, "invalid_request_error", "invalid_type", "input[0].content[0].text"},
		{"responses store a string", resp, `{"model":"usher/demo","input":"x","store":"no"}`, nil, 400, "invalid_request_error", "invalid_type", "store"},
		{"responses previous and conversation", resp, `{"model":"usher/demo","input":"x","previous_response_id":"r","conversation":"c"}`, nil, 400, "invalid_request_error", "invalid_value", "previous_response_id"},
		{"responses max_output_tokens zero", resp, `{"model":"usher/demo","input":"x","max_output_tokens":0}`, nil, 400, "invalid_request_error", "invalid_value", "max_output_tokens"},
		{"responses kv_transfer_params", resp, `{"model":"usher/demo","input":"x","kv_transfer_params":{"do_remote_prefill":true}}`, nil, 400, "invalid_request_error", "invalid_value", "kv_transfer_params"},
		{"responses unknown model", resp, `{"model":"gpt-7","input":"x"}`, nil, 404, "invalid_request_error", "model_not_found", "model"},
		// Embeddings.
		{"embeddings without input", emb, `{"model":"usher/demo"}`, nil, 400, "invalid_request_error", "missing_field", "input"},
		{"embeddings mixed input", emb, `{"model":"usher/demo","input":["a",[1]]}`, nil, 400, "invalid_request_error", "invalid_type", "input[1]"},
		{"embeddings negative token", emb, `{"model":"usher/demo","input":[[1,-1]]}`, nil, 400, "invalid_request_error", "invalid_value", "input[0][1]"},
		{"embeddings accepted", emb, `{"model":"usher/demo","input":"hello"}`, nil, 200, "", "", ""},
		{"responses accepted", resp, `{"model":"usher/demo","input":"hello","max_output_tokens":3,"priority":-5}`, nil, 200, "", "", ""},
		// Accepted, and read exactly as the backend reads it: "STREAM" is not "stream".
		{"STREAM in capitals is not streaming", chat, `{"model":"usher/demo","STREAM":true,"max_tokens":3,` + msg + `}`, nil, 200, "", "", ""},
		// Spoofed priority and tenant headers change nothing (no tenant header is trusted here).
		{"spoofed headers", chat, `{"model":"usher/demo","max_tokens":3,` + msg + `}`, http.Header{"X-Priority": {"0"}, "X-Tenant": {"vip"}, "X-Band": {"0"}}, 200, "", "", ""},
		{"client priority field", chat, `{"model":"usher/demo","priority":-100,"max_tokens":3,` + msg + `}`, nil, 200, "", "", ""},
	}
	ok := 0
	ids := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.Queue().Stats().Dispatched
			resp, e := post(t, tt.url, tt.body, tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d (%+v), want %d", resp.StatusCode, e, tt.status)
			}
			// Every answer names the request, with an id of its own.
			if id := resp.Header.Values(proxy.RequestIDHeader); len(id) != 1 || id[0] == "" || ids[id[0]] {
				t.Errorf("%s = %q, want one new id", proxy.RequestIDHeader, id)
			} else {
				ids[id[0]] = true
			}
			if tt.status == 200 {
				ok++
				if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type = %q, want a whole JSON answer", ct)
				}
				return
			}
			if e.Type != tt.typ || e.Code != tt.code || e.Param != tt.param {
				t.Errorf("error = type %q code %q param %q (%s), want %q %q %q", e.Type, e.Code, e.Param, e.Message, tt.typ, tt.code, tt.param)
			}
			if after := h.Queue().Stats().Dispatched; after != before {
				t.Errorf("a rejected request was admitted (%d → %d dispatched)", before, after)
			}
		})
	}
	if st := h.Queue().Stats(); st.Dispatched != uint64(ok) {
		t.Errorf("dispatched %d, want %d (the accepted requests only)", st.Dispatched, ok)
	}
	closedExactlyOnce(t, h)
}

// TestHTTPRefusals sends what net/http refuses before any handler runs, and more that only
// the Handler sees, through Handler.Listener: every answer is OpenAI error JSON, and what the
// client sent is echoed at most in part.
func TestHTTPRefusals(t *testing.T) {
	fleet := startFleet(t, 1)
	h, base := startHandler(t, testOptions(backendsOf(fleet)))
	addr := strings.TrimPrefix(base, "http://")
	chat := `{"model":"usher/demo","messages":[{"role":"user","content":"hi"}]}`
	huge := strings.Repeat("m", 1<<20)
	tests := []struct {
		name, raw    string
		status       int
		code, detail string
	}{
		{"2 MB of headers", "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 2<<20) + "\r\n\r\n",
			431, "headers_too_large", ""},
		{"a bad Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
			400, "bad_request", ""},
		{"two Content-Lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n{}}",
			400, "bad_request", ""},
		{"no Host", "GET /health HTTP/1.1\r\n\r\n", 400, "bad_request", "missing required Host header"},
		{"a malformed request line", "GET\r\n\r\n", 400, "bad_request", ""},
		{"a header without a colon", "GET /health HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", 400, "bad_request", ""},
		{"gzip transfer encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
			501, "unsupported_transfer_encoding", ""},
		{"HTTP/3.0 in the request line", "GET /health HTTP/3.0\r\nHost: x\r\n\r\n", 505, "unsupported_http_version", ""},
		{"a 1 MiB model name", fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			len(chat)+len(huge)-len("usher/demo"), strings.Replace(chat, "usher/demo", huge, 1)), 404, "model_not_found", ""},
		{"a 256 KiB path", "GET /" + strings.Repeat("a", 256<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", 404, "unknown_url", ""},
		{"a 256 KiB method", strings.Repeat("M", 256<<10) + " /x HTTP/1.1\r\nHost: x\r\n\r\n", 404, "unknown_url", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			go func() { _, _ = io.WriteString(conn, tt.raw) }() // the server may answer before reading it all
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			data, _ := io.ReadAll(resp.Body)
			e := decodeError(t, resp, data)
			if resp.StatusCode != tt.status || e.Code != tt.code {
				t.Fatalf("%d %+v, want %d %s", resp.StatusCode, e, tt.status, tt.code)
			}
			if !strings.Contains(e.Message, tt.detail) {
				t.Errorf("message %q, want it to say %q", e.Message, tt.detail)
			}
			if len(data) > 1024 {
				t.Errorf("a %d-byte error answer: echoed values must be capped", len(data))
			}
		})
	}
	// The connection's ordinary answers pass untouched.
	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health through the listener: %v", err)
	}
	resp.Body.Close()
	if st := h.Queue().Stats(); st.Dispatched != 0 {
		t.Errorf("a refused request was admitted: %+v", st)
	}
}

// A 100 MB body is refused from its Content-Length at once, without being read, and a
// chunked one as soon as it passes the limit: memory stays bounded by the limit.
func TestHugeBody(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.MaxBodyBytes = 1 << 20
	h, base := startHandler(t, opts)
	addr := strings.TrimPrefix(base, "http://")

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", 100<<20)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 100 MB Content-Length: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	if e := decodeError(t, resp, data); resp.StatusCode != 413 || e.Code != "request_too_large" {
		t.Errorf("100 MB Content-Length: %d %+v, want 413 request_too_large", resp.StatusCode, e)
	}

	// Chunked: the proxy stops reading past the limit.
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = pw.Write([]byte(`{"model":"usher/demo","messages":[{"role":"user","content":"`))
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 1600 { // 100 MB
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", pr)
	r2, err := http.DefaultClient.Do(req)
	pr.CloseWithError(io.ErrClosedPipe)
	wg.Wait()
	if err != nil {
		t.Fatalf("chunked 100 MB body: %v", err)
	}
	data, _ = io.ReadAll(r2.Body)
	r2.Body.Close()
	if e := decodeError(t, r2, data); r2.StatusCode != 413 {
		t.Errorf("chunked 100 MB: %d %+v, want 413", r2.StatusCode, e)
	}
	if st := h.Queue().Stats(); st.Dispatched != 0 {
		t.Errorf("oversized bodies were admitted: %+v", st)
	}
}

// A body that stops arriving ends with 408 when the body timeout passes.
func TestSlowBody408(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.Timeouts.Body = 200 * time.Millisecond
	h, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Start(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	if e := decodeError(t, resp, data); resp.StatusCode != http.StatusRequestTimeout || e.Code != "request_timeout" {
		t.Errorf("stalled body: %d %+v, want 408 request_timeout", resp.StatusCode, e)
	}
}

// Bands come from configuration by tenant: a spoofed header changes nothing, the trusted
// tenant header does, and the client's "priority" never reaches the engine.
func TestIdentityAndPriority(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	backend := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		if rank := r.Header.Get("X-Data-Parallel-Rank"); rank != "" {
			bodies = append(bodies, "rank header "+rank)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	var bands []int
	var flows []flowcontrol.FlowID
	observe := func(r flowcontrol.Record) {
		mu.Lock()
		bands, flows = append(bands, r.Request.Band), append(flows, r.Request.Flow)
		mu.Unlock()
	}
	q, err := flowcontrol.New(flowcontrol.Options{Bands: 4, Observer: flowcontrol.Observer{Outcome: observe}})
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("a secret of sixteen bytes or more")
	keyer, err := proxy.NewKeyer(proxy.KeyerOptions{
		Secret: secret, TenantHeader: "X-Trusted-Tenant",
		TenantBands: map[string]int{"vip": 0, proxy.TenantOfKey(secret, "gold-key"): 1}, DefaultBand: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions([]proxy.Backend{{URL: backend.URL}})
	opts.Queue, opts.Keyer = q, keyer
	_, base := startHandler(t, opts)
	body := `{"model":"m","priority":-100,"messages":[{"role":"user","content":"hi"}]}`
	for _, hd := range []http.Header{
		{"X-Priority": {"0"}, "X-Tenant": {"vip"}, "X-Data-Parallel-Rank": {"3"}}, // spoofed: band 3, no rank
		{"X-Trusted-Tenant": {"vip"}},                                  // trusted: band 0
		{"Authorization": {"Bearer gold-key"}},                         // listed key: band 1
		{"Authorization": {"Bearer some-key"}, "X-Session-Id": {"s1"}}, // unlisted key: band 3
	} {
		if resp, e := post(t, base+"/v1/chat/completions", body, hd); resp.StatusCode != 200 {
			t.Fatalf("%v: %d %+v", hd, resp.StatusCode, e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{3, 0, 1, 3}; fmt.Sprint(bands) != fmt.Sprint(want) {
		t.Errorf("bands = %v, want %v", bands, want)
	}
	if want := flowcontrol.FlowID(proxy.TenantOfKey(secret, "some-key") + "/s1"); flows[3] != want {
		t.Errorf("flow = %q, want %q", flows[3], want)
	}
	if strings.Contains(string(flows[2]), "gold") {
		t.Errorf("flow %q holds the API key", flows[2])
	}
	for _, b := range bodies {
		if strings.Contains(b, "priority") || strings.Contains(b, "rank header") {
			t.Errorf("backend saw the client's priority or rank: %s", b)
		}
	}
}

// TestBadInputAnthropic sends bad Messages requests: each answer is Anthropic's error
// ({"type":"error","error":{"type":...,"message":...}}), its message naming the field, and
// nothing rejected is admitted.
func TestBadInputAnthropic(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.MaxBodyBytes = 1 << 20
	opts.MaxInFlight, opts.QueueCapacity = 1, flowcontrol.Limits{Requests: 1} // for the 429 at the end
	h, base := startHandler(t, opts)
	msgs := base + "/v1/messages"
	hi := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body string
		status     int
		typ, field string
	}{
		{"malformed JSON", `{"model":"usher/demo",`, 400, "invalid_request_error", "invalid JSON"},
		{"no model", `{"max_tokens":5,` + hi + `}`, 400, "invalid_request_error", `"model"`},
		{"no max_tokens", `{"model":"usher/demo",` + hi + `}`, 400, "invalid_request_error", `"max_tokens"`},
		{"max_tokens a string", `{"model":"usher/demo","max_tokens":"5",` + hi + `}`, 400, "invalid_request_error", `"max_tokens"`},
		{"system role in messages", `{"model":"usher/demo","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error", `"messages[0].role"`},
		{"text block without text", `{"model":"usher/demo","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "invalid_request_error", `"messages[0].content[0].text"`},
		{"block without type", `{"model":"usher/demo","max_tokens":5,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, 400, "invalid_request_error", `"messages[0].content[0].type"`},
		{"system a number", `{"model":"usher/demo","max_tokens":5,"system":1,` + hi + `}`, 400, "invalid_request_error", `"system"`},
		{"user_id a number", `{"model":"usher/demo","max_tokens":5,"metadata":{"user_id":1},` + hi + `}`, 400, "invalid_request_error", `"metadata.user_id"`},
		{"stream twice", `{"model":"usher/demo","max_tokens":5,"stream":true,"stream":false,` + hi + `}`, 400, "invalid_request_error", `"stream"`},
		{"kv_transfer_params", `{"model":"usher/demo","max_tokens":5,"kv_transfer_params":{},` + hi + `}`, 400, "invalid_request_error", "kv_transfer_params"},
		{"unknown model", `{"model":"claude-9","max_tokens":5,` + hi + `}`, 404, "not_found_error", `"claude-9"`},
		{"body over the limit", `{"model":"usher/demo","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}`, 413, "request_too_large", "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, msgs, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(data, &e); err != nil || e.Type != "error" {
				t.Fatalf("body %s: not an Anthropic error", data)
			}
			if resp.StatusCode != tt.status || e.Error.Type != tt.typ || !strings.Contains(e.Error.Message, tt.field) {
				t.Errorf("%d %s %q, want %d %s naming %s", resp.StatusCode, e.Error.Type, e.Error.Message, tt.status, tt.typ, tt.field)
			}
		})
	}
	// GET is not allowed, and says so in Anthropic's shape.
	r, err := http.Get(msgs)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 405 || !strings.HasPrefix(string(data), `{"type":"error","error":{"type":"invalid_request_error"`) {
		t.Errorf("GET /v1/messages: %d %s, want 405 in Anthropic's shape", r.StatusCode, data)
	}
	if st := h.Queue().Stats(); st.Dispatched != 0 {
		t.Errorf("a refused request was admitted: %+v", st)
	}

	// The admission queue's 429 is Anthropic's too, with Retry-After.
	release := holdQueue(t, h, base, 2) // one in flight, one waiting
	r, err = http.Post(msgs, "application/json", strings.NewReader(`{"model":"usher/demo","max_tokens":5,`+hi+`}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" || !strings.HasPrefix(string(data), `{"type":"error","error":{"type":"rate_limit_error"`) {
		t.Errorf("queue full: %d (Retry-After %q) %s, want 429 in Anthropic's shape with Retry-After", r.StatusCode, r.Header.Get("Retry-After"), data)
	}
	release()
	closedExactlyOnce(t, h)
}
