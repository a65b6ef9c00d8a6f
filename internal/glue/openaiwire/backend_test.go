package openaiwire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/usher-llm/usher/proxy/openai"
)

func TestBackendError(t *testing.T) {
	const host = "10.0.0.7:8000"
	for _, tc := range []struct {
		name   string
		ep     openai.API
		status int
		body   string
		want   openai.Error
	}{
		{"vLLM 400", openai.Chat, 400,
			`{"error":{"message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","param":"max_tokens","code":400}}`,
			openai.Error{Status: 400, Type: "invalid_request_error", Param: "max_tokens", Message: "max_tokens must be at least 1, got 0."}},
		{"vLLM 500", openai.Responses, 500,
			`{"error":{"message":"EngineCore died","type":"InternalServerError","param":null,"code":500}}`,
			openai.Error{Status: 500, Type: "server_error", Message: "EngineCore died"}},
		{"vLLM 404 model", openai.Embeddings, 404,
			`{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`,
			openai.Error{Status: 404, Type: "invalid_request_error", Param: "model", Message: "The model `x` does not exist."}},
		{"vLLM 503", openai.Completions, 503, `{"error":{"message":"busy","type":"ServiceUnavailableError","code":503}}`,
			openai.Error{Status: 503, Type: "service_unavailable", Message: "busy"}},
		{"old vLLM top level", openai.Chat, 400,
			`{"object":"error","message":"bad","type":"BadRequestError","param":"n","code":400}`,
			openai.Error{Status: 400, Type: "invalid_request_error", Param: "n", Message: "bad"}},
		{"OpenAI's own kept", openai.Chat, 429,
			`{"error":{"message":"slow down","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			openai.Error{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota", Message: "slow down"}},
		{"Anthropic body on OpenAI", openai.Chat, 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			openai.Error{Status: 529, Type: "server_error", Message: "Overloaded"}},
		{"Messages gets the param in the message", openai.Messages, 400,
			`{"error":{"message":"must be positive","type":"BadRequestError","param":"max_tokens","code":400}}`,
			openai.Error{Status: 400, Type: "invalid_request_error", Param: "max_tokens", Message: "max_tokens: must be positive"}},
		{"FastAPI detail", openai.Chat, 404, `{"detail":"Not Found"}`,
			openai.Error{Status: 404, Type: "invalid_request_error", Message: "Not Found"}},
		{"FastAPI validation", openai.Chat, 422,
			`{"detail":[{"loc":["body","messages",0,"content"],"msg":"Field required","type":"missing"}]}`,
			openai.Error{Status: 422, Type: "invalid_request_error", Param: "messages[0].content", Message: "messages[0].content: Field required"}},
		{"TGI", openai.Chat, 424, `{"error":"Request failed during generation","error_type":"generation"}`,
			openai.Error{Status: 424, Type: "invalid_request_error", Message: "Request failed during generation"}},
		{"HTML", openai.Chat, 502, `<html><body>Bad Gateway from http://` + host + `/</body></html>`,
			openai.Error{Status: 502, Type: "server_error", Message: "the model server failed: 502 Bad Gateway"}},
		{"empty", openai.Messages, 500, ``,
			openai.Error{Status: 500, Type: "server_error", Message: "the model server failed: 500 Internal Server Error"}},
		{"plain 400", openai.Chat, 400, "bad request\n",
			openai.Error{Status: 400, Type: "invalid_request_error", Message: "the model server refused the request: 400 Bad Request"}},
		{"addresses redacted", openai.Chat, 500,
			`{"error":{"message":"cannot reach http://` + host + `/v1 nor 192.168.1.20:5557 nor [fe80::1]:80 nor ` + host + `; v1.2.3 ok","type":"x"}}`,
			openai.Error{Status: 500, Type: "server_error", Message: "cannot reach [address] nor [address] nor [address] nor [address]; v1.2.3 ok"}},
		{"odd status", openai.Chat, 302, `{"error":{"message":"moved"}}`,
			openai.Error{Status: 502, Type: "server_error", Message: "moved"}},
		{"stream chunk status from code", openai.Chat, 0, `{"error":{"message":"bad","type":"BadRequestError","code":400}}`,
			openai.Error{Status: 400, Type: "invalid_request_error", Message: "bad"}},
		{"stream chunk without code", openai.Chat, 0, `{"error":{"message":"boom"}}`,
			openai.Error{Status: 500, Type: "server_error", Message: "boom"}},
		{"bad code dropped", openai.Chat, 400, `{"error":{"message":"m","code":"has space"}}`,
			openai.Error{Status: 400, Type: "invalid_request_error", Message: "m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BackendError(tc.ep, tc.status, []byte(tc.body), host, "10.0.0.7")
			if *got != tc.want {
				t.Errorf("BackendError(%d, %s)\n got %+v\nwant %+v", tc.status, tc.body, *got, tc.want)
			}
		})
	}
}

func TestBackendErrorBounds(t *testing.T) {
	long := strings.Repeat("é", 2000)
	e := BackendError(openai.Chat, 400, []byte(`{"error":{"message":"`+long+`","param":"`+long+`"}}`))
	if len(e.Message) > maxErrMessage || len(e.Param) > maxErrParam || !utf8.ValidString(e.Message) || !utf8.ValidString(e.Param) {
		t.Errorf("message %d bytes, param %d: want at most %d and %d, valid UTF-8", len(e.Message), len(e.Param), maxErrMessage, maxErrParam)
	}
	// A body beyond the bound is read only up to it: cut JSON, a generic message.
	big := `{"error":{"message":"` + strings.Repeat("x", MaxBackendError) + `"}}`
	if e := BackendError(openai.Chat, 500, []byte(big)); e.Message != genericMessage(500) {
		t.Errorf("a body beyond the bound: message %.40q, want the generic one", e.Message)
	}
}

func TestResponsesFailure(t *testing.T) {
	e := &openai.Error{Status: 502, Type: openai.TypeUpstream, Code: "stream_broken", Message: "the backend's stream broke"}
	got := string(AppendResponsesError(nil, e, 7))
	want := "event: error\ndata: {\"type\":\"error\",\"code\":\"stream_broken\",\"message\":\"the backend's stream broke\",\"param\":null,\"sequence_number\":7}\n\n"
	if got != want {
		t.Errorf("AppendResponsesError\n got %q\nwant %q", got, want)
	}
	started := []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":5,"status":"in_progress","model":"m","output":[],"error":null,"instructions":"be brief"}}`)
	for _, tc := range []struct {
		name    string
		started []byte
		want    map[string]any
	}{
		{"from response.created", started, map[string]any{"id": "resp_1", "status": "failed", "model": "m", "instructions": "be brief", "created_at": 5.0}},
		{"without", nil, map[string]any{"id": "resp_x", "status": "failed", "model": "mm", "created_at": 9.0}},
		{"broken started", []byte(`{"response":7}`), map[string]any{"id": "resp_x", "status": "failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := string(AppendResponseFailed(nil, e, 8, tc.started, FailedResponse{ID: "resp_x", Model: "mm", CreatedAt: 9}))
			data, ok := strings.CutPrefix(ev, "event: response.failed\ndata: ")
			if !ok || !strings.HasSuffix(data, "\n\n") {
				t.Fatalf("not one response.failed event: %q", ev)
			}
			var got struct {
				Type     string         `json:"type"`
				Seq      int            `json:"sequence_number"`
				Response map[string]any `json:"response"`
			}
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatalf("%v: %q", err, data)
			}
			if got.Type != "response.failed" || got.Seq != 8 {
				t.Errorf("type %q seq %d, want response.failed 8", got.Type, got.Seq)
			}
			for k, v := range tc.want {
				if got.Response[k] != v {
					t.Errorf("response.%s = %v, want %v", k, got.Response[k], v)
				}
			}
			errObj, _ := got.Response["error"].(map[string]any)
			if errObj["code"] != "server_error" || errObj["message"] != e.Message {
				t.Errorf("response.error = %v, want server_error with the message", got.Response["error"])
			}
		})
	}
}

func TestSequenceNumber(t *testing.T) {
	for _, tc := range []struct {
		data string
		n    int64
		ok   bool
	}{
		{`{"type":"response.output_text.delta","sequence_number":12,"delta":"x"}`, 12, true},
		{`{"response":{"id":"r"},"sequence_number" : 3,"type":"response.created"}`, 3, true},
		{`{"type":"x","delta":"\"sequence_number\":99"}`, 0, false},
		{`{"sequence_number":1.5}`, 0, false},
		{`{"sequence_number":-1}`, 0, false},
		{`{"sequence_number":99999999999999999999}`, 0, false},
		{`{"type":"x"}`, 0, false},
	} {
		if n, ok := SequenceNumber([]byte(tc.data)); n != tc.n || ok != tc.ok {
			t.Errorf("SequenceNumber(%s) = %d, %v; want %d, %v", tc.data, n, ok, tc.n, tc.ok)
		}
	}
}

func TestResponsesErrorEvent(t *testing.T) {
	e, seq, ok := ResponsesErrorEvent([]byte(`{"type":"error","code":"server_error","message":"aborted at 10.1.1.1:9","param":null,"sequence_number":4}`))
	if e.Code != "server_error" || e.Message != "aborted at [address]" || e.Status != 500 || seq != 4 || !ok {
		t.Errorf("got %+v, %d, %v", *e, seq, ok)
	}
	e, _, ok = ResponsesErrorEvent([]byte(`{"type":"error","code":"rate_limit_exceeded","message":""}`))
	if e.Status != 429 || e.Message == "" || ok {
		t.Errorf("got %+v, %v", *e, ok)
	}
}

// FuzzBackendError feeds arbitrary error answers to the translator: it never panics, keeps a
// status of 400..599, writes valid JSON in every API's shape, bounds what it keeps, and hands
// on no address it was told to redact.
func FuzzBackendError(f *testing.F) {
	for _, b := range []string{
		`{"error":{"message":"m","type":"BadRequestError","param":"p","code":400}}`,
		`{"object":"error","message":"m","type":"t","param":null,"code":500}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"m"}}`,
		`{"detail":[{"loc":["body","a",1],"msg":"x"}]}`,
		`{"detail":"Not Found"}`,
		`{"error":"tgi","error_type":"validation"}`,
		`<html>http://10.0.0.1:80/</html>`,
		"",
	} {
		f.Add(400, []byte(b))
		f.Add(0, []byte(b))
	}
	const host = "backend-7.svc:8000"
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		for ep := openai.Chat; ep <= openai.Embeddings; ep++ {
			e := BackendError(ep, status, body, host, "backend-7.svc")
			if e.Status < 400 || e.Status > 599 || e.Message == "" || e.Type == "" {
				t.Fatalf("BackendError(%d, %q) = %+v", status, body, *e)
			}
			if len(e.Message) > maxErrMessage || len(e.Param) > maxErrParam+len(addressMark) || len(e.Code) > maxErrCode {
				t.Fatalf("unbounded: %+v", *e)
			}
			out := AppendJSONFor(e, ep, nil)
			if !json.Valid(out) {
				t.Fatalf("not JSON: %q", out)
			}
			if strings.Contains(e.Message, "backend-7.svc") || strings.Contains(e.Param, "backend-7.svc") {
				t.Fatalf("address handed on: %+v", *e)
			}
		}
	})
}

// FuzzSequenceNumber compares SequenceNumber with a naive reference: the first
// "sequence_number" key found by bytes.Index, its value read by strconv.
func FuzzSequenceNumber(f *testing.F) {
	f.Add([]byte(`{"type":"x","sequence_number":12}`))
	f.Add([]byte(`{"q":"sequence_number","sequence_number": 7 ,"a":1}`))
	f.Add([]byte(`{"sequence_number":1e3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := SequenceNumber(data)
		var want int64
		wantOK := false
		if i := bytes.Index(data, []byte(`"sequence_number"`)); i >= 0 {
			v := bytes.TrimLeft(data[i+len(`"sequence_number"`):], " \t\r\n")
			if len(v) > 0 && v[0] == ':' {
				v = bytes.TrimLeft(v[1:], " \t\r\n")
				j := 0
				for j < len(v) && v[j] >= '0' && v[j] <= '9' {
					j++
				}
				if x, err := strconv.ParseInt(string(v[:j]), 10, 64); err == nil && x <= maxSequence &&
					(j == len(v) || (v[j] != '.' && v[j] != 'e' && v[j] != 'E')) {
					want, wantOK = x, true
				}
			}
		}
		if n != want || ok != wantOK {
			t.Fatalf("SequenceNumber(%q) = %d, %v; the reference says %d, %v", data, n, ok, want, wantOK)
		}
	})
}
