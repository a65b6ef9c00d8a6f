package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strconv"

	"github.com/usher-llm/usher/internal/glue/openaiwire"
	"github.com/usher-llm/usher/proxy/openai"
)

// Listener returns ln with net/http's own refusals answered in OpenAI error JSON. A few
// malformed requests never reach a handler: net/http's server reads them, writes a plain-text
// answer to the connection and closes it —
//
//   - 431 Request Header Fields Too Large: headers beyond the server's MaxHeaderBytes (1 MiB
//     by default; smaller excesses reach the Handler, which answers 431 itself);
//   - 400 Bad Request: a malformed request line or header, a bad or repeated Content-Length,
//     a missing or malformed Host header, a body framing it cannot read;
//   - 501 Not Implemented: a Transfer-Encoding other than chunked;
//   - 505 HTTP Version Not Supported.
//
// Through Listener each goes out as the same status with an OpenAI error body
// (invalid_request_error, codes headers_too_large, bad_request, unsupported_transfer_encoding,
// unsupported_http_version) and Connection: close. Nothing else is touched: a connection's
// writes are passed through unless one is, byte for byte, such a refusal, which net/http
// writes in one piece and never for a request a handler answered.
//
// Use it for plain HTTP (srv.Serve(proxy.Listener(ln))), as a gateway behind a load balancer
// that terminates TLS is served. A TLS listener must not be wrapped: net/http then no longer
// sees a *tls.Conn, and refuses nothing in clear text anyway but a plain request sent to a
// TLS port. An HTTP/2 connection is left alone (its refusals are HTTP/2 frames).
func Listener(ln net.Listener) net.Listener { return jsonListener{ln} }

type jsonListener struct{ net.Listener }

func (l jsonListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonConn{Conn: c}, nil
}

// jsonConn rewrites net/http's plain-text refusals; see Listener.
type jsonConn struct{ net.Conn }

// plainErrorHeaders are the headers net/http writes with each of its own refusals.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *jsonConn) Write(p []byte) (int, error) {
	if e := refusal(p); e != nil {
		body := openaiwire.AppendJSON(e, nil)
		var out []byte
		out = append(out, "HTTP/1.1 "...)
		out = strconv.AppendInt(out, int64(e.Status), 10)
		out = append(out, ' ')
		out = append(out, http.StatusText(e.Status)...)
		out = append(out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(body)), 10)
		out = append(out, "\r\nConnection: close\r\n\r\n"...)
		out = append(out, body...)
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection, as net/http does after a 431 (so that the client
// reads the answer before the reset its unread request would cause).
func (c *jsonConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// refusal returns the OpenAI error for p if p is one of net/http's own refusals: a status
// line, exactly its error headers, and a body that repeats the status (or, for 501, says the
// transfer encoding is unsupported). Its texts are net/http's constants, never client input.
func refusal(p []byte) *openai.Error {
	const maxRefusal = 512
	if len(p) > maxRefusal || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
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
