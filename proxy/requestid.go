package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// RequestIDHeader carries the id the gateway gives each request: in every answer (errors
// included, interim 100 Continue answers too, and the refusals of [Handler.Listener]), in the
// request sent to the backend (vLLM takes it as its own request id when started with
// --enable-request-id-headers) and in every log line about the request. A client's own value
// is replaced: the id is the gateway's, so that a log line can be trusted to name one
// request. Answers on Anthropic's endpoints (/v1/messages and the paths below it) carry the
// same id in request-id too, the header Anthropic's SDKs read it from.
const RequestIDHeader = "X-Request-Id"

// anthropicIDHeader is where Anthropic's SDKs read a request's id (err.requestID).
const anthropicIDHeader = "Request-Id"

// anthropicPath reports whether path is one of Anthropic's endpoints: /v1/messages (under any
// base path, as openai.APIOf matches it) or a path below it (count_tokens).
func anthropicPath(path string) bool {
	return strings.HasSuffix(path, "/v1/messages") || strings.Contains(path, "/v1/messages/")
}

// setRequestID puts id in hdr: in RequestIDHeader, and in request-id too when anthropic.
func setRequestID(hdr http.Header, id string, anthropic bool) {
	hdr.Set(RequestIDHeader, id)
	if anthropic {
		hdr.Set(anthropicIDHeader, id)
	}
}

// delRequestID removes the ids setRequestID sets (a backend's echo of them).
func delRequestID(hdr http.Header, anthropic bool) {
	hdr.Del(RequestIDHeader)
	if anthropic {
		hdr.Del(anthropicIDHeader)
	}
}

// requestIDs makes request ids: a random prefix drawn once per process and a counter, so ids
// are unique across replicas and restarts without a random draw per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return &requestIDs{prefix: strconv.FormatUint(binary.LittleEndian.Uint64(b[:])>>16, 36) + "-"}
}

// next returns a new id: the prefix and the counter in base 36. One allocation.
func (g *requestIDs) next() string {
	var buf [32]byte
	b := append(buf[:0], g.prefix...)
	return string(strconv.AppendUint(b, g.n.Add(1), 36))
}

type requestIDKey struct{}

// withRequestID gives r a new id, in its context and in w's headers.
func (h *Handler) withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	id := h.ids.next()
	setRequestID(w.Header(), id, anthropicPath(r.URL.Path))
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// withContinue returns r, or a copy of r whose body's first read sends the 100 Continue a
// client that asked for one (Expect: 100-continue) waits for, as an answer of w: with the
// headers w has so far, the request id among them. net/http's own 100 Continue, which it
// writes on that read, has no headers; writing ours first cancels it. Use the copy only where
// the handler's goroutine reads the body before it writes anything else to w. On HTTP/2 the
// server's own is left to go out (writing an interim answer there does not cancel it).
func withContinue(w http.ResponseWriter, r *http.Request) *http.Request {
	if r.ProtoMajor != 1 || !r.ProtoAtLeast(1, 1) || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return r
	}
	for _, v := range r.Header.Values("Expect") {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "100-continue") {
				// A copy: the server must keep seeing its own body, to decide about the connection.
				r = r.WithContext(r.Context())
				r.Body = &continueBody{ReadCloser: r.Body, w: w}
				return r
			}
		}
	}
	return r
}

// continueBody writes a 100 Continue to w before its first read; see withContinue.
type continueBody struct {
	io.ReadCloser
	w    http.ResponseWriter
	sent bool
}

func (b *continueBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		b.w.WriteHeader(http.StatusContinue)
	}
	return b.ReadCloser.Read(p)
}

// requestID returns the id ServeHTTP gave the request of ctx, or a new one for a request
// that came through a caller's own ReverseProxy; set reports whether the client's answer
// already carries it.
func (h *Handler) requestID(ctx context.Context) (id string, set bool) {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return id, true
	}
	return h.ids.next(), false
}
