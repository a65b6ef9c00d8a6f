package extproc

import (
	"context"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// FuzzRequestBody sends arbitrary bytes as a buffered request body, on the chat and the
// completions paths: the picker never panics and always answers with a verdict — the
// destination or an immediate response — and closes what it opened.
func FuzzRequestBody(f *testing.F) {
	for _, seed := range []string{
		chatBody,
		`{"model":"m","prompt":"x","max_tokens":3}`,
		`{"model":"m","messages":[]}`,
		`{"model":`,
		``,
		`null`,
		"\xff\xfe",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true},"priority":-5}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	s, err := New(Options{Endpoints: fleet, NoScrape: true, MaxBodyBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, completions bool) {
		path := "/v1/chat/completions"
		if completions {
			path = "/v1/completions"
		}
		ex := &exchange{s: s, ctx: context.Background()}
		out := ex.handle(buffered(reqHeaders(path, false, nil)), nil)
		if len(out) != 1 || out[0].GetRequestHeaders() == nil {
			t.Fatalf("answer to the headers: %v", out)
		}
		out = ex.handle(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}, out[:0])
		if len(out) != 1 {
			t.Fatalf("%d answers to the body, want 1", len(out))
		}
		r := out[0]
		switch {
		case r.GetImmediateResponse() != nil:
			if c := r.GetImmediateResponse().GetStatus().GetCode(); c < 400 || c > 599 {
				t.Fatalf("immediate response with status %d", c)
			}
		case r.GetRequestBody() != nil:
			if h, m := destinationOf(t, r); h == "" || h != m {
				t.Fatalf("destination %q / %q", h, m)
			}
		default:
			t.Fatalf("no verdict: %v", r)
		}
		// The response is chunks of the same bytes, as if the server echoed them.
		ex.handle(respHeaders("200", "text/event-stream", false, nil), out[:0])
		ex.handle(respBody(string(body), true), out[:0])
		ex.finish(ErrStreamEnded, 0)
		if st := s.Queue().Stats(); st.InFlight != 0 {
			t.Fatalf("queue in flight %d after the exchange", st.InFlight)
		}
	})
}
