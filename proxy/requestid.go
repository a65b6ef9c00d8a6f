package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"strconv"
	"sync/atomic"
)

// RequestIDHeader carries the id the gateway gives each request: in every answer (errors
// included), in the request sent to the backend (vLLM takes it as its own request id when
// started with --enable-request-id-headers) and in every log line about the request. A
// client's own value is replaced: the id is the gateway's, so that a log line can be trusted
// to name one request.
const RequestIDHeader = "X-Request-Id"

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
	w.Header().Set(RequestIDHeader, id)
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
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
