package extproc

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/usher-llm/usher/routing"
)

// fleet is three fake endpoints; the picker never dials them (Envoy would).
var fleet = []Endpoint{{Address: "10.0.0.1:8000"}, {Address: "10.0.0.2:8000"}, {Address: "10.0.0.3:8000"}}

// serve starts s on a loopback listener and returns a client connected to it.
func serve(t testing.TB, s *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	c, _ := serveConn(t, s)
	return c
}

func serveConn(t testing.TB, s *Server) (extprocv3.ExternalProcessorClient, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		s.Close()
	})
	return extprocv3.NewExternalProcessorClient(conn), conn
}

func newServer(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Endpoints == nil {
		o.Endpoints = fleet
	}
	o.NoScrape = true
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// headerMap builds Envoy's header map, with values as raw bytes as Envoy sends them.
func headerMap(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// Messages as Envoy sends them.

func reqHeaders(path string, eos bool, md *corev3.Metadata, kv ...string) *extprocv3.ProcessingRequest {
	method := "POST"
	if eos {
		method = "GET"
	}
	h := headerMap(append([]string{":method", method, ":path", path, ":authority", "gw.example", "content-type", "application/json"}, kv...)...)
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: h, EndOfStream: eos}},
		MetadataContext: md,
	}
}

func reqBody(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos}}}
}

func respHeaders(status, contentType string, eos bool, md *corev3.Metadata) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", status, "content-type", contentType), EndOfStream: eos}},
		MetadataContext: md,
	}
}

func respBody(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos}}}
}

func respTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("grpc-status", "0")}}}
}

// buffered is the protocol configuration Envoy sends with request body BUFFERED and
// response body STREAMED.
func buffered(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  procmodev3.ProcessingMode_BUFFERED,
		ResponseBodyMode: procmodev3.ProcessingMode_STREAMED,
	}
	return m
}

// subsetHint is the filter metadata of a subset hint listing eps.
func subsetHint(eps ...string) *corev3.Metadata {
	vals := make([]*structpb.Value, len(eps))
	for i, e := range eps {
		vals[i] = structpb.NewStringValue(e)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: structpb.NewListValue(&structpb.ListValue{Values: vals})}},
	}}
}

// servedBy is the response metadata context naming the endpoint that served.
func servedBy(ep string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		MetadataNamespace: {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(ep)}},
	}}
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"Hello there, how are you today?"}],"stream":true}`

// exchangeRequest sends a buffered request's headers and body and returns the answer to the
// body (or the immediate response).
func exchangeRequest(t testing.TB, st extprocv3.ExternalProcessor_ProcessClient, body string, md *corev3.Metadata, kv ...string) *extprocv3.ProcessingResponse {
	t.Helper()
	send(t, st, buffered(reqHeaders("/v1/chat/completions", false, md, kv...)))
	r := recv(t, st)
	if r.GetImmediateResponse() != nil {
		return r
	}
	if r.GetRequestHeaders() == nil {
		t.Fatalf("answer to the request headers: got %v, want a HeadersResponse", r)
	}
	send(t, st, reqBody(body, true))
	return recv(t, st)
}

func send(t testing.TB, st extprocv3.ExternalProcessor_ProcessClient, m *extprocv3.ProcessingRequest) {
	t.Helper()
	if err := st.Send(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func recv(t testing.TB, st extprocv3.ExternalProcessor_ProcessClient) *extprocv3.ProcessingResponse {
	t.Helper()
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return r
}

// destinationOf returns the destination header a body (or headers) answer sets and the
// metadata value, checking the metadata's shape: Struct → namespace → key → string.
func destinationOf(t testing.TB, r *extprocv3.ProcessingResponse) (header, meta string) {
	t.Helper()
	var cr *extprocv3.CommonResponse
	switch {
	case r.GetRequestBody() != nil:
		cr = r.GetRequestBody().GetResponse()
	case r.GetRequestHeaders() != nil:
		cr = r.GetRequestHeaders().GetResponse()
	default:
		t.Fatalf("got %v, want a body or headers answer", r)
	}
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationHeader {
			header = string(h.GetHeader().GetRawValue())
		}
	}
	ns := r.GetDynamicMetadata().GetFields()[MetadataNamespace]
	if ns == nil || ns.GetStructValue() == nil {
		t.Fatalf("dynamic metadata %v: no struct under %q", r.GetDynamicMetadata(), MetadataNamespace)
	}
	v := ns.GetStructValue().GetFields()[DestinationHeader]
	if _, ok := v.GetKind().(*structpb.Value_StringValue); !ok {
		t.Fatalf("dynamic metadata %v: %q is not a string", r.GetDynamicMetadata(), DestinationHeader)
	}
	return header, v.GetStringValue()
}

// waitIdle waits until no stream is open on s and checks that every counter is back to zero.
func waitIdle(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("streams still active: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	for _, e := range s.eps.Load().list {
		if in, _ := s.Router().InFlight(e.Address); in != (routing.InFlight{}) {
			t.Errorf("router in-flight of %s = %+v, want zero", e.Address, in)
		}
	}
	if qs := s.Queue().Stats(); qs.InFlight != 0 || qs.Queued != 0 {
		t.Errorf("queue in flight %d, queued %d, want 0, 0", qs.InFlight, qs.Queued)
	}
}

func open(t testing.TB, c extprocv3.ExternalProcessorClient) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Process(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return st, cancel
}

func inFleet(ep string) bool {
	for _, e := range fleet {
		if e.Address == ep {
			return true
		}
	}
	return false
}

func immediateBody(r *extprocv3.ProcessingResponse) string {
	return strings.TrimSpace(string(r.GetImmediateResponse().GetBody()))
}
