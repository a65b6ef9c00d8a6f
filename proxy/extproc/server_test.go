package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/usher-llm/usher/flowcontrol"
)

// sseChunks is a streamed chat answer as Envoy forwards it: cut at arbitrary places, a
// role-only opening chunk, two content chunks, the usage chunk, [DONE].
var sseChunks = []string{
	"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\nda",
	"ta: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
	"data: [DONE]\n\n",
}

// usageQueue is a queue whose Observer records the usage each Done reports.
func usageQueue(t *testing.T) (*flowcontrol.Queue, func() []flowcontrol.Usage) {
	var mu sync.Mutex
	var got []flowcontrol.Usage
	q, err := flowcontrol.New(flowcontrol.Options{Bands: 4, Observer: flowcontrol.Observer{Done: func(r flowcontrol.Record) {
		mu.Lock()
		got = append(got, r.Usage)
		mu.Unlock()
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return q, func() []flowcontrol.Usage {
		mu.Lock()
		defer mu.Unlock()
		return append([]flowcontrol.Usage(nil), got...)
	}
}

func TestBufferedRequestStreamedResponse(t *testing.T) {
	q, usages := usageQueue(t)
	s := newServer(t, Options{Queue: q})
	c := serve(t, s)
	st, _ := open(t, c)

	r := exchangeRequest(t, st, chatBody, nil, "x-session-id", "s1")
	header, meta := destinationOf(t, r)
	if !inFleet(header) || header != meta {
		t.Fatalf("destination header %q, metadata %q: want the same endpoint of the fleet", header, meta)
	}
	if in, _ := s.Router().InFlight(header); in.Requests != 1 {
		t.Fatalf("in flight at %s after the pick = %d, want 1", header, in.Requests)
	}
	send(t, st, respHeaders("200", "text/event-stream", false, nil))
	if r := recv(t, st); r.GetResponseHeaders() == nil {
		t.Fatalf("answer to the response headers: %v", r)
	}
	for i, ch := range sseChunks {
		send(t, st, respBody(ch, i == len(sseChunks)-1))
		r := recv(t, st)
		if r.GetResponseBody() == nil || r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
			t.Fatalf("answer to body chunk %d: %v, want CONTINUE without mutation", i, r)
		}
	}
	send(t, st, respTrailers())
	if r := recv(t, st); r.GetResponseTrailers() == nil {
		t.Fatalf("answer to the trailers: %v", r)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}
	waitIdle(t, s)
	stats := s.Stats()
	if stats.Picks != 1 || stats.Completed != 1 || stats.Failed != 0 {
		t.Errorf("stats %+v: want 1 pick, 1 completed, 0 failed", stats)
	}
	want := []flowcontrol.Usage{{PromptTokens: 9, CachedTokens: 4, OutputTokens: 2}}
	if got := usages(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("usage reported to the queue: %+v, want %+v", got, want)
	}
	if rs := s.Router().Stats(); rs.Done != 1 || rs.Failed != 0 {
		t.Errorf("router Done %d Failed %d, want 1, 0", rs.Done, rs.Failed)
	}
}

func TestJSONResponseUsage(t *testing.T) {
	q, usages := usageQueue(t)
	s := newServer(t, Options{Queue: q})
	st, _ := open(t, serve(t, s))
	send(t, st, buffered(reqHeaders("/v1/completions", false, nil)))
	recv(t, st)
	send(t, st, reqBody(`{"model":"m","prompt":"once upon a time"}`, true))
	destinationOf(t, recv(t, st))
	send(t, st, respHeaders("200", "application/json", false, nil))
	recv(t, st)
	body := `{"id":"x","choices":[{"text":"there was"}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`
	send(t, st, respBody(body[:20], false))
	recv(t, st)
	send(t, st, respBody(body[20:], true))
	recv(t, st)
	_ = st.CloseSend()
	waitIdle(t, s)
	got := usages()
	if len(got) != 1 || got[0] != (flowcontrol.Usage{PromptTokens: 5, OutputTokens: 3}) {
		t.Errorf("usages %+v: want one of 5 prompt, 3 output", got)
	}
}

func TestSubset(t *testing.T) {
	s := newServer(t, Options{})
	c := serve(t, s)
	for range 20 {
		st, _ := open(t, c)
		r := exchangeRequest(t, st, chatBody, subsetHint("10.0.0.3:8000", "192.168.9.9:80"))
		if h, m := destinationOf(t, r); h != "10.0.0.3:8000" || m != h {
			t.Fatalf("with subset [10.0.0.3:8000, unknown]: destination %q / %q, want 10.0.0.3:8000", h, m)
		}
		closeStream(st)
	}
	for _, sub := range [][]string{{}, {"192.168.9.9:80"}} {
		st, _ := open(t, c)
		r := exchangeRequest(t, st, chatBody, subsetHint(sub...))
		if code := r.GetImmediateResponse().GetStatus().GetCode(); code != 503 {
			t.Errorf("subset %q: status %v, want 503 (%v)", sub, code, r)
		}
		closeStream(st)
	}
	waitIdle(t, s)
}

// closeStream ends the client's side of st as Envoy does at the end of a request and reads
// until the server has ended its side too.
func closeStream(st extprocv3.ExternalProcessor_ProcessClient) {
	_ = st.CloseSend()
	recvEOF(st)
}

func recvEOF(st extprocv3.ExternalProcessor_ProcessClient) {
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

func TestFallbacks(t *testing.T) {
	s := newServer(t, Options{Fallbacks: 2})
	st, _ := open(t, serve(t, s))
	h, m := destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	parts := strings.Split(h, ",")
	if h != m || len(parts) != 3 || parts[0] == parts[1] || parts[1] == parts[2] || parts[0] == parts[2] {
		t.Fatalf("destination %q / %q: want three distinct endpoints, the same in both", h, m)
	}
	for _, p := range parts {
		if !inFleet(p) {
			t.Fatalf("destination %q lists %q, not in the fleet", h, p)
		}
	}
}

func TestServedElsewhere(t *testing.T) {
	s := newServer(t, Options{Fallbacks: 1})
	st, _ := open(t, serve(t, s))
	h, _ := destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	primary, fallback, _ := strings.Cut(h, ",")
	send(t, st, respHeaders("200", "text/event-stream", false, servedBy(fallback)))
	recv(t, st)
	if in, _ := s.Router().InFlight(primary); in.Requests != 0 {
		t.Errorf("picked %s still charged %d after Envoy served from %s", primary, in.Requests, fallback)
	}
	if in, _ := s.Router().InFlight(fallback); in.Requests != 1 {
		t.Errorf("serving %s charged %d, want 1", fallback, in.Requests)
	}
	send(t, st, respBody("data: [DONE]\n\n", true))
	recv(t, st)
	closeStream(st)
	waitIdle(t, s)
	if got := s.Stats().ServedElsewhere; got != 1 {
		t.Errorf("ServedElsewhere = %d, want 1", got)
	}
}

func TestServedHeader(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	h, _ := destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	other := "10.0.0.1:8000"
	if h == other {
		other = "10.0.0.2:8000"
	}
	m := respHeaders("200", "text/event-stream", false, nil)
	m.GetResponseHeaders().Headers.Headers = append(headerMap(ServedKey, other).Headers, m.GetResponseHeaders().Headers.Headers...)
	send(t, st, m)
	recv(t, st)
	if in, _ := s.Router().InFlight(other); in.Requests != 1 {
		t.Errorf("served %s (response header) charged %d, want 1", other, in.Requests)
	}
	closeStream(st)
	waitIdle(t, s)
}

func TestImmediateResponses(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		path      string
		body      string
		status    int32
		param     string
		retry     bool
		endpoints []Endpoint
	}{
		{name: "invalid JSON", body: `{"model":`, status: 400},
		{name: "missing model", body: `{"messages":[{"role":"user","content":"x"}]}`, status: 400, param: "model"},
		{name: "max_tokens too large", body: `{"model":"m","max_tokens":99999999,"messages":[{"role":"user","content":"x"}]}`, status: 400, param: "max_tokens"},
		{name: "body too large", opts: Options{MaxBodyBytes: 64}, body: chatBody + strings.Repeat(" ", 64), status: 413},
		{name: "unknown model", opts: Options{Models: []string{"other"}}, body: chatBody, status: 404, param: "model"},
		{name: "no endpoint", endpoints: []Endpoint{}, body: chatBody, status: 503, retry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Endpoints = tt.endpoints
			if o.Endpoints == nil {
				o.Endpoints = fleet
			}
			s := newServer(t, o)
			st, _ := open(t, serve(t, s))
			r := exchangeRequest(t, st, tt.body, nil)
			ir := r.GetImmediateResponse()
			if ir == nil || int32(ir.GetStatus().GetCode()) != tt.status {
				t.Fatalf("got %v, want an immediate %d", r, tt.status)
			}
			var e struct {
				Error struct {
					Message, Type string
					Param         *string
				}
			}
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("body %q is not an OpenAI error (%v)", ir.GetBody(), err)
			}
			if tt.param != "" && (e.Error.Param == nil || *e.Error.Param != tt.param) {
				t.Errorf("param %v, want %q (body %s)", e.Error.Param, tt.param, immediateBody(r))
			}
			ct, retry := "", ""
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				switch h.GetHeader().GetKey() {
				case "content-type":
					ct = string(h.GetHeader().GetRawValue())
				case "retry-after":
					retry = string(h.GetHeader().GetRawValue())
				}
			}
			if ct != "application/json" {
				t.Errorf("content-type %q, want application/json", ct)
			}
			if (retry != "") != tt.retry {
				t.Errorf("retry-after %q, want one: %v", retry, tt.retry)
			}
			closeStream(st)
			waitIdle(t, s)
		})
	}
}

// closedGate never lets a request through.
type closedGate struct{}

func (closedGate) Open(*flowcontrol.Request, flowcontrol.Load) bool { return false }

func TestQueueFull429AndTTL503(t *testing.T) {
	q, err := flowcontrol.New(flowcontrol.Options{Bands: 4, Gate: closedGate{}, TTL: 200 * time.Millisecond, Capacity: flowcontrol.Limits{Requests: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Options{Queue: q})
	c := serve(t, s)

	// The first request waits for admission (the gate is closed) until its TTL: 503.
	first, _ := open(t, c)
	send(t, first, buffered(reqHeaders("/v1/chat/completions", false, nil)))
	recv(t, first)
	send(t, first, reqBody(chatBody, true))
	for s.Queue().Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	// The second finds the queue full: 429 with Retry-After.
	second, _ := open(t, c)
	r := exchangeRequest(t, second, chatBody, nil)
	ir := r.GetImmediateResponse()
	if ir.GetStatus().GetCode() != 429 {
		t.Fatalf("second request: %v, want 429", r)
	}
	retry := ""
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "retry-after" {
			retry = string(h.GetHeader().GetRawValue())
		}
	}
	if retry == "" || retry == "0" {
		t.Errorf("429 without a Retry-After (headers %v)", ir.GetHeaders())
	}
	r = recv(t, first)
	if r.GetImmediateResponse().GetStatus().GetCode() != 503 {
		t.Fatalf("first request after its TTL: %v, want 503", r)
	}
	for _, st := range []extprocv3.ExternalProcessor_ProcessClient{first, second} {
		closeStream(st)
	}
	waitIdle(t, s)
	if got := s.Stats(); got.Shed != 1 || got.Unavailable != 1 {
		t.Errorf("stats %+v: want 1 shed, 1 unavailable", got)
	}
}

func TestEarlyShed429(t *testing.T) {
	// Early shedding refuses at once with 429 when the estimate exceeds the TTL; without a
	// dispatch history the estimate is unknown, so here only the plumbing is checked: the
	// option reaches the default queue.
	if _, err := New(Options{NoScrape: true, EarlyShed: flowcontrol.EarlyShed{Enabled: true, HalfLife: -1}}); err == nil {
		t.Fatal("negative HalfLife accepted")
	}
}

func TestCancelMidStream(t *testing.T) {
	for _, where := range []string{"waiting for admission", "after the pick", "mid-response"} {
		t.Run(where, func(t *testing.T) {
			var o Options
			if where == "waiting for admission" {
				q, err := flowcontrol.New(flowcontrol.Options{Bands: 4, Gate: closedGate{}})
				if err != nil {
					t.Fatal(err)
				}
				o.Queue = q
			}
			s := newServer(t, o)
			st, cancel := open(t, serve(t, s))
			send(t, st, buffered(reqHeaders("/v1/chat/completions", false, nil)))
			recv(t, st)
			send(t, st, reqBody(chatBody, true))
			switch where {
			case "waiting for admission":
				for s.Queue().Stats().Queued != 1 {
					time.Sleep(time.Millisecond)
				}
			case "after the pick":
				recv(t, st)
			case "mid-response":
				recv(t, st)
				send(t, st, respHeaders("200", "text/event-stream", false, nil))
				recv(t, st)
				send(t, st, respBody(sseChunks[0]+sseChunks[1], false))
				recv(t, st)
			}
			cancel()
			waitIdle(t, s)
			stats := s.Stats()
			if where == "waiting for admission" {
				if stats.Picks != 0 || s.Queue().Stats().Cancelled != 1 {
					t.Errorf("stats %+v, queue %+v: want no pick, one cancelled", stats, s.Queue().Stats())
				}
				return
			}
			if stats.Failed != 1 || stats.Cancelled != 1 || stats.Completed != 0 {
				t.Errorf("stats %+v: want exactly one failed (cancelled) request", stats)
			}
			if rs := s.Router().Stats(); rs.Done != 1 {
				t.Errorf("router Done = %d, want exactly 1", rs.Done)
			}
		})
	}
}

func TestEnvoyClosesEarly(t *testing.T) {
	// Envoy closes the stream (CloseSend, as when the upstream reset) after the pick and
	// before any response: Done once, with an error.
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	closeStream(st)
	waitIdle(t, s)
	if stats := s.Stats(); stats.Failed != 1 || stats.Cancelled != 1 {
		t.Errorf("stats %+v: want one cancelled", stats)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	s := newServer(t, Options{StreamIdle: 50 * time.Millisecond})
	st, _ := open(t, serve(t, s))
	destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	_, err := st.Recv()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("silent stream ended with %v, want DeadlineExceeded", err)
	}
	waitIdle(t, s)
	if stats := s.Stats(); stats.IdleTimeouts != 1 || stats.Failed != 1 {
		t.Errorf("stats %+v: want one idle timeout", stats)
	}
}

func TestServerErrorResponse(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	destinationOf(t, exchangeRequest(t, st, chatBody, nil))
	send(t, st, respHeaders("500", "application/json", false, nil))
	recv(t, st)
	send(t, st, respBody(`{"error":{"message":"boom"}}`, true))
	recv(t, st)
	closeStream(st)
	waitIdle(t, s)
	if stats := s.Stats(); stats.Failed != 1 || stats.Cancelled != 0 {
		t.Errorf("stats %+v: want one failed, not cancelled", stats)
	}
}

func TestHeadersOnlyRequest(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	send(t, st, reqHeaders("/v1/models", true, nil))
	r := recv(t, st)
	if h, _ := destinationOf(t, r); !inFleet(h) || r.GetRequestHeaders() == nil {
		t.Fatalf("GET without body: %v, want a headers answer with a destination", r)
	}
	send(t, st, respHeaders("200", "application/json", true, nil))
	recv(t, st)
	closeStream(st)
	waitIdle(t, s)
	if stats := s.Stats(); stats.Passed != 1 || stats.Completed != 1 {
		t.Errorf("stats %+v: want one passed and completed", stats)
	}
}

func TestFullDuplex(t *testing.T) {
	s := newServer(t, Options{})
	st, _ := open(t, serve(t, s))
	h := reqHeaders("/v1/chat/completions", false, nil)
	h.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
	send(t, st, h)
	half := len(chatBody) / 2
	send(t, st, reqBody(chatBody[:half], false))
	send(t, st, reqBody(chatBody[half:], true))
	r := recv(t, st)
	if hdr, _ := destinationOf(t, r); r.GetRequestHeaders() == nil || !inFleet(hdr) {
		t.Fatalf("first answer: %v, want the headers answer with the destination", r)
	}
	r = recv(t, st)
	sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	if string(sr.GetBody()) != chatBody || !sr.GetEndOfStream() {
		t.Fatalf("second answer: %v, want the whole body streamed back", r)
	}
	send(t, st, respHeaders("200", "text/event-stream", false, nil))
	recv(t, st)
	send(t, st, respBody(sseChunks[1], true))
	r = recv(t, st)
	if got := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(got.GetBody()) != sseChunks[1] || !got.GetEndOfStream() {
		t.Fatalf("response chunk: %v, want it echoed", r)
	}
	closeStream(st)
	waitIdle(t, s)
}

func TestHealth(t *testing.T) {
	s := newServer(t, Options{Endpoints: []Endpoint{}})
	_, conn := serveConn(t, s)
	hc := healthpb.NewHealthClient(conn)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	// Without a Source the endpoints are known at New: ready, even with none (each request
	// is then answered 503 with Retry-After, see TestImmediateErrors).
	if got := check(HealthReadiness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("readiness without endpoints and without a Source: %v", got)
	}
	if got := check(HealthLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness: %v", got)
	}
	if err := s.SetEndpoints(fleet); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"", HealthReadiness, HealthExtProc, HealthInferenceExtension} {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%q with endpoints: %v", svc, got)
		}
	}
	s.Close()
	if got := check(HealthExtProc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Close: %v", got)
	}
}

// sourceFunc is an EndpointSource that reports the sets sent on it.
type sourceFunc chan []Endpoint

func (c sourceFunc) Run(ctx context.Context, update func([]Endpoint)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case eps := <-c:
			update(eps)
		}
	}
}

// With a Source the picker is not ready until the Source reports its first set; an empty
// first set (a synced pool with no ready pods) makes it ready, and requests are answered
// 503 with Retry-After at once.
func TestReadyOnceSourceSynced(t *testing.T) {
	src := make(sourceFunc)
	// A queue that admits nothing: a request that waited for admission would get
	// queue_timeout after a minute, not no_backend at once.
	q, err := flowcontrol.New(flowcontrol.Options{Bands: 4, Gate: closedGate{}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Options{Source: src, Queue: q})
	client, conn := serveConn(t, s)
	hc := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: HealthReadiness})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("before the Source synced: %v, want NOT_SERVING", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case src <- []Endpoint{}:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not take the Source's set")
	}
	deadline := time.Now().Add(10 * time.Second)
	for check() != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("not ready after the Source's first (empty) set")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, _ := open(t, client)
	ir := exchangeRequest(t, st, chatBody, nil).GetImmediateResponse()
	retry := ""
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "retry-after" {
			retry = string(h.GetHeader().GetRawValue())
		}
	}
	if ir.GetStatus().GetCode() != 503 || retry != "1" || !strings.Contains(string(ir.GetBody()), "no_backend") {
		t.Errorf("empty pool: %v (retry-after %q), want 503 no_backend with Retry-After 1", ir, retry)
	}
	closeStream(st)
	waitIdle(t, s)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// SetStandby steps the picker aside: readiness NOT_SERVING on every readiness service while
// liveness stays SERVING, streams that reach it still picked, the endpoints still followed;
// readiness is synced && !closed && !standby at each step.
func TestStandby(t *testing.T) {
	src := make(sourceFunc)
	s := newServer(t, Options{Source: src})
	client, conn := serveConn(t, s)
	hc := healthpb.NewHealthClient(conn)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	const serving, notServing = healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	expect := func(step string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, svc := range []string{"", HealthReadiness, HealthExtProc, HealthInferenceExtension} {
			if got := check(svc); got != want {
				t.Errorf("%s: %q = %v, want %v", step, svc, got, want)
			}
		}
		if got := check(HealthLiveness); got != serving {
			t.Errorf("%s: liveness = %v, want SERVING", step, got)
		}
	}
	pickOne := func(step string) {
		t.Helper()
		st, _ := open(t, client)
		if h, _ := destinationOf(t, exchangeRequest(t, st, chatBody, nil)); !inFleet(h) {
			t.Errorf("%s: picked %q, want an endpoint of the fleet", step, h)
		}
		closeStream(st)
		waitIdle(t, s)
	}

	s.SetStandby(true)
	expect("standby, not synced", notServing)
	s.SetStandby(false)
	expect("not synced", notServing)
	s.SetStandby(true)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case src <- fleet[:2]:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not take the Source's set")
	}
	// The set is taken before it is applied: a second one is sent once the first is in.
	select {
	case src <- fleet:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not take the Source's second set")
	}
	expect("standby, synced", notServing)
	pickOne("standby")
	if err := s.SetEndpoints(fleet); err != nil {
		t.Fatal(err)
	}
	expect("standby, endpoints set again", notServing)

	// SetStandby races with the Source's updates and the health service's reads (-race).
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 50 {
			s.SetStandby(i%2 == 0)
		}
	})
	wg.Go(func() {
		for range 50 {
			_ = s.SetEndpoints(fleet)
			check(HealthReadiness)
		}
	})
	wg.Wait()

	s.SetStandby(false)
	expect("leader, synced", serving)
	pickOne("leader")
	s.SetStandby(true)
	expect("standby again", notServing)
	s.SetStandby(false)
	expect("leader again", serving)

	s.Close()
	expect("closed", notServing)
	s.SetStandby(false)
	expect("closed, off standby", notServing)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	q, _ := flowcontrol.New(flowcontrol.Options{})
	for _, o := range []Options{
		{MaxBodyBytes: -1},
		{Fallbacks: 17},
		{Queue: q, TTL: time.Second},
		{Endpoints: []Endpoint{{Address: "nohost"}}},
		{Endpoints: []Endpoint{{Address: "10.0.0.1:80"}, {Address: "10.0.0.1:80"}}},
		{Endpoints: []Endpoint{{Address: "10.0.0.1:80", Replay: "tcp://x:1"}}},
	} {
		o.NoScrape = true
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", o)
		}
	}
}

func TestConcurrentStreams(t *testing.T) {
	s := newServer(t, Options{})
	c := serve(t, s)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := c.Process(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			_ = st.Send(buffered(reqHeaders("/v1/chat/completions", false, nil)))
			_, _ = st.Recv()
			_ = st.Send(reqBody(chatBody, true))
			_, _ = st.Recv()
			if i%2 == 0 {
				return // cancelled by the deferred cancel
			}
			_ = st.Send(respHeaders("200", "text/event-stream", false, nil))
			_, _ = st.Recv()
			_ = st.Send(respBody(strings.Join(sseChunks, ""), true))
			_, _ = st.Recv()
			closeStream(st)
		})
	}
	wg.Wait()
	waitIdle(t, s)
	if stats := s.Stats(); stats.Completed+stats.Failed != 16 || stats.Picks != 16 {
		t.Errorf("stats %+v: want 16 picks, each closed once", stats)
	}
}

// RegisterHealth serves the health service alone, sharing Register's state: the reference's
// probes (HealthInferenceExtension on a port of its own) see the picker's readiness, and the
// port offers no ext_proc.
func TestRegisterHealth(t *testing.T) {
	s := newServer(t, Options{Endpoints: fleet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.RegisterHealth(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if got := check(HealthInferenceExtension); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("%s: %v, want SERVING", HealthInferenceExtension, got)
	}
	s.Close()
	if got := check(HealthInferenceExtension); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("%s after Close: %v, want NOT_SERVING", HealthInferenceExtension, got)
	}
	if got := check(HealthLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness after Close: %v, want SERVING", got)
	}
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ext_proc on the health port: %v, want Unimplemented", err)
	}
}
