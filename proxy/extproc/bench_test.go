package extproc

import (
	"context"
	"testing"
)

// BenchmarkExtProcPick is one request through a real ext_proc stream over loopback, client
// included: request headers, buffered body (parse, key, hash, admit, pick), response
// headers and one streamed SSE body, each answered.
func BenchmarkExtProcPick(b *testing.B) {
	s := newServer(b, Options{})
	c := serve(b, s)
	hdr := buffered(reqHeaders("/v1/chat/completions", false, nil, "x-session-id", "bench"))
	body := reqBody(chatBody, true)
	rh := respHeaders("200", "text/event-stream", false, nil)
	rb := respBody(sseChunks[1]+sseChunks[2]+sseChunks[3], true)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.Process(ctx)
		if err != nil {
			b.Fatal(err)
		}
		send(b, st, hdr)
		recv(b, st)
		send(b, st, body)
		if recv(b, st).GetImmediateResponse() != nil {
			b.Fatal("rejected")
		}
		send(b, st, rh)
		recv(b, st)
		send(b, st, rb)
		recv(b, st)
		closeStream(st)
		cancel()
	}
	b.StopTimer()
	waitIdle(b, s)
}
