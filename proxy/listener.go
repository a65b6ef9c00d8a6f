package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/internal/lograte"
	"github.com/usher-llm/usher/proxy/openai"
)

// Listener returns ln with the answers net/http gives on its own made like the Handler's. A
// few requests never reach a handler: net/http's server reads them, writes a plain-text
// answer (or none) to the connection and closes it —
//
//   - 431 Request Header Fields Too Large: headers beyond the server's MaxHeaderBytes (1 MiB
//     by default; smaller excesses reach the Handler, which answers 431 itself);
//   - 400 Bad Request: a malformed request line (garbage, HTTP/0.9's "GET /") or header, a
//     bad or repeated Content-Length, a missing or malformed Host header, a body framing it
//     cannot read;
//   - 501 Not Implemented: a Transfer-Encoding other than chunked;
//   - 505 HTTP Version Not Supported;
//   - 417 Expectation Failed, with an empty body: an Expect header other than 100-continue;
//   - a request whose headers stop midway: when the server's ReadHeaderTimeout (or
//     ReadTimeout) passes, a 400 "malformed" if they stopped within a line, nothing if at a
//     line's end.
//
// Through Listener each goes out as the same status — 408 Request Timeout for headers that
// stop midway — with a JSON error body (invalid_request_error; codes headers_too_large,
// bad_request, unsupported_transfer_encoding, unsupported_http_version,
// expectation_failed, request_timeout), Content-Type application/json, Connection: close
// and a request id of its own in RequestIDHeader, drawn from the same sequence as the ids
// of the requests h serves. The body is OpenAI's error object, or Anthropic's when the
// request line names /v1/messages or a path below it; there, as on every answer of h, the id
// is in request-id too, the header Anthropic's SDKs read it from. Each refusal is logged to
// Options.Logger with its id, rate-limited: the first of each kind at once, then one line
// per kind every 10 s with their count and the last one's id.
//
// Nothing else is touched: a connection's writes are passed through unless one is, byte for
// byte, such a refusal, which net/http writes in one piece and never for a request a handler
// answered. Reads are passed through; Listener notes the start of each request's head (the
// request line, up to 256 bytes) to know its path and whether its headers stopped midway.
// Cost: a lock and a few comparisons per read and write, and a scan of each head for its
// end.
//
// Serve plain HTTP through it (srv.Serve(h.Listener(ln))), as a gateway behind a load
// balancer that terminates TLS is served. Over TLS, put it beneath the TLS layer:
// srv.ServeTLS(h.Listener(ln), cert, key), or tls.NewListener(h.Listener(ln), config). It
// then answers the one refusal net/http writes in clear text on a TLS port (400: a plain
// HTTP request) and passes the encrypted bytes of everything else through; net/http's other
// refusals on a TLS connection stay its own (plain text, no id). They cannot be reached:
// net/http serves a connection as TLS (the request's TLS state, ALPN and HTTP/2, the
// handshake's timeout) only when it is a *tls.Conn, which encrypts what net/http writes
// with no hook in between, and http.Server has no hook on these answers (ConnState sees
// states, not bytes; ErrorLog is not told of them). Above TLS (h.Listener of a listener
// that returns *tls.Conn), Listener leaves the connections alone, for the same reason.
// Everything the Handler answers itself carries its id on TLS as on plain HTTP. An HTTP/2
// connection is left alone (its refusals are HTTP/2 frames).
//
// Listener may be called more than once; its connections are safe for net/http's
// concurrent use (a read in the background while the handler writes).
func (h *Handler) Listener(ln net.Listener) net.Listener {
	return &wireListener{Listener: ln, ids: h.ids, log: lograte.New(h.log, 0)}
}

type wireListener struct {
	net.Listener
	ids *requestIDs
	log *lograte.Logger
}

func (l *wireListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, ok := c.(*tls.Conn); ok {
		return c, nil // net/http must see the *tls.Conn (see Listener)
	}
	return &wireConn{Conn: c, l: l}, nil
}

// headCap bounds the bytes of a request's head a wireConn keeps: enough for a method and the
// path that tells Anthropic's endpoints apart.
const headCap = 256

// wireConn rewrites net/http's own answers; see Handler.Listener. It notes what was read
// since the last answer began: the start of a request's head, if the bytes look like one.
type wireConn struct {
	net.Conn
	l *wireListener

	mu sync.Mutex // guards the fields below; never held across a read or write of Conn
	// head holds the first headLen bytes read since the last answer was written (an interim
	// 1xx answer does not count), if they begin like a request line.
	head    [headCap]byte
	headLen int
	state   headState
	nl      int  // the end-of-head search: 1 after a line feed, 2 after a line feed and a CR
	timeout bool // the last read ended at the read deadline
	closed  bool
}

// headState is what the bytes read since the last answer are.
type headState uint8

const (
	headNone  headState = iota // nothing read
	headOpen                   // the start of a request's head, its end not read yet
	headDone                   // a whole head (and maybe a body after it)
	headOther                  // not a request's head: a body, TLS records, a hijacked stream
)

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if n > 0 {
		c.sawLocked(p[:n])
	}
	c.timeout = err != nil && isTimeout(err)
	c.mu.Unlock()
	return n, err
}

// sawLocked notes bytes read: while a head is open, it keeps its start and looks for the
// empty line that ends it. O(len(b)) while a head is open, O(1) otherwise.
func (c *wireConn) sawLocked(b []byte) {
	if c.state == headNone {
		// A request line starts with its method, a token; net/http skips empty lines before it.
		i := 0
		for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
			i++
		}
		if i == len(b) {
			return
		}
		if !isTokenByte(b[i]) {
			c.state = headOther
			return
		}
		c.state, c.nl = headOpen, 0
		b = b[i:]
	}
	if c.state != headOpen {
		return
	}
	c.headLen += copy(c.head[c.headLen:], b)
	for len(b) > 0 {
		switch c.nl {
		case 1: // after a line feed: an empty line ends the head
			switch b[0] {
			case '\n':
				c.state = headDone
				return
			case '\r':
				c.nl, b = 2, b[1:]
				continue
			}
		case 2:
			if b[0] == '\n' {
				c.state = headDone
				return
			}
		}
		c.nl = 0
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return
		}
		c.nl, b = 1, b[i+1:]
	}
}

// stalledLocked reports whether a request's head stopped midway: its start was read, its end
// was not, and the last read ended at the deadline.
func (c *wireConn) stalledLocked() bool { return c.timeout && c.state == headOpen }

func (c *wireConn) Write(p []byte) (int, error) {
	if len(p) > len("HTTP/1.x 100 ") && bytes.HasPrefix(p, []byte("HTTP/1.")) {
		if mayRefuse(p) {
			if out := c.refuse(p); out != nil {
				if _, err := c.Conn.Write(out); err != nil {
					return 0, err
				}
				return len(p), nil
			}
		}
		if p[len("HTTP/1.x ")] == '1' {
			return c.Conn.Write(p) // an interim answer: the request goes on
		}
	}
	c.mu.Lock()
	c.state, c.headLen, c.timeout = headNone, 0, false
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close closes the connection, first answering 408 if it is closed because a request's head
// stopped midway (net/http says nothing then).
func (c *wireConn) Close() error {
	c.mu.Lock()
	var out []byte
	if !c.closed && c.stalledLocked() {
		out = c.answerLocked(errHeadTimeout)
	}
	c.closed = true
	c.mu.Unlock()
	if out != nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second)) // the answer fits the socket's buffer
		_, _ = c.Conn.Write(out)
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, as net/http does after a 431 (so that the client
// reads the answer before the reset its unread request would cause).
func (c *wireConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// mayRefuse reports whether the answer p begins with has the status of one of net/http's
// refusals: a cheap test before refusal's.
func mayRefuse(p []byte) bool {
	switch string(p[len("HTTP/1.x "):len("HTTP/1.x 100")]) {
	case "400", "417", "431", "501", "505":
		return true
	}
	return false
}

// errHeadTimeout is the answer to a request whose head did not arrive in time.
var errHeadTimeout = &openai.Error{Status: http.StatusRequestTimeout, Type: openai.TypeInvalidRequest, Code: "request_timeout",
	Message: "the request's headers did not arrive in time"}

// refuse returns what to write instead of p if p is one of net/http's own answers, nil
// otherwise. O(len(p)) for p of at most 512 bytes, O(1) beyond.
func (c *wireConn) refuse(p []byte) []byte {
	e := refusal(p)
	if e == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e.Status == http.StatusExpectationFailed && c.state != headDone:
		return nil // net/http sends it after reading a whole head, before any handler
	case e.Status == http.StatusBadRequest && c.stalledLocked():
		// The head stopped within a line: net/http takes the partial line as the whole one.
		e = errHeadTimeout
	}
	return c.answerLocked(e)
}

// answerLocked returns the refusal e as an HTTP/1.1 answer with a new request id, in the shape
// of the API the head's path names, and logs it. The head is forgotten: the connection closes.
func (c *wireConn) answerLocked(e *openai.Error) []byte {
	id := c.l.ids.next()
	var ep openai.API
	anthropic := anthropicPath(requestPath(c.head[:c.headLen]))
	if anthropic {
		ep = openai.Messages
	}
	c.state, c.headLen, c.timeout = headNone, 0, false
	c.l.log.Warn("refused a request before any handler", e.Code,
		fmt.Errorf("request_id %s, client %s: %w", id, c.RemoteAddr(), refusalError(e.Message)))

	body := openaiwire.AppendJSONFor(e, ep, make([]byte, 0, 160))
	body = append(body, '\n')
	out := make([]byte, 0, 192+len(body))
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(e.Status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(e.Status)...)
	out = append(out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n"+RequestIDHeader+": "...)
	out = append(out, id...)
	if anthropic {
		out = append(out, "\r\n"+anthropicIDHeader+": "...)
		out = append(out, id...)
	}
	out = append(out, "\r\nConnection: close\r\n\r\n"...)
	return append(out, body...)
}

// refusalError is a refusal's message: the class of its log lines (internal/lograte), so that
// refusals that differ only in id and client are counted as one kind.
type refusalError string

func (e refusalError) Error() string { return string(e) }

// plainErrorHeaders are the headers net/http writes with each of its own refusals.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// plainOnTLS is what net/http writes, in clear text, to a plain HTTP request on a TLS port.
const plainOnTLS = "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

// refusal returns the error for p if p is one of net/http's own refusals: a status line,
// exactly its error headers, and a body that repeats the status (or, for 501, says the
// transfer encoding is unsupported); its 417, with no header but Connection, Date and
// Content-Length 0 and no body; or its answer to plain HTTP on a TLS port. Its texts are
// net/http's constants, never client input. O(len(p)) for p of at most 512 bytes.
func refusal(p []byte) *openai.Error {
	const maxRefusal = 512
	if len(p) > maxRefusal {
		return nil
	}
	if string(p) == plainOnTLS {
		return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "bad_request",
			Message: "the HTTP request is malformed (a plain HTTP request to a TLS port)"}
	}
	if isExpectationFailed(p) {
		return &openai.Error{Status: http.StatusExpectationFailed, Type: openai.TypeInvalidRequest, Code: "expectation_failed",
			Message: "the request's Expect header is not supported (only 100-continue is)"}
	}
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return nil
	}
	line, body, ok := bytes.Cut(p[len("HTTP/1.1 "):], []byte(plainErrorHeaders))
	if !ok || len(line) < 4 || line[3] != ' ' {
		return nil
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil {
		return nil
	}
	if status != http.StatusNotImplemented && !bytes.Equal(body, line) {
		return nil
	}
	// What net/http adds after the status text ("400 Bad Request: missing required Host
	// header") is one of its own constants.
	detail := ""
	if _, d, ok := bytes.Cut(line, []byte(": ")); ok {
		detail = " (" + string(d) + ")"
	}
	e := &openai.Error{Status: status, Type: openai.TypeInvalidRequest}
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Code, e.Message = "headers_too_large", "the request's header fields are too large"
	case http.StatusBadRequest:
		e.Code, e.Message = "bad_request", "the HTTP request is malformed"+detail
	case http.StatusNotImplemented:
		if string(body) != "Unsupported transfer encoding" {
			return nil
		}
		e.Code, e.Message = "unsupported_transfer_encoding", "the request's Transfer-Encoding is not supported (only chunked is)"
	case http.StatusHTTPVersionNotSupported:
		e.Code, e.Message = "unsupported_http_version", "the request's HTTP version is not supported"+detail
	default:
		return nil
	}
	return e
}

// isExpectationFailed reports whether p is net/http's 417: its status line (HTTP/1.1, or
// HTTP/1.0 to an HTTP/1.0 request), then only Connection: close, a Date and Content-Length: 0,
// and no body.
func isExpectationFailed(p []byte) bool {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 417 Expectation Failed\r\n"))
	if !ok {
		if rest, ok = bytes.CutPrefix(p, []byte("HTTP/1.0 417 Expectation Failed\r\n")); !ok {
			return false
		}
	}
	for {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		switch {
		case !ok:
			return false
		case len(line) == 0:
			return len(after) == 0
		case string(line) == "Connection: close", string(line) == "Content-Length: 0":
		case bytes.HasPrefix(line, []byte("Date: ")) && len(line) == len("Date: Mon, 02 Jan 2006 15:04:05 GMT"):
		default:
			return false
		}
		rest = after
	}
}

// requestPath returns the path of the request line that head begins with ("" if it has
// none yet, or names none): the target up to its query, without the scheme and host of an absolute target.
func requestPath(head []byte) string {
	head = bytes.TrimLeft(head, "\r\n")
	_, target, ok := bytes.Cut(head, []byte(" "))
	if !ok {
		return ""
	}
	if i := bytes.IndexAny(target, " ?#\r\n"); i >= 0 {
		target = target[:i]
	}
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := bytes.CutPrefix(target, []byte(scheme)); ok {
			i := bytes.IndexByte(rest, '/')
			if i < 0 {
				return ""
			}
			target = rest[i:]
		}
	}
	if len(target) == 0 || target[0] != '/' {
		return "" // the asterisk or authority form, or not a target
	}
	return string(target)
}

// isTokenByte reports whether b may be in an HTTP token, such as a method (RFC 9110, 5.6.2).
func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return b < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}
