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

// BenchmarkExtProcChunk is one streamed chunk of an answer through an open ext_proc stream
// over loopback, client included: Envoy shows the picker every chunk it relays, and the
// picker reads it for the first token and the usage.
func BenchmarkExtProcChunk(b *testing.B) {
	s := newServer(b, Options{})
	c := serve(b, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		b.Fatal(err)
	}
	send(b, st, buffered(reqHeaders("/v1/chat/completions", false, nil, "x-session-id", "bench")))
	recv(b, st)
	send(b, st, reqBody(chatBody, true))
	if recv(b, st).GetImmediateResponse() != nil {
		b.Fatal("rejected")
	}
	send(b, st, respHeaders("200", "text/event-stream", false, nil))
	recv(b, st)
	chunk := respBody(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}`+"\n\n", false)
	b.ReportAllocs()
	for b.Loop() {
		send(b, st, chunk)
		recv(b, st)
	}
	b.StopTimer()
	send(b, st, respBody("data: [DONE]\n\n", true))
	recv(b, st)
	closeStream(st)
	waitIdle(b, s)
}
