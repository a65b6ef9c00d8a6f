package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/routing"
)

// maxEventBytes bounds one server-sent event of a backend's stream; maxWholeBytes the part of
// a whole answer kept to read its usage.
const (
	maxEventBytes = 16 << 20
	maxWholeBytes = 4 << 20
)

// errClosedEarly is the outcome of a response body closed before its end: the client went
// away, or the proxy stopped copying.
var errClosedEarly = errors.New("proxy: response closed before its end")

// wholeTap passes a whole answer through unchanged and reads its usage at the end (keep).
// It finishes the exchange at EOF, on a read error, or on Close.
type wholeTap struct {
	ex    *exchange
	up    io.ReadCloser
	keep  bool   // read the usage of a successful answer
	buf   []byte // the answer so far, while it fits in maxWholeBytes
	first bool
}

func (t *wholeTap) Read(p []byte) (int, error) {
	n, err := t.up.Read(p)
	if n > 0 {
		t.ex.touch()
		if !t.first {
			t.first = true
			t.ex.mu.Lock()
			t.ex.info.FirstTokenAt = time.Now()
			t.ex.mu.Unlock()
		}
		if t.keep && len(t.buf)+n <= maxWholeBytes {
			t.buf = append(t.buf, p[:n]...)
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		if t.keep && t.ex.ep > openai.Completions {
			t.ex.readAnswer(t.buf)
			t.buf = nil
		} else if t.keep {
			var body struct {
				Usage *openaiwire.TokenUsage `json:"usage"`
			}
			if json.Unmarshal(t.buf, &body) == nil && body.Usage != nil {
				t.ex.setUsage(*body.Usage)
			}
			t.buf = nil
		}
		t.ex.finish(nil)
	case err != nil:
		t.ex.finish(err)
	}
	return n, err
}

func (t *wholeTap) Close() error {
	t.ex.finish(errClosedEarly)
	return t.up.Close()
}

// sseTap relays a backend's server-sent-event stream event by event. It notes the first
// token (the first chunk with text) and the usage chunk, which it drops when only the proxy
// asked for it; after [DONE] it reads the rest of the backend's body, so the connection can
// be reused, and finishes the exchange before the client hears [DONE]. A stream that breaks
// (an error, or EOF before [DONE]) ends with an OpenAI error event and a clean end, so the
// client learns what happened; one the client abandoned ends with the read error. A Messages
// or Responses stream is read in its own API's events (handleAPI): its last event
// (message_stop, response.completed, an error) stands for [DONE], and a break ends it with
// that API's error event.
type sseTap struct {
	ex        *exchange
	up        io.ReadCloser
	dropUsage bool

	in       []byte // bytes from the backend; in[r:] not yet processed
	r        int
	out      []byte // processed bytes for the client; out[o:] not yet returned
	o        int
	upErr    error // the backend body's terminal error (io.EOF included), once seen
	ended    bool  // nothing more for the client after out
	sawFirst bool
	chunks   int  // chunks with text, for streams that report no usage
	api      bool // a Messages or Responses stream: its own events, no [DONE] (apis.go)
	data     []byte
	// A Responses stream's next sequence_number (one past the highest the backend sent, or
	// counted), and the data of its response.created (or in_progress) event, for the
	// response.failed that ends it if it breaks.
	seq     int64
	started []byte

	inp, outp *[]byte // the pooled buffers behind in and out (nil once released)
	startedp  *[]byte // the pooled buffer behind started, once a Responses stream has one
}

// tapBufSize is the size of an sseTap's two buffers as they start: a stream's events are far
// smaller, a long one grows its buffer.
const tapBufSize = 32 << 10

// tapBufs holds the buffers of finished taps (*[]byte of capacity tapBufSize), so that a
// stream allocates none in steady state.
var tapBufs = sync.Pool{New: func() any { b := make([]byte, 0, tapBufSize); return &b }}

func newSSETap(ex *exchange, up io.ReadCloser) *sseTap {
	t := &sseTap{ex: ex, up: up, dropUsage: !ex.req.IncludeUsage, api: ex.ep == openai.Messages || ex.ep == openai.Responses}
	t.inp, t.outp = tapBufs.Get().(*[]byte), tapBufs.Get().(*[]byte)
	t.in, t.out = (*t.inp)[:0], (*t.outp)[:0]
	return t
}

// release returns the tap's pooled buffers (a buffer that grew is a copy of its own, left
// to the collector). After it the tap reads as ended; Close calls it.
func (t *sseTap) release() {
	for _, bp := range [3]**[]byte{&t.inp, &t.outp, &t.startedp} {
		if *bp != nil {
			tapBufs.Put(*bp)
		}
		*bp = nil
	}
	t.in, t.out, t.r, t.o, t.ended, t.started = nil, nil, 0, 0, true, nil
}

func (t *sseTap) Read(p []byte) (int, error) {
	for {
		if t.o < len(t.out) {
			n := copy(p, t.out[t.o:])
			t.o += n
			return n, nil
		}
		t.out, t.o = t.out[:0], 0
		if t.ended {
			return 0, io.EOF
		}
		if t.process() {
			continue
		}
		if t.upErr != nil {
			if t.r < len(t.in) && errors.Is(t.upErr, io.EOF) {
				// The body ended cleanly inside an event: take what came as the last one.
				ev := append(t.in[t.r:], '\n', '\n')
				t.r = len(t.in)
				if t.handle(ev) {
					t.out = append(t.out, ev...)
				}
				continue
			}
			// A body that broke inside an event: the event is cut, and would only break the
			// client's parse of the error events that end the stream.
			t.r = len(t.in)
			return 0, t.broken()
		}
		t.fill()
	}
}

// fill reads more of the backend's body into in.
func (t *sseTap) fill() {
	if t.r > 0 {
		t.in = t.in[:copy(t.in, t.in[t.r:])]
		t.r = 0
	}
	if len(t.in) == cap(t.in) {
		if cap(t.in) >= maxEventBytes {
			t.upErr = errors.New("an event exceeds 16 MiB")
			return
		}
		grown := make([]byte, len(t.in), 2*cap(t.in))
		copy(grown, t.in)
		t.in = grown
	}
	n, err := t.up.Read(t.in[len(t.in):cap(t.in)])
	if n > 0 {
		t.ex.touch()
	}
	t.in = t.in[:len(t.in)+n]
	if err != nil {
		t.upErr = err
	}
}

// process handles the complete events buffered in in, appending what the client gets to out
// (which Read emptied). It reports whether it produced output or ended the stream.
func (t *sseTap) process() bool {
	for !t.ended {
		ev, ok := t.nextEvent()
		if !ok {
			break
		}
		if t.handle(ev) {
			t.out = append(t.out, ev...)
		}
	}
	return len(t.out) > 0 || t.ended
}

// nextEvent cuts the next complete event (through the blank line that ends it) from in. A
// blank line with no event before it comes back alone, and is passed on as it is.
func (t *sseTap) nextEvent() ([]byte, bool) {
	buf := t.in[t.r:]
	for i := 0; i < len(buf); {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return nil, false
		}
		blank := j == 0 || (j == 1 && buf[i] == '\r')
		i += j + 1
		if blank {
			t.r += i
			return buf[:i], true
		}
	}
	return nil, false
}

// handle looks at one event and reports whether the client gets it as it is; it may append
// what the client gets instead to out itself.
func (t *sseTap) handle(ev []byte) bool {
	data := t.eventData(ev)
	switch {
	case data == nil:
		return true // a comment, a blank line or another field
	case bytes.Equal(data, openaiwire.DoneData):
		t.last()
		return true
	case t.api:
		return t.handleAPI(ev, data)
	case bytes.HasPrefix(data, []byte(`{"error"`)):
		t.ex.setErr(errors.New("proxy: the backend reported an error in its stream"), routing.FailureServer)
		t.streamError(data) // in OpenAI's types (backenderr.go)
		return false
	}
	if t.sawFirst && !openaiwire.ChunkHasUsage(data) {
		// After the first token only the usage chunk needs parsing; count the rest.
		t.chunks++
		return true
	}
	c, err := openaiwire.ParseStreamChunk(data)
	if err != nil {
		return true
	}
	if c.Token {
		t.token()
	}
	if c.Usage != nil {
		t.ex.setUsage(*c.Usage)
		return !t.dropUsage || c.Choices > 0
	}
	return true
}

// eventData returns the data of an event: its data lines' values joined by newlines; nil if
// it has none. A single data line is returned in place.
func (t *sseTap) eventData(ev []byte) []byte {
	var data []byte
	lines := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		d, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		d = bytes.TrimPrefix(d, []byte(" "))
		switch lines {
		case 0:
			data = d
		case 1:
			t.data = append(append(append(t.data[:0], data...), '\n'), d...)
			data = t.data
		default:
			t.data = append(append(t.data, '\n'), d...)
			data = t.data
		}
		lines++
	}
	if lines > 0 && data == nil {
		data = []byte{}
	}
	return data
}

// broken ends a stream that stopped before [DONE]: the API's error event for the client (for
// Responses an error event and response.failed), then a clean end — unless the client is
// gone, when the read error goes back to the proxy.
func (t *sseTap) broken() error {
	err := t.upErr
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if t.ex.ctxErr() != nil {
		t.end(err)
		return err
	}
	e := &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "stream_broken",
		Message: "the backend's stream broke before its end"}
	switch cause := t.ex.cause(); {
	case errors.Is(cause, errIdleTimeout):
		e = &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeTimeout, Code: "stream_idle_timeout",
			Message: fmt.Sprintf("the backend sent nothing for %v; the stream was cut", t.ex.h.timeouts.StreamIdle)}
	case errors.Is(cause, errRequestCap):
		e = &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeTimeout, Code: "request_timeout",
			Message: fmt.Sprintf("the request ran past its %v cap; the stream was cut", t.ex.h.timeouts.Request)}
	}
	t.ex.logFailure(e.Message, err)
	if t.ex.ep == openai.Responses {
		// As OpenAI ends a failed stream: an error event, then response.failed with the
		// response object, numbered on from the backend's events.
		t.out = openaiwire.AppendResponsesError(t.out[:0], e, t.seq)
		t.out = openaiwire.AppendResponseFailed(t.out, e, t.seq+1, t.started, t.failedStub())
		t.seq += 2
	} else {
		t.out = openaiwire.AppendEventFor(e, t.ex.ep, t.out[:0])
	}
	t.end(err)
	return nil
}

// token counts a chunk or event that carries generated output; the first is the first token.
func (t *sseTap) token() {
	t.chunks++
	if !t.sawFirst {
		t.sawFirst = true
		t.ex.firstToken(time.Now())
	}
}

// last ends the stream at its last event ([DONE], or a Messages or Responses stream's
// end): it reads the rest of the body (the chunked terminator, which follows at once),
// bounded, before the client hears the event and hangs up, so that the backend connection
// goes back to the pool instead of being closed; then it closes the books.
func (t *sseTap) last() {
	if t.upErr == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(t.up, 64<<10))
	}
	t.end(nil)
}

// end finishes the exchange with the usage seen (chunks counted when none was reported).
func (t *sseTap) end(err error) {
	t.ended = true
	t.ex.mu.Lock()
	if t.ex.usage.OutputTokens == 0 && t.chunks > 0 {
		t.ex.usage.OutputTokens = flowcontrol.Tokens(t.chunks)
		t.ex.info.OutputTokens = t.chunks
	}
	t.ex.mu.Unlock()
	t.ex.finish(err)
}

func (t *sseTap) Close() error {
	t.ex.finish(errClosedEarly)
	err := t.up.Close()
	t.release()
	return err
}
