package simfleet

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Faults make a server misbehave on its OpenAI endpoints (paths under /v1/ but /v1/models)
// while /metrics, /health and /tokenize stay healthy, as a stuck or broken model server does:
// its metrics say all is well and its answers never come or break. Each fault applies to every
// such request (or to every Every-th, see Every). The zero Faults does nothing.
type Faults struct {
	// HoldHeaders delays the response headers (and so the whole answer) by this long, or
	// until the client goes away.
	HoldHeaders time.Duration
	// ResetAfterBytes resets the connection (TCP RST) once this many bytes of the answer's
	// body were sent: a stream breaks mid-answer. 0: never.
	ResetAfterBytes int
	// Status answers with this HTTP status and vLLM's error body instead of serving (e.g.
	// 502, 503): {"error":{"message","type","param":null,"code":status}}, its type the
	// exception vLLM names for the status (vllmErrorType). 0: serve.
	Status int
	// SlowWrite sleeps this long before each write of the answer: a server that crawls.
	SlowWrite time.Duration
	// Every applies the faults to one request in Every (the first, then every Every-th);
	// 0 or 1: to all.
	Every int
}

// Active reports whether f does anything.
func (f Faults) Active() bool {
	return f.HoldHeaders > 0 || f.ResetAfterBytes > 0 || f.Status != 0 || f.SlowWrite > 0
}

// Wrap returns h with the faults applied. Safe for concurrent use.
func (f Faults) Wrap(h http.Handler) http.Handler {
	if !f.Active() {
		return h
	}
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/v1/models" {
			h.ServeHTTP(w, r)
			return
		}
		if every := int64(max(f.Every, 1)); (n.Add(1)-1)%every != 0 {
			h.ServeHTTP(w, r)
			return
		}
		if f.HoldHeaders > 0 {
			t := time.NewTimer(f.HoldHeaders)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if f.Status != 0 {
			writeError(w, f.Status, vllmErrorType(f.Status), "simulated fault: answering "+http.StatusText(f.Status))
			return
		}
		if f.ResetAfterBytes > 0 || f.SlowWrite > 0 {
			w = &faultyWriter{ResponseWriter: w, f: f, ctx: r.Context()}
		}
		h.ServeHTTP(w, r)
	})
}

// faultyWriter slows writes and resets the connection after ResetAfterBytes.
type faultyWriter struct {
	http.ResponseWriter
	f       Faults
	ctx     context.Context
	written int
}

var errReset = errors.New("simfleet: simulated connection reset")

func (w *faultyWriter) Write(b []byte) (int, error) {
	if w.f.SlowWrite > 0 {
		t := time.NewTimer(w.f.SlowWrite)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return 0, w.ctx.Err()
		}
	}
	if lim := w.f.ResetAfterBytes; lim > 0 && w.written+len(b) >= lim {
		n, _ := w.ResponseWriter.Write(b[:lim-w.written])
		w.written += n
		w.reset()
		return n, errReset
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += n
	return n, err
}

// reset flushes what was written and closes the connection with an RST (SO_LINGER 0), or, if
// the connection cannot be taken over, aborts the handler so net/http drops it.
func (w *faultyWriter) reset() {
	rc := http.NewResponseController(w.ResponseWriter)
	_ = rc.Flush()
	conn, buf, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
	panic(http.ErrAbortHandler) // end the handler; the connection is gone
}

func (w *faultyWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *faultyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
