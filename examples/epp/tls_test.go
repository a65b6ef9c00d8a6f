package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/usher-llm/usher/proxy/extproc"
)

// startEPP runs the picker with args until the test ends and returns its gRPC address.
func startEPP(t *testing.T, args ...string) string {
	t.Helper()
	return startEPPOut(t, io.Discard, args...)
}

// startEPPOut is startEPP with the picker's output to out (written before the address is
// reported).
func startEPPOut(t *testing.T, out io.Writer, args ...string) string {
	t.Helper()
	c, err := parseConfig(append([]string{"-listen", "127.0.0.1:0", "-health-listen", "", "-endpoints", "127.0.0.1:1", "-no-scrape"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, out, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return")
		}
	})
	return addr
}

// tlsPick connects anew to addr with TLS verified against roots for "localhost", checks
// readiness, runs one request's headers and body through ext_proc, and returns the
// destination and the served certificate.
func tlsPick(t *testing.T, addr string, roots *x509.CertPool) (string, *x509.Certificate) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: extproc.HealthReadiness})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("readiness over TLS: %v, %v", hr, err)
	}
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.CloseSend() }()
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	dest := ""
	for _, hv := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == extproc.DestinationHeader {
			dest = string(hv.GetHeader().GetRawValue())
		}
	}
	p, _ := peer.FromContext(st.Context())
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer %v: not TLS", p)
	}
	return dest, ti.State.PeerCertificates[0]
}

// By default the picker serves ext_proc over TLS with a self-signed certificate: a client
// verifying against that certificate (fetched at a first contact) picks end to end.
func TestRunTLSSelfSigned(t *testing.T) {
	var out strings.Builder
	addr := startEPPOut(t, &out)
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	cert := c.ConnectionState().PeerCertificates[0]
	_ = c.Close()
	if want := fmt.Sprintf("TLS, self-signed certificate sha256:%x", sha256.Sum256(cert.Raw)); !strings.Contains(out.String(), want) {
		t.Errorf("startup line %q does not name the served certificate (%s)", out.String(), want)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	dest, served := tlsPick(t, addr, roots)
	if dest != "127.0.0.1:1" || !served.Equal(cert) {
		t.Errorf("destination %q (want 127.0.0.1:1), served %v", dest, served.Subject)
	}
}

// issue writes a certificate for localhost signed by the CA (ca, caKey) with serial n, and its
// key, as tls.crt and tls.key in dir (each renamed into place, as a Secret volume swaps).
func issue(t *testing.T, dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, n int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: kder}} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// -cert-path: the certificate is served verified against its CA, and a rotated one is served
// to the next connection without a restart.
func TestRunTLSCertPath(t *testing.T) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	dir := t.TempDir()
	issue(t, dir, ca, caKey, 7)
	addr := startEPP(t, "-cert-path", dir)
	if dest, served := tlsPick(t, addr, roots); dest != "127.0.0.1:1" || served.SerialNumber.Int64() != 7 {
		t.Fatalf("destination %q, serial %v: want 127.0.0.1:1, 7", dest, served.SerialNumber)
	}
	issue(t, dir, ca, caKey, 8)
	if _, served := tlsPick(t, addr, roots); served.SerialNumber.Int64() != 8 {
		t.Fatalf("after rotation: serial %v, want 8", served.SerialNumber)
	}
}

// A malformed or missing certificate is a clear error at start, naming the directory and the file.
func TestRunTLSBadCertPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("-----BEGIN CERTIFICATE-----\nnot base64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "missing")} {
		c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-endpoints", "127.0.0.1:1", "-no-scrape", "-health-listen", "", "-cert-path", d})
		if err != nil {
			t.Fatal(err)
		}
		err = run(context.Background(), c, io.Discard, nil)
		if err == nil || !errors.Is(err, extproc.ErrInvalidOptions) || !strings.Contains(err.Error(), "-cert-path "+d) || !strings.Contains(err.Error(), "tls.crt") {
			t.Errorf("-cert-path %s: %v, want an error naming it and tls.crt", d, err)
		}
	}
}
