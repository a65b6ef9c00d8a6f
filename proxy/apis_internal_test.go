package proxy

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/homes"
	"github.com/usher-llm/usher/proxy/openai"
)

// The taps read each API's usage (cached tokens included), first token and stored response
// id from its own events and answers.
func TestTapsReadAPIs(t *testing.T) {
	anthropicStream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":8,\"cache_read_input_tokens\":32,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	responsesStream := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_7\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_7\",\"usage\":{\"input_tokens\":40,\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":1}}}\n\n"
	for _, tc := range []struct {
		name                   string
		ep                     openai.API
		body                   string
		stream                 bool
		prompt, output, cached int
		stored                 string
	}{
		{"messages stream", openai.Messages, anthropicStream, true, 40, 2, 32, ""},
		{"responses stream", openai.Responses, responsesStream, true, 40, 1, 32, "resp_7"},
		{"messages whole", openai.Messages, `{"usage":{"input_tokens":3,"cache_read_input_tokens":16,"cache_creation_input_tokens":1,"output_tokens":4}}`, false, 20, 4, 16, ""},
		{"responses whole", openai.Responses, `{"id":"resp_8","usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":16},"output_tokens":4}}`, false, 20, 4, 16, "resp_8"},
		{"embeddings whole", openai.Embeddings, `{"data":[],"usage":{"prompt_tokens":5,"total_tokens":5}}`, false, 5, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{homes: homes.New(0)}
			req := &openai.Request{API: tc.ep, Store: tc.ep == openai.Responses, Stream: tc.stream}
			ex := &exchange{h: h, ctx: context.Background(), req: req, ep: tc.ep, backend: "http://b1"}
			up := io.NopCloser(strings.NewReader(tc.body))
			var r io.Reader = &wholeTap{ex: ex, up: up, keep: true}
			if tc.stream {
				r = newSSETap(ex, up)
			}
			got, err := io.ReadAll(r)
			if err != nil || string(got) != tc.body {
				t.Fatalf("relayed %q, %v; want the body unchanged", got, err)
			}
			if !ex.finished || ex.info.Err != nil {
				t.Errorf("finished %v, err %v; want a clean finish", ex.finished, ex.info.Err)
			}
			if int(ex.usage.PromptTokens) != tc.prompt || int(ex.usage.OutputTokens) != tc.output || int(ex.usage.CachedTokens) != tc.cached {
				t.Errorf("usage %+v, want prompt %d, output %d, cached %d", ex.usage, tc.prompt, tc.output, tc.cached)
			}
			if tc.stream && ex.info.FirstTokenAt.IsZero() {
				t.Error("no first token noted")
			}
			if tc.stored != "" {
				if hm, ok := h.homes.Get(homes.Key("", tc.stored)); !ok || hm.Backend != "http://b1" || hm.Session != tc.stored {
					t.Errorf("home of %s = %+v, %v; want http://b1, its own session", tc.stored, hm, ok)
				}
			}
		})
	}
}

// BenchmarkTapResponses relays a Responses stream of 64 deltas through the tap: the cost of
// reading its events (sequence numbers included) per stream.
func BenchmarkTapResponses(b *testing.B) {
	var s strings.Builder
	s.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_7\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"m\",\"output\":[]}}\n\n")
	for i := range 64 {
		s.WriteString("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\" word\",\"sequence_number\":" + strconv.Itoa(i+1) + "}\n\n")
	}
	s.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":65,\"response\":{\"id\":\"resp_7\",\"usage\":{\"input_tokens\":40,\"input_tokens_details\":{\"cached_tokens\":32},\"output_tokens\":64}}}\n\n")
	body := s.String()
	h := &Handler{homes: homes.New(0)}
	req := &openai.Request{API: openai.Responses, Stream: true}
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		ex := &exchange{h: h, ctx: context.Background(), req: req, ep: openai.Responses, backend: "http://b1"}
		t := newSSETap(ex, io.NopCloser(strings.NewReader(body)))
		for {
			if _, err := t.Read(buf); err != nil {
				break
			}
		}
		_ = t.Close()
	}
}
