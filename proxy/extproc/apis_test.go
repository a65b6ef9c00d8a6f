package extproc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/usher-llm/usher/flowcontrol"
)

// The Messages, Responses and Embeddings endpoints go through the same pipeline as chat: they
// are admitted and routed, their usage is read from each API's own events and answers, and
// a refusal is written in each API's error shape.
func TestAPIEndpoints(t *testing.T) {
	anthropicStream := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":16,\"output_tokens\":1}}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":2}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
	responsesStream := []string{
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16},\"output_tokens\":3}}}\n\n",
	}
	for _, tc := range []struct {
		name, path, body, contentType string
		answer                        []string
		want                          flowcontrol.Usage
	}{
		{"messages stream", "/v1/messages", `{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"text/event-stream", anthropicStream, flowcontrol.Usage{PromptTokens: 19, CachedTokens: 16, OutputTokens: 2}},
		{"messages whole", "/v1/messages", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`,
			"application/json", []string{`{"type":"message","usage":{"input_tokens":4,"cache_read_input_tokens":16,"output_tokens":5}}`},
			flowcontrol.Usage{PromptTokens: 20, CachedTokens: 16, OutputTokens: 5}},
		{"responses stream", "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`,
			"text/event-stream", responsesStream, flowcontrol.Usage{PromptTokens: 20, CachedTokens: 16, OutputTokens: 3}},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":["a","b"]}`,
			"application/json", []string{`{"data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}`}, flowcontrol.Usage{PromptTokens: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, usages := usageQueue(t)
			s := newServer(t, Options{Queue: q})
			st, _ := open(t, serve(t, s))
			send(t, st, buffered(reqHeaders(tc.path, false, nil)))
			recv(t, st)
			send(t, st, reqBody(tc.body, true))
			if header, _ := destinationOf(t, recv(t, st)); !inFleet(header) {
				t.Fatalf("destination %q, want an endpoint of the fleet", header)
			}
			send(t, st, respHeaders("200", tc.contentType, false, nil))
			recv(t, st)
			for i, ch := range tc.answer {
				send(t, st, respBody(ch, i == len(tc.answer)-1))
				recv(t, st)
			}
			_ = st.CloseSend()
			waitIdle(t, s)
			if got := usages(); len(got) != 1 || got[0] != tc.want {
				t.Errorf("usage reported to the queue: %+v, want %+v", got, tc.want)
			}
			if stats := s.Stats(); stats.Completed != 1 || stats.Failed != 0 {
				t.Errorf("stats %+v, want 1 completed", stats)
			}
		})
	}
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			`{"type":"error","error":{"type":"invalid_request_error","message":"\"max_tokens\" is required (a positive integer)"}}`},
		{"/v1/responses", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, `"param":"input[0].role"`},
		{"/v1/embeddings", `{"model":"m"}`, `"param":"input"`},
	} {
		s := newServer(t, Options{})
		st, _ := open(t, serve(t, s))
		send(t, st, buffered(reqHeaders(tc.path, false, nil)))
		recv(t, st)
		send(t, st, reqBody(tc.body, true))
		r := recv(t, st)
		if ir := r.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 400 || !strings.Contains(immediateBody(r), tc.want) {
			t.Errorf("%s: %v, want a 400 with %s", tc.path, immediateBody(r), tc.want)
		}
	}
}

// A Responses request naming a stored response goes to the endpoint that stored it, without
// fallbacks; one whose endpoint has left the set is answered 404 naming previous_response_id.
func TestPreviousResponsePinned(t *testing.T) {
	s := newServer(t, Options{Fallbacks: 2})
	turn := func(body string, answer []string) (dest string, immediate string) {
		st, _ := open(t, serve(t, s))
		send(t, st, buffered(reqHeaders("/v1/responses", false, nil)))
		recv(t, st)
		send(t, st, reqBody(body, true))
		r := recv(t, st)
		if r.GetImmediateResponse() != nil {
			_ = st.CloseSend()
			return "", immediateBody(r)
		}
		dest, _ = destinationOf(t, r)
		send(t, st, respHeaders("200", "text/event-stream", false, nil))
		recv(t, st)
		for i, ch := range answer {
			send(t, st, respBody(ch, i == len(answer)-1))
			recv(t, st)
		}
		_ = st.CloseSend()
		waitIdle(t, s)
		return dest, ""
	}
	completed := func(id string) []string {
		return []string{
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"" + id + "\",\"usage\":{\"input_tokens\":20,\"output_tokens\":3}}}\n\n",
		}
	}
	first, _ := turn(`{"model":"m","stream":true,"input":"hi"}`, completed("resp_1"))
	home := firstEndpoint(first)
	for i := range 6 {
		dest, imm := turn(`{"model":"m","stream":true,"previous_response_id":"resp_1","input":"more"}`, completed(fmt.Sprint("resp_x", i)))
		if imm != "" || dest != home {
			t.Fatalf("continuation %d: destination %q (%s), want only %q, the endpoint that stored resp_1", i, dest, imm, home)
		}
	}
	var rest []Endpoint
	for _, e := range fleet {
		if e.Address != home {
			rest = append(rest, e)
		}
	}
	if err := s.SetEndpoints(rest); err != nil {
		t.Fatal(err)
	}
	if _, imm := turn(`{"model":"m","stream":true,"previous_response_id":"resp_1","input":"more"}`, nil); !strings.Contains(imm, `"param":"previous_response_id"`) || !strings.Contains(imm, "previous_response_not_found") {
		t.Errorf("the home gone: %s, want a 404 naming previous_response_id", imm)
	}
	if dest, imm := turn(`{"model":"m","stream":true,"previous_response_id":"resp_unknown","input":"more"}`, completed("resp_2")); imm != "" || dest == "" {
		t.Errorf("an id the picker never saw: %q %s, want it routed like any request", dest, imm)
	}
}
