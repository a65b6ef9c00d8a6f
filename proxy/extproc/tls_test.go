package extproc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// serveTLS starts s on a loopback listener behind cfg (plaintext when nil) and returns its
// address.
func serveTLS(t testing.TB, s *Server, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); s.Close() })
	return ln.Addr().String()
}

// dial connects to addr with TLS verified against roots for the name "localhost" (plaintext
// when roots is nil).
func dial(t testing.TB, addr string, roots *x509.CertPool) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if roots != nil {
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// pick runs one request through a new stream on conn to its end and returns the destination
// and the certificate the server presented (nil in plaintext).
func pick(t testing.TB, conn *grpc.ClientConn) (string, *x509.Certificate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx, grpc.Peer(&p))
	if err != nil {
		t.Fatal(err)
	}
	r := exchangeRequest(t, st, chatBody, nil)
	if r.GetImmediateResponse() != nil {
		t.Fatalf("rejected: %s", immediateBody(r))
	}
	hdr, _ := destinationOf(t, r)
	send(t, st, respHeaders("200", "text/event-stream", false, nil))
	recv(t, st)
	send(t, st, respBody(sseChunks[1]+sseChunks[2]+sseChunks[3], true))
	recv(t, st)
	closeStream(st)
	var leaf *x509.Certificate
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		leaf = ti.State.PeerCertificates[0]
	}
	return hdr, leaf
}

// servedCertificate fetches the certificate addr presents, unverified, as a client pinning
// a self-signed certificate would on first contact.
func servedCertificate(t testing.TB, addr string) *x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// The default: a self-signed ECDSA P-256 certificate for localhost and the loopback
// addresses; a client that verifies against it runs the ext_proc protocol end to end; one
// that verifies against the system roots is refused; a plaintext client is refused.
func TestTLSSelfSigned(t *testing.T) {
	cfg, err := TLSConfig(TLSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Options{})
	addr := serveTLS(t, s, cfg)
	cert := servedCertificate(t, addr)
	if k, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", cert.PublicKey)
	}
	if err := cert.VerifyHostname("localhost"); err != nil {
		t.Error(err)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if life := time.Until(cert.NotAfter); life <= 364*24*time.Hour || life > 366*24*time.Hour {
		t.Errorf("valid until %v: want about a year from now", cert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	conn := dial(t, addr, roots)
	defer conn.Close()
	for range 3 {
		dest, leaf := pick(t, conn)
		if !inFleet(dest) {
			t.Errorf("destination %q not in the fleet", dest)
		}
		if leaf == nil || !leaf.Equal(cert) {
			t.Errorf("served %v, want the fetched certificate", leaf)
		}
	}
	waitIdle(t, s)
	if st := s.Stats(); st.Picks != 3 || st.Completed != 3 {
		t.Errorf("stats %+v: want 3 picks, 3 completed", st)
	}

	// Verified against the system roots (not the served certificate): refused.
	bad, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := extprocv3.NewExternalProcessorClient(bad).Process(ctx); err == nil {
		if _, err = st.Recv(); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("unverified server: %v, want a certificate error", err)
		}
	}
	plain := dial(t, addr, nil)
	defer plain.Close()
	if st, err := extprocv3.NewExternalProcessorClient(plain).Process(ctx); err == nil {
		if _, err = st.Recv(); err == nil {
			t.Error("a plaintext client reached the TLS listener")
		}
	}
}

// Plaintext serving (no TLSConfig) is unchanged.
func TestTLSPlaintext(t *testing.T) {
	s := newServer(t, Options{})
	conn := dial(t, serveTLS(t, s, nil), nil)
	defer conn.Close()
	if dest, leaf := pick(t, conn); !inFleet(dest) || leaf != nil {
		t.Errorf("plaintext pick: %q, %v", dest, leaf)
	}
}

// testCA is a certificate authority of the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "usher test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns the PEM of a certificate for localhost with the serial given, and of its key.
func (ca *testCA) issue(t testing.TB, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// writePair writes tls.crt and tls.key into dir, each through a new file renamed over the
// old one (a new identity, as a Secret volume's swap gives).
func writePair(t testing.TB, dir string, certPEM, keyPEM []byte) {
	t.Helper()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		tmp := filepath.Join(dir, "."+name+".new")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Certificate files: served verified against their CA; a rotated pair is served to the next
// connection without a restart; a malformed new pair is logged and the last good one kept;
// a fixed pair is served again.
func TestTLSCertFilesRotate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c1, k1 := ca.issue(t, 101)
	writePair(t, dir, c1, k1)
	var logs syncBuffer
	cfg, err := TLSConfig(TLSOptions{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Options{})
	addr := serveTLS(t, s, cfg)

	served := func() int64 {
		t.Helper()
		conn := dial(t, addr, ca.pool) // a new connection: a new handshake
		defer conn.Close()
		dest, leaf := pick(t, conn)
		if !inFleet(dest) {
			t.Errorf("destination %q not in the fleet", dest)
		}
		return leaf.SerialNumber.Int64()
	}
	if got := served(); got != 101 {
		t.Fatalf("serial %d, want 101", got)
	}

	c2, k2 := ca.issue(t, 102)
	writePair(t, dir, c2, k2)
	if got := served(); got != 102 {
		t.Fatalf("after rotation: serial %d, want 102", got)
	}
	if !strings.Contains(logs.String(), "certificate read again") {
		t.Errorf("no reload logged: %s", logs.String())
	}

	// A malformed pair (a truncated certificate, a key of another certificate): the last good
	// one is served, and the failure logged.
	c3, _ := ca.issue(t, 103)
	writePair(t, dir, c3[:len(c3)/2], k2)
	if got := served(); got != 102 {
		t.Errorf("truncated certificate: serial %d, want the last good 102", got)
	}
	writePair(t, dir, c3, k2)
	if got := served(); got != 102 {
		t.Errorf("mismatched key: serial %d, want the last good 102", got)
	}
	if n := strings.Count(logs.String(), "unusable"); n != 2 {
		t.Errorf("%d failures logged, want 2 (one per bad pair): %s", n, logs.String())
	}
	c4, k4 := ca.issue(t, 104)
	writePair(t, dir, c4, k4)
	if got := served(); got != 104 {
		t.Errorf("fixed: serial %d, want 104", got)
	}
	waitIdle(t, s)
}

// The same files are not read again at every handshake while unchanged, but are after
// certRecheck even if their stat did not change.
func TestTLSRecheck(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c1, k1 := ca.issue(t, 1)
	writePair(t, dir, c1, k1)
	src, err := newCertSource(TLSOptions{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	src.now = func() time.Time { return now }
	first, _ := src.get()
	// Same size and modification time, other content: seen only after certRecheck.
	c2, _ := ca.issue(t, 2)
	for i := 0; len(c2) != len(c1); i++ { // ECDSA signatures vary in length by a byte or two
		if i == 100 {
			t.Fatal("no certificate of the same length")
		}
		c2, _ = ca.issue(t, 2)
	}
	path := filepath.Join(dir, "tls.crt")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, c2, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got, _ := src.get(); got != first {
		t.Errorf("re-read before certRecheck with an unchanged stat")
	}
	now = now.Add(certRecheck)
	// The key no longer matches: the re-read fails and the last good pair is kept, which shows
	// that the files were read.
	if got, _ := src.get(); got != first || src.bad == "" {
		t.Errorf("not re-read after certRecheck (bad %q)", src.bad)
	}
}

// The self-signed certificate is renewed, with a new key, once two thirds of its validity
// have passed.
func TestTLSSelfSignedRenewal(t *testing.T) {
	src, err := newCertSource(TLSOptions{Hosts: []string{"epp.example", "10.1.2.3"}, Validity: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	src.now = func() time.Time { return now }
	a, _ := src.get()
	if err := a.Leaf.VerifyHostname("epp.example"); err != nil {
		t.Error(err)
	}
	if err := a.Leaf.VerifyHostname("10.1.2.3"); err != nil {
		t.Error(err)
	}
	now = now.Add(119 * time.Minute)
	if b, _ := src.get(); b != a {
		t.Error("renewed before two thirds of its validity")
	}
	now = now.Add(2 * time.Minute)
	b, _ := src.get()
	if b == a || b.Leaf.NotAfter.Before(now.Add(3*time.Hour-time.Minute)) {
		t.Errorf("not renewed after two thirds: %v", b.Leaf.NotAfter)
	}
}

// Bad options and files are clear errors from TLSConfig.
func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c, k := ca.issue(t, 1)
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, key := file("good.crt", c), file("good.key", k)
	_, otherKey := ca.issue(t, 2)
	for _, tc := range []struct {
		name string
		o    TLSOptions
		want string
	}{
		{"cert without key", TLSOptions{CertFile: good}, "CertFile and KeyFile"},
		{"short validity", TLSOptions{Validity: time.Minute}, "Validity"},
		{"no hosts", TLSOptions{Hosts: []string{}}, "no host"},
		{"missing", TLSOptions{CertFile: filepath.Join(dir, "none.crt"), KeyFile: key}, "none.crt"},
		{"not PEM", TLSOptions{CertFile: file("garbage.crt", []byte("not a certificate\n")), KeyFile: key}, "garbage.crt"},
		{"truncated", TLSOptions{CertFile: file("half.crt", c[:len(c)/2]), KeyFile: key}, "half.crt"},
		{"other key", TLSOptions{CertFile: good, KeyFile: file("other.key", otherKey)}, "does not match"},
	} {
		_, err := TLSConfig(tc.o)
		if err == nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidOptions naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := TLSConfig(TLSOptions{CertFile: good, KeyFile: key}); err != nil {
		t.Errorf("good pair: %v", err)
	}
}

// BenchmarkFirstPick is a new connection over loopback and its first request through
// ext_proc (headers, buffered body: parse, key, hash, admit, pick; response headers and one
// SSE body), the connection then closed: plaintext, and TLS with a full handshake each time
// (no session resumption) against the self-signed certificate, verified. The difference is
// what TLS costs a picker per connection; Envoy keeps its connections to the picker open, so
// it is paid once per connection, not per request (BenchmarkExtProcPick is a request on an
// open connection).
func BenchmarkFirstPick(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plaintext"
		if secure {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			var cfg *tls.Config
			var roots *x509.CertPool
			if secure {
				var err error
				if cfg, err = TLSConfig(TLSOptions{Logger: slog.New(slog.DiscardHandler)}); err != nil {
					b.Fatal(err)
				}
				cert, err := cfg.GetCertificate(nil)
				if err != nil {
					b.Fatal(err)
				}
				roots = x509.NewCertPool()
				roots.AddCert(cert.Leaf)
			}
			s := newServer(b, Options{})
			addr := serveTLS(b, s, cfg)
			b.ReportAllocs()
			for b.Loop() {
				conn := dial(b, addr, roots)
				if dest, _ := pick(b, conn); !inFleet(dest) {
					b.Fatalf("destination %q", dest)
				}
				_ = conn.Close()
			}
			b.StopTimer()
			waitIdle(b, s)
		})
	}
}

// BenchmarkPickOpenConn is a request through ext_proc on a connection already open, as Envoy
// sends them: plaintext, and over TLS (the record layer's cost alone, no handshake).
func BenchmarkPickOpenConn(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plaintext"
		if secure {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			var cfg *tls.Config
			var roots *x509.CertPool
			if secure {
				var err error
				if cfg, err = TLSConfig(TLSOptions{Logger: slog.New(slog.DiscardHandler)}); err != nil {
					b.Fatal(err)
				}
				cert, err := cfg.GetCertificate(nil)
				if err != nil {
					b.Fatal(err)
				}
				roots = x509.NewCertPool()
				roots.AddCert(cert.Leaf)
			}
			s := newServer(b, Options{})
			conn := dial(b, serveTLS(b, s, cfg), roots)
			defer conn.Close()
			pick(b, conn) // the handshake
			b.ReportAllocs()
			for b.Loop() {
				if dest, _ := pick(b, conn); !inFleet(dest) {
					b.Fatalf("destination %q", dest)
				}
			}
			b.StopTimer()
			waitIdle(b, s)
		})
	}
}

// A certificate read from the files that is not valid now is logged, and served all the same.
func TestTLSExpiredLogged(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	c1, k1 := ca.issue(t, 1) // valid for an hour
	writePair(t, dir, c1, k1)
	var logs syncBuffer
	src, err := newCertSource(TLSOptions{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "not valid now") {
		t.Errorf("a valid certificate logged as invalid: %s", logs.String())
	}
	src.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	c2, k2 := ca.issue(t, 2)
	writePair(t, dir, c2, k2)
	if got, err := src.get(); err != nil || got.Leaf.SerialNumber.Int64() != 2 {
		t.Errorf("got %v, %v: want the new certificate served", got, err)
	}
	if !strings.Contains(logs.String(), "not valid now") {
		t.Errorf("an expired certificate not logged: %s", logs.String())
	}
}
