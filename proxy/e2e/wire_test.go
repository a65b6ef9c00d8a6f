package e2e_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy"
)

// wireHandler is a Handler over one simulated server, logging to logs, with a body timeout
// short enough for a test.
func wireHandler(t *testing.T, logs io.Writer) *proxy.Handler {
	t.Helper()
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.Timeouts.Body = 500 * time.Millisecond
	h, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.Start(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	t.Cleanup(func() { h.Close(); cancel(); <-done })
	return h
}

// serveWire serves h through h.Listener on loopback with a short header timeout and idle
// timeout, over TLS (the Listener beneath it, as httptest and ServeTLS put it) when tlsOn.
func serveWire(t *testing.T, h *proxy.Handler, tlsOn bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = h.Listener(srv.Listener)
	srv.Config.ReadHeaderTimeout = 300 * time.Millisecond
	srv.Config.IdleTimeout = 300 * time.Millisecond
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) // TLS handshake errors
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// answer is one HTTP answer read from a raw connection.
type answer struct {
	status      int
	contentType string
	id, anthID  string // X-Request-Id, request-id
	body        []byte
}

func (a answer) String() string {
	return fmt.Sprintf("%d %q id=%q request-id=%q %q", a.status, a.contentType, a.id, a.anthID, a.body)
}

// exchangeRaw writes raw to conn (then body, once a 100 Continue came) and reads every answer
// up to the first final one: the interim answers first.
func exchangeRaw(t *testing.T, conn net.Conn, raw, body string) []answer {
	t.Helper()
	go func() { _, _ = io.WriteString(conn, raw) }() // the server may answer before reading it all
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	var out []answer
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %v: no answer: %v", out, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := len(resp.Header.Values(proxy.RequestIDHeader)); n > 1 {
			t.Errorf("%d %s headers, want at most one", n, proxy.RequestIDHeader)
		}
		out = append(out, answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get(proxy.RequestIDHeader), resp.Header.Get("request-id"), data})
		if resp.StatusCode >= 200 {
			return out
		}
		if resp.StatusCode == http.StatusContinue && body != "" {
			go func(b string) { _, _ = io.WriteString(conn, b) }(body)
			body = ""
		}
	}
}

// errorOf decodes an OpenAI error body, or an Anthropic one when anthropic.
func errorOf(t *testing.T, a answer, anthropic bool) (typ, code, msg string) {
	t.Helper()
	if anthropic {
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(a.body, &e); err != nil || e.Type != "error" || e.Error.Message == "" {
			t.Fatalf("%v: not an Anthropic error (%v)", a, err)
		}
		return e.Error.Type, "", e.Error.Message
	}
	var e struct {
		Error struct {
			Message, Type string
			Code          *string
		}
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Message == "" || e.Error.Code == nil {
		t.Fatalf("%v: not an OpenAI error (%v)", a, err)
	}
	return e.Error.Type, *e.Error.Code, e.Error.Message
}

// prefixOf is the part of a request id that names the Handler's sequence.
func prefixOf(id string) string { p, _, _ := strings.Cut(id, "-"); return p }

// TestRefusalsCarryID sends, on raw connections, each request net/http refuses before any
// handler runs, and one that stops midway: every answer is JSON (Anthropic's for
// /v1/messages) with Content-Type application/json and a new request id of the Handler's
// sequence (in request-id too on Anthropic's paths), and each is logged with its id.
func TestRefusalsCarryID(t *testing.T) {
	logs := &syncBuffer{}
	h := wireHandler(t, logs)
	srv := serveWire(t, h, false)
	addr := srv.Listener.Addr().String()

	// An answer of the Handler, for the sequence its ids come from.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ok := exchangeRaw(t, conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "")
	conn.Close()
	seq := prefixOf(ok[0].id)
	if ok[0].status != 200 || seq == "" {
		t.Fatalf("GET /health: %v", ok[0])
	}

	chat := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	msgs := "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\n"
	tests := []struct {
		name, raw string
		status    int
		code      string // OpenAI's; for Anthropic's paths the type is checked
		anthropic bool
	}{
		{"bad Content-Length", chat + "Content-Length: ten\r\n\r\n", 400, "bad_request", false},
		{"conflicting Content-Length", chat + "Content-Length: 3\r\nContent-Length: 4\r\n\r\n{}}", 400, "bad_request", false},
		{"Transfer-Encoding gzip", chat + "Transfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding", false},
		{"missing Host", "GET /v1/models HTTP/1.1\r\n\r\n", 400, "bad_request", false},
		{"garbage", "\x00\x01\x02 garbage\r\n\r\n", 400, "bad_request", false},
		{"HTTP/0.9", "GET /\r\n", 400, "bad_request", false},
		{"HTTP/3.0", "GET /v1/models HTTP/3.0\r\nHost: x\r\n\r\n", 505, "unsupported_http_version", false},
		{"Expect: foo", chat + "Expect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed", false},
		{"Expect: foo, HTTP/1.0", "POST /v1/chat/completions HTTP/1.0\r\nExpect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed", false},
		{"2 MiB of headers", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 2<<20) + "\r\n\r\n", 431, "headers_too_large", false},
		{"headers stop within a line", chat + "Content-Le", 408, "request_timeout", false},
		{"headers stop at a line's end", chat + "Content-Length: 2\r\n", 408, "request_timeout", false},
		{"request line stops midway", "POST /v1/chat/compl", 408, "request_timeout", false},
		{"absolute target", "POST http://x/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400, "invalid_request_error", true},
		{"Anthropic: bad Content-Length", msgs + "Content-Length: ten\r\n\r\n", 400, "invalid_request_error", true},
		{"Anthropic: Expect: foo", msgs + "Expect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "invalid_request_error", true},
		{"Anthropic: headers stop midway", msgs + "anthropic-vers", 408, "invalid_request_error", true},
		{"Anthropic count_tokens: Transfer-Encoding gzip", "POST /v1/messages/count_tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "api_error", true},
	}
	ids := map[string]bool{ok[0].id: true}
	logged := map[int]bool{} // statuses whose first refusal's log line was seen
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			got := exchangeRaw(t, conn, tt.raw, "")
			a := got[len(got)-1]
			if len(got) != 1 || a.status != tt.status || a.contentType != "application/json" {
				t.Fatalf("%v, want one %d answer in JSON", got, tt.status)
			}
			typ, code, _ := errorOf(t, a, tt.anthropic)
			if tt.anthropic && typ != tt.code || !tt.anthropic && code != tt.code {
				t.Errorf("type %q code %q, want %q", typ, code, tt.code)
			}
			if a.id == "" || ids[a.id] || prefixOf(a.id) != seq {
				t.Errorf("%s = %q, want a new id of the Handler's sequence %q", proxy.RequestIDHeader, a.id, seq)
			}
			ids[a.id] = true
			if tt.anthropic && a.anthID != a.id || !tt.anthropic && a.anthID != "" {
				t.Errorf("request-id = %q, want %q on Anthropic's paths only", a.anthID, a.id)
			}
			// The connection is closed after the answer, with nothing more on it.
			if rest, err := io.ReadAll(conn); len(rest) > 0 {
				t.Errorf("after the answer: %q (%v)", rest, err)
			}
			// The first refusal of a kind is logged at once, with its id; the next ones within
			// 10 s are counted in one line at the interval's end (internal/lograte).
			if !logged[a.status] {
				logged[a.status] = true
				eventually(t, "the refusal's log line", func() bool { return strings.Contains(logs.String(), "request_id "+a.id) })
			}
		})
	}
}

// TestQuietClosesStayQuiet: a connection closed without a request in progress gets no
// answer (a 408 there would reach a client as the answer to its next request), and a body
// that stops gets the Handler's 408 alone.
func TestQuietClosesStayQuiet(t *testing.T) {
	h := wireHandler(t, io.Discard)
	addr := serveWire(t, h, false).Listener.Addr().String()
	for _, tt := range []struct{ name, raw string }{
		{"nothing sent", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, tt.raw)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if got, err := io.ReadAll(conn); len(got) > 0 || err != nil {
				t.Errorf("read %q (%v), want the connection closed with nothing written", got, err)
			}
		})
	}
	t.Run("idle after an answer", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if a := exchangeRaw(t, conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", ""); a[0].status != 200 {
			t.Fatalf("%v", a)
		}
		if got, err := io.ReadAll(conn); len(got) > 0 || err != nil {
			t.Errorf("read %q (%v) after the idle timeout, want nothing", got, err)
		}
	})
	t.Run("body stops", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		got := exchangeRaw(t, conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":", "")
		a := got[0]
		if _, code, _ := errorOf(t, a, false); len(got) != 1 || a.status != 408 || code != "request_timeout" || a.id == "" {
			t.Fatalf("%v, want the Handler's 408", got)
		}
		if rest, _ := io.ReadAll(conn); len(rest) > 0 {
			t.Errorf("after the Handler's 408: %q, want nothing", rest)
		}
	})
}

// continueRequest is a request of more than 1 MiB with Expect: 100-continue, as curl sends
// one, to path.
func continueRequest(path string) (head, body string) {
	body = `{"model":"usher/demo","max_tokens":3,"messages":[{"role":"user","content":"hi"}]` + strings.Repeat(" ", 1<<20) + `}`
	head = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nanthropic-version: 2023-06-01\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", path, len(body))
	return head, body
}

// TestExpectContinue: a client that waits for 100 Continue gets exactly one, with the request
// id, and the final answer carries the same id (in request-id too on /v1/messages), on plain
// HTTP and on TLS.
func TestExpectContinue(t *testing.T) {
	h := wireHandler(t, io.Discard)
	for _, tlsOn := range []bool{false, true} {
		srv := serveWire(t, h, tlsOn)
		for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
			t.Run(fmt.Sprintf("%s tls=%v", path, tlsOn), func(t *testing.T) {
				var conn net.Conn
				var err error
				if tlsOn {
					conn, err = tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
				} else {
					conn, err = net.Dial("tcp", srv.Listener.Addr().String())
				}
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				head, body := continueRequest(path)
				got := exchangeRaw(t, conn, head, body)
				if len(got) != 2 || got[0].status != 100 || got[1].status != 200 {
					t.Fatalf("%v, want one 100 Continue and a 200", got)
				}
				anthropic := path == "/v1/messages"
				for _, a := range got {
					if a.id == "" || a.id != got[0].id || anthropic && a.anthID != a.id || !anthropic && a.anthID != "" {
						t.Errorf("%v: want the request's id %q in each answer (request-id on /v1/messages only)", a, got[0].id)
					}
				}
			})
		}
	}
	// Refused from its Content-Length, a body is not asked for: no 100 Continue.
	srv := serveWire(t, h, false)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := exchangeRaw(t, conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 104857600\r\n\r\n", "")
	if len(got) != 1 || got[0].status != 413 || got[0].id == "" {
		t.Errorf("%v, want a 413 with its id and no 100 Continue", got)
	}
}

// TestRefusalsOverTLS: beneath TLS (as ServeTLS and httptest put it) the Listener answers a
// plain request on the TLS port in JSON with an id and leaves the encrypted bytes alone, so
// the Handler's answers carry their ids; above TLS it leaves the connections to net/http as
// TLS (HTTP/2 is negotiated). net/http's refusals inside TLS stay its own (see Listener).
func TestRefusalsOverTLS(t *testing.T) {
	h := wireHandler(t, io.Discard)
	srv := serveWire(t, h, true)
	addr := srv.Listener.Addr().String()

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	got := exchangeRaw(t, conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "")
	conn.Close()
	if _, code, _ := errorOf(t, got[0], false); got[0].status != 400 || code != "bad_request" || got[0].contentType != "application/json" || got[0].id == "" {
		t.Errorf("plain HTTP on the TLS port: %v, want a JSON 400 with an id", got)
	}

	for _, raw := range []string{"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		got := exchangeRaw(t, conn, raw, "")
		conn.Close()
		if a := got[0]; a.id == "" || strings.Contains(raw, "messages") && a.anthID != a.id {
			t.Errorf("%q over TLS: %v, want the Handler's id", raw, a)
		}
	}
	// net/http's own refusal inside TLS: what it is (plain text, no id), for the record.
	conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	got = exchangeRaw(t, conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", "")
	conn.Close()
	t.Logf("bad Content-Length inside TLS: %v", got)
	if got[0].status != 400 {
		t.Errorf("bad Content-Length inside TLS: %v, want 400", got)
	}

	// Above TLS: connections go to net/http as they are, HTTP/2 included.
	above := httptest.NewUnstartedServer(h)
	above.EnableHTTP2 = true
	above.StartTLS()
	defer above.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, TLSConfig: above.TLS, ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(h.Listener(tls.NewListener(ln, above.TLS))) }()
	defer hs.Close()
	c := above.Client()
	resp, err := c.Get("https://" + ln.Addr().String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.Header.Get(proxy.RequestIDHeader) == "" {
		t.Errorf("above TLS: %s, id %q; want HTTP/2 and an id", resp.Proto, resp.Header.Get(proxy.RequestIDHeader))
	}
	if err := hs.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Error(err)
	}
}
