package extproc

import (
	"testing"
	"time"

	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Response messages before the request was decided are answered and ignored: the request
// decided after them still has its handles closed.
func TestResponseBeforeRequest(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	send(t, st, respHeaders("200", "text/event-stream", true, nil))
	if r := recv(t, st); r.GetResponseHeaders() == nil {
		t.Fatalf("answer to early response headers: %v", r)
	}
	send(t, st, buffered(reqHeaders("/v1/chat/completions", false, nil)))
	recv(t, st)
	send(t, st, reqBody(chatBody, true))
	if h, _ := destinationOf(t, recv(t, st)); !inFleet(h) {
		t.Fatalf("no destination after the out-of-order start")
	}
	closeStream(st)
	waitIdle(t, s) // the ticket and the pick were closed
}

// A request waiting for admission longer than the idle timeout is not cut once it is
// answered: the idle clock starts from the answer.
func TestIdleCountsFromTheAnswer(t *testing.T) {
	s := newServer(t, Options{StreamIdle: 150 * time.Millisecond, MaxInFlight: 1})
	c := serve(t, s)
	first, _ := open(t, c)
	exchangeRequest(t, first, chatBody, nil) // holds the only slot
	second, _ := open(t, c)
	send(t, second, buffered(reqHeaders("/v1/chat/completions", false, nil)))
	recv(t, second)
	send(t, second, reqBody(chatBody, false))
	recv(t, second)
	done := make(chan *extprocv3.ProcessingResponse, 1)
	go func() {
		send(t, second, reqBody("", true))
		done <- recv(t, second)
	}()
	// The first answer streams for 300 ms (each chunk keeps its own stream alive) while the
	// second waits for admission, past the idle timeout, without a message of its own.
	send(t, first, respHeaders("200", "text/event-stream", false, nil))
	recv(t, first)
	for range 6 {
		time.Sleep(50 * time.Millisecond)
		send(t, first, respBody(sseChunks[1], false))
		recv(t, first)
	}
	send(t, first, respBody(sseChunks[3], true))
	recv(t, first)
	closeStream(first)
	r := <-done
	if h, _ := destinationOf(t, r); !inFleet(h) {
		t.Fatalf("second request after its wait: %v, want a destination", r)
	}
	send(t, second, respHeaders("200", "application/json", true, nil))
	recv(t, second)
	closeStream(second)
	waitIdle(t, s)
	if st := s.Stats(); st.IdleTimeouts != 0 || st.Completed != 2 {
		t.Errorf("stats %+v: want no idle timeout and two completed", st)
	}
}

// Processing modes that show the picker less: response body NONE ends at the response
// headers (completed, not cancelled); request body NONE routes at the headers.
func TestBodyModeNone(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	h := reqHeaders("/v1/chat/completions", false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_NONE, ResponseBodyMode: procmodev3.ProcessingMode_NONE}
	send(t, st, h)
	r := recv(t, st)
	if hdr, _ := destinationOf(t, r); r.GetRequestHeaders() == nil || !inFleet(hdr) {
		t.Fatalf("request body NONE: %v, want a headers answer with a destination", r)
	}
	send(t, st, respHeaders("200", "text/event-stream", false, nil))
	recv(t, st)
	closeStream(st)
	waitIdle(t, s)
	if stats := s.Stats(); stats.Completed != 1 || stats.Failed != 0 {
		t.Errorf("stats %+v: want one completed, none failed", stats)
	}
}

// Full duplex with request trailers: the held headers answer and the body go back before the
// trailers' answer.
func TestFullDuplexTrailers(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	h := reqHeaders("/v1/chat/completions", false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED}
	send(t, st, h)
	send(t, st, reqBody(chatBody, false))
	send(t, st, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
	if r := recv(t, st); r.GetRequestHeaders() == nil {
		t.Fatalf("first answer %v, want the headers answer", r)
	}
	if r := recv(t, st); string(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()) != chatBody {
		t.Fatalf("second answer %v, want the body handed back", r)
	}
	if r := recv(t, st); r.GetRequestTrailers() == nil {
		t.Fatalf("third answer %v, want the trailers'", r)
	}
	send(t, st, respHeaders("200", "application/json", true, nil))
	recv(t, st)
	closeStream(st)
	waitIdle(t, s)
}
