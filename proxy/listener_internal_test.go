package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingListener keeps every first write of its connections: what net/http answered.
type recordingListener struct {
	net.Listener
	mu     sync.Mutex
	writes [][]byte
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

type recordingConn struct {
	net.Conn
	l     *recordingListener
	wrote bool
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if !c.wrote {
		c.wrote = true
		c.l.mu.Lock()
		c.l.writes = append(c.l.writes, bytes.Clone(p))
		c.l.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// netHTTPRefusals sends requests net/http refuses by itself to a server of this Go version,
// and returns what it wrote for each.
func netHTTPRefusals(t testing.TB, raws []string) [][]byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 200 * time.Millisecond}
	go func() { _ = srv.Serve(rl) }()
	defer srv.Close()
	var out [][]byte
	for _, raw := range raws {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.WriteString(conn, raw) }()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.ReadAll(conn) // until net/http closes the connection (or resets it)
		conn.Close()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			rl.mu.Lock()
			n := len(rl.writes)
			rl.mu.Unlock()
			if n > len(out) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%.60q: net/http wrote no answer", raw)
			}
		}
		rl.mu.Lock()
		out = append(out, rl.writes[len(out)])
		rl.mu.Unlock()
	}
	return out
}

// refusalCases are requests net/http refuses before any handler, with the status Listener
// answers them with.
var refusalCases = []struct {
	raw    string
	status int
	code   string
}{
	{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400, "bad_request"},
	{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n{}}", 400, "bad_request"},
	{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding"},
	{"GET / HTTP/1.1\r\n\r\n", 400, "bad_request"},
	{"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "bad_request"},
	{"\x00garbage\r\n\r\n", 400, "bad_request"},
	{"GET /\r\n", 400, "bad_request"},
	{"GET / HTTP/3.0\r\nHost: x\r\n\r\n", 505, "unsupported_http_version"},
	{"POST / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed"},
	{"POST / HTTP/1.0\r\nExpect: foo\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed"},
	{"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 2<<20) + "\r\n\r\n", 431, "headers_too_large"},
	{"GET / HTTP/1.1\r\nHost: x\r\nX-Pa", 400, "bad_request"}, // the header timeout within a line: 408 through a wireConn
}

// TestRefusalMatchesNetHTTP guards the matcher against a Go release that changes what its
// server writes: each refusal of this Go version's net/http is recognised.
func TestRefusalMatchesNetHTTP(t *testing.T) {
	raws := make([]string, len(refusalCases))
	for i, c := range refusalCases {
		raws[i] = c.raw
	}
	for i, w := range netHTTPRefusals(t, raws) {
		c := refusalCases[i]
		e := refusal(w)
		if e == nil || e.Status != c.status || e.Code != c.code {
			t.Errorf("%.40q: net/http wrote %.200q; refusal = %+v, want %d %s", c.raw, w, e, c.status, c.code)
		}
	}
	// An ordinary answer is not a refusal, nor is a handler's own 417 with a header of its own.
	for _, p := range []string{
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nmy own text",
		"HTTP/1.1 417 Expectation Failed\r\nX-Request-Id: a-1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\nbody",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	} {
		if e := refusal([]byte(p)); e != nil {
			t.Errorf("%q taken for a refusal: %+v", p, e)
		}
	}
}

// headRef is the naive reference for what a wireConn notes from data read since an answer.
func headRef(data []byte) (headState, []byte) {
	rest := bytes.TrimLeft(data, "\r\n")
	switch {
	case len(rest) == 0:
		return headNone, nil
	case !isTokenByte(rest[0]):
		return headOther, nil
	}
	head := rest[:min(len(rest), headCap)]
	if bytes.Contains(rest, []byte("\n\n")) || bytes.Contains(rest, []byte("\n\r\n")) {
		return headDone, head
	}
	return headOpen, head
}

// FuzzHead feeds data to a wireConn in two reads split at any point: what it notes matches
// the reference on the whole, and requestPath never panics and returns a path or nothing.
func FuzzHead(f *testing.F) {
	for _, c := range refusalCases {
		f.Add([]byte(c.raw[:min(len(c.raw), 300)]), uint16(7))
	}
	f.Add([]byte("POST http://x/v1/messages?beta=true HTTP/1.1\r\nHost: x\r\n\r\n{}"), uint16(20))
	f.Add([]byte("\r\n\r\nGET /v1/messages/count_tokens HTTP/1.1\r\n"), uint16(2))
	f.Add([]byte("\x16\x03\x01\x02\x00"), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		c := &wireConn{}
		at := int(split) % (len(data) + 1)
		c.sawLocked(data[:at])
		if at < len(data) {
			c.sawLocked(data[at:])
		}
		state, head := headRef(data)
		got := c.head[:c.headLen]
		if c.state == headDone && state == headDone {
			// Bytes after the end of the head may be kept or not; the start is the same.
			got, head = got[:min(len(got), len(head))], head[:min(len(got), len(head))]
		}
		if c.state != state || !bytes.Equal(got, head) {
			t.Fatalf("state %d head %q, want %d %q", c.state, got, state, head)
		}
		if p := requestPath(got); p != "" && (p[0] != '/' || strings.ContainsAny(p, " ?#\r\n")) {
			t.Fatalf("requestPath(%q) = %q", got, p)
		}
	})
}

// FuzzRefusal: refusal never panics, takes nothing longer than net/http's refusals for one,
// and what it takes is one of the answers it knows.
func FuzzRefusal(f *testing.F) {
	raws := make([]string, len(refusalCases))
	for i, c := range refusalCases {
		raws[i] = c.raw
	}
	for _, w := range netHTTPRefusals(f, raws) {
		f.Add(w)
	}
	f.Add([]byte(plainOnTLS))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		e := refusal(p)
		if e == nil {
			return
		}
		switch {
		case len(p) > 512:
			t.Fatalf("a %d-byte write taken for a refusal", len(p))
		case !bytes.HasPrefix(p, []byte("HTTP/1.")):
			t.Fatalf("%q taken for a refusal", p)
		case e.Code == "" || e.Message == "" || e.Type == "":
			t.Fatalf("refusal(%q) = %+v: incomplete", p, e)
		}
		switch e.Status {
		case 400, 417, 431, 501, 505:
		default:
			t.Fatalf("refusal(%q) = status %d", p, e.Status)
		}
	})
}

// TestStalledHead: a wireConn answers 408 on Close only when a request's head stopped
// midway: its start read, its end not, and the last read ended at the deadline.
func TestStalledHead(t *testing.T) {
	h, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, tt := range []struct {
		name, read string
		want408    bool
	}{
		{"head stopped", "POST /v1/messages HTTP/1.1\r\nHost: x\r\n", true},
		{"method only", "GE", true},
		{"nothing read", "", false},
		{"whole head, body stopped", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{", false},
		{"not a request", "{\"model\":", false},
		{"TLS record", "\x16\x03\x01", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server, client := net.Pipe()
			ln := h.Listener(nil).(*wireListener)
			c := &wireConn{Conn: server, l: ln}
			if tt.read != "" { // net.Pipe delivers an empty write as an empty read
				go func() { _, _ = io.WriteString(client, tt.read) }()
			}
			buf := make([]byte, 4096)
			if tt.read != "" {
				if n, err := c.Read(buf); n != len(tt.read) || err != nil {
					t.Fatalf("read %d %v", n, err)
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if _, err := c.Read(buf); !isTimeout(err) {
				t.Fatalf("read: %v, want the deadline", err)
			}
			got := make(chan []byte)
			go func() { b, _ := io.ReadAll(client); got <- b }()
			_ = c.Close()
			b := <-got
			if has := bytes.HasPrefix(b, []byte("HTTP/1.1 408 Request Timeout\r\n")); has != tt.want408 {
				t.Errorf("wrote %q on Close, want a 408: %v", b, tt.want408)
			}
			if tt.want408 && strings.Contains(tt.read, "/v1/messages") != bytes.Contains(b, []byte("\r\nRequest-Id: ")) {
				t.Errorf("wrote %q: want request-id on Anthropic's paths only", b)
			}
		})
	}
}

// nopConn is a connection whose reads return a request and whose writes go nowhere.
type nopConn struct {
	net.Conn
	req []byte
}

func (c nopConn) Read(p []byte) (int, error)  { return copy(p, c.req), nil }
func (c nopConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkConn is what a wireConn adds to an exchange on a kept-alive connection: the read
// of a request (its head and body in one read, as net/http's 4 KiB buffer takes them) and the
// write of its answer's head, against the bare connection.
func BenchmarkConn(b *testing.B) {
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nAuthorization: Bearer x\r\nContent-Length: 80\r\n\r\n" +
		`{"model":"usher/demo","messages":[{"role":"user","content":"hello there"}]}`)
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: 1x2y3z-42\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 300\r\n\r\n")
	h, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	l := h.Listener(nil).(*wireListener)
	for _, bc := range []struct {
		name string
		conn net.Conn
	}{
		{"bare", nopConn{req: req}},
		{"wire", &wireConn{Conn: nopConn{req: req}, l: l}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = bc.conn.Read(buf)
				_, _ = bc.conn.Write(answer)
			}
		})
	}
}
