package openai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

func TestErrorJSON(t *testing.T) {
	for _, tc := range []struct {
		err  openai.Error
		want map[string]any
	}{
		{
			openai.Error{Status: 400, Type: openai.TypeInvalidRequest, Code: "invalid_type", Param: "stream", Message: `"stream" must be a boolean`},
			map[string]any{"message": `"stream" must be a boolean`, "type": "invalid_request_error", "param": "stream", "code": "invalid_type"},
		},
		{
			openai.Error{Status: 429, Type: openai.TypeRateLimit, Message: "slow down"},
			map[string]any{"message": "slow down", "type": "rate_limit_error", "param": nil, "code": nil},
		},
		{
			openai.Error{Status: 500, Type: openai.TypeServer, Code: "c\"x", Message: "quote \" backslash \\ newline \n tab \t nul \x00 bell \x07 \u2028 é 😀 bad \xff\xfe end"},
			map[string]any{"message": "quote \" backslash \\ newline \n tab \t nul \x00 bell \x07 \u2028 é 😀 bad \ufffd\ufffd end",
				"type": "server_error", "param": nil, "code": "c\"x"},
		},
		{openai.Error{}, map[string]any{"message": "", "type": "", "param": nil, "code": nil}},
	} {
		b := openaiwire.AppendJSON(&tc.err, []byte("x"))
		if b[0] != 'x' {
			t.Fatalf("AppendJSON did not append")
		}
		var got struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("AppendJSON = %s: %v", b[1:], err)
		}
		if !reflect.DeepEqual(got.Error, tc.want) {
			t.Errorf("AppendJSON = %s\ndecodes to %v\n      want %v", b[1:], got.Error, tc.want)
		}
		if ev := string(openaiwire.AppendEvent(&tc.err, nil)); ev != "data: "+string(b[1:])+"\n\n" {
			t.Errorf("AppendEvent = %q", ev)
		}
	}
}

func TestErrorString(t *testing.T) {
	e := &openai.Error{Status: 400, Type: openai.TypeInvalidRequest, Param: "n", Message: `"n" must be 1, got 2`}
	if got, want := e.Error(), `openai: "n" must be 1, got 2 (param n)`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Param = ""
	if got, want := e.Error(), `openai: "n" must be 1, got 2`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestErrorUnwrap(t *testing.T) {
	for _, tc := range []struct {
		status int
		typ    string
		want   bool
	}{
		{400, openai.TypeInvalidRequest, true},
		{413, openai.TypeInvalidRequest, true},
		{499, openai.TypeInvalidRequest, true},
		{500, openai.TypeInvalidRequest, false},
		{429, openai.TypeRateLimit, false},
		{404, openai.TypeNotFound, false},
		{502, openai.TypeUpstream, false},
	} {
		err := error(&openai.Error{Status: tc.status, Type: tc.typ})
		if got := errors.Is(err, openai.ErrBadRequest); got != tc.want {
			t.Errorf("errors.Is({%d %s}, ErrBadRequest) = %v, want %v", tc.status, tc.typ, got, tc.want)
		}
	}
}

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		status, want int
	}{
		{http.StatusTooManyRequests, http.StatusTooManyRequests},
		{http.StatusServiceUnavailable, http.StatusServiceUnavailable},
		{0, http.StatusInternalServerError},
		{42, http.StatusInternalServerError},
	} {
		w := httptest.NewRecorder()
		e := &openai.Error{Status: tc.status, Type: openai.TypeUnavailable, Code: "busy", Message: "try later"}
		openaiwire.WriteError(w, e)
		if w.Code != tc.want {
			t.Errorf("status %d: WriteError wrote %d, want %d", tc.status, w.Code, tc.want)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		if body, want := w.Body.String(), string(openaiwire.AppendJSON(e, nil))+"\n"; body != want {
			t.Errorf("body = %q, want %q", body, want)
		}
		if !strings.HasSuffix(w.Body.String(), "}\n") {
			t.Errorf("body does not end in a newline")
		}
	}
}

func TestAPI(t *testing.T) {
	for _, tc := range []struct {
		path string
		ep   openai.API
		ok   bool
	}{
		{"/v1/chat/completions", openai.Chat, true},
		{"/openai/v1/chat/completions", openai.Chat, true},
		{"/v1/completions", openai.Completions, true},
		{"/openai/v1/completions", openai.Completions, true},
		{"/completions", openai.Completions, true},
		{"/v1/chatcompletions", 0, false},
		{"/v1/embeddings", openai.Embeddings, true},
		{"/v1/messages", openai.Messages, true},
		{"/anthropic/v1/messages", openai.Messages, true},
		{"/v1/responses", openai.Responses, true},
		{"/v1/responses/resp_1", 0, false},
		{"/v1/messages/count_tokens", 0, false},
		{"/v1/threads/thread_1/messages", 0, false}, // OpenAI's Assistants, not Anthropic's Messages
		{"/messages", 0, false},
		{"/openai/v1/responses", openai.Responses, true},
		{"/v1/models", 0, false},
		{"/v1/chat/completions/", 0, false},
		{"completions", 0, false},
		{"", 0, false},
	} {
		ep, ok := openai.APIOf(tc.path)
		if ep != tc.ep || ok != tc.ok {
			t.Errorf("APIOf(%q) = %v, %v, want %v, %v", tc.path, ep, ok, tc.ep, tc.ok)
		}
	}
	for _, tc := range []struct {
		ep         openai.API
		path, name string
	}{
		{openai.Chat, "/v1/chat/completions", "chat"},
		{openai.Completions, "/v1/completions", "completions"},
		{openai.Messages, "/v1/messages", "messages"},
		{openai.Responses, "/v1/responses", "responses"},
		{openai.Embeddings, "/v1/embeddings", "embeddings"},
		{0, "", "API(0)"},
		{9, "", "API(9)"},
	} {
		if tc.ep.Path() != tc.path || tc.ep.String() != tc.name {
			t.Errorf("API %d: Path %q, String %q, want %q, %q", tc.ep, tc.ep.Path(), tc.ep.String(), tc.path, tc.name)
		}
	}
}
