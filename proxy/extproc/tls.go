package extproc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// TLSOptions configures [TLSConfig]. The zero value is a self-signed certificate for this
// machine, valid a year and renewed in process before it expires.
type TLSOptions struct {
	// CertFile and KeyFile name a PEM certificate (chain) and its private key, as a
	// Kubernetes TLS Secret mounts them (tls.crt and tls.key). They are read by TLSConfig (an
	// error if they cannot be, or do not make a pair) and read again, at a handshake, when
	// either file's size, modification time or identity changed (a Secret volume swaps a
	// symlink; cert-manager renews) or 10 s passed since they last were: a rotated
	// certificate is served from the next connection on, without a restart. A new pair that
	// is unreadable or malformed is logged and the last good pair kept. Both or neither.
	CertFile, KeyFile string
	// Hosts are the DNS names and IP addresses of the self-signed certificate (used only
	// without CertFile). Nil: the host name, localhost, the loopback addresses and the
	// machine's interface addresses.
	Hosts []string
	// Validity is the self-signed certificate's lifetime (at least an hour); it is renewed,
	// with a new key, at a handshake once two thirds of it have passed. Zero: 365 days.
	Validity time.Duration
	// Logger receives the certificate reloads and failures. Nil: slog.Default().
	Logger *slog.Logger
}

// TLSConfig returns a server TLS configuration for the ext_proc listener, as Envoy's ext_proc
// filter (or a gateway that dials its endpoint picker with TLS) reaches it:
//
//	cfg, err := extproc.TLSConfig(extproc.TLSOptions{CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key"})
//	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
//
// Without CertFile the certificate is self-signed, generated in process (ECDSA P-256), as the
// Inference Extension's reference picker does when given no certificate: the connection is
// encrypted, and a client that wants to verify it must be given the certificate out of band
// (it is the one GetCertificate returns). The configuration asks for TLS 1.2 or later and
// offers h2; it does not ask for client certificates (set ClientAuth and ClientCAs on the
// returned value for mutual TLS). Its GetCertificate is safe for concurrent use; it stats the
// two files at each handshake (O(1)) and reads them only when they changed.
func TLSConfig(opts TLSOptions) (*tls.Config, error) {
	src, err := newCertSource(opts)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return src.get() },
	}, nil
}

// certRecheck is how long a certificate pair read from files is served before the files
// are read again even though their stat did not change (a file system with coarse
// timestamps, a rewrite of the same size).
const certRecheck = 10 * time.Second

// maxCertFile bounds what is read of a certificate or key file.
const maxCertFile = 1 << 20

// certSource is the certificate a TLSConfig serves: a pair of files, read again when they
// change, or a self-signed certificate, renewed before it expires.
type certSource struct {
	// Immutable after newCertSource.
	certFile, keyFile string
	hosts             []string
	validity          time.Duration
	log               *slog.Logger
	now               func() time.Time

	mu                sync.Mutex // guards below
	cert              *tls.Certificate
	certStat, keyStat os.FileInfo // of what was last read (a good pair or not)
	readAt            time.Time   // files: when they were last read; self-signed: when to renew
	bad               string      // the last reload's error, logged once
}

func newCertSource(o TLSOptions) (*certSource, error) {
	bad := func(format string, args ...any) (*certSource, error) {
		return nil, fmt.Errorf("%w: TLS: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return bad("give CertFile and KeyFile, or neither")
	}
	if o.Validity != 0 && o.Validity < time.Hour {
		return bad("Validity %v: want at least an hour", o.Validity)
	}
	s := &certSource{certFile: o.CertFile, keyFile: o.KeyFile, hosts: o.Hosts, validity: o.Validity, log: o.Logger, now: time.Now}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.validity == 0 {
		s.validity = 365 * 24 * time.Hour
	}
	if s.certFile != "" {
		cert, cs, ks, err := readPair(s.certFile, s.keyFile)
		if err != nil {
			return bad("%v", err)
		}
		s.cert, s.certStat, s.keyStat, s.readAt = cert, cs, ks, s.now()
		s.checkExpiry(cert)
		return s, nil
	}
	if s.hosts == nil {
		s.hosts = defaultHosts()
	}
	if len(s.hosts) == 0 {
		return bad("no host for the self-signed certificate")
	}
	if err := s.renew(); err != nil {
		return bad("self-signed certificate: %v", err)
	}
	return s, nil
}

// get returns the certificate to serve now.
func (s *certSource) get() (*tls.Certificate, error) {
	if s.certFile == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.now().Before(s.readAt) {
			if err := s.renew(); err != nil {
				s.log.Error("extproc: TLS: renewing the self-signed certificate failed; the old one is served", "err", err)
			}
		}
		return s.cert, nil
	}
	cs, cerr := os.Stat(s.certFile)
	ks, kerr := os.Stat(s.keyFile)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cerr == nil && kerr == nil && sameFile(cs, s.certStat) && sameFile(ks, s.keyStat) && s.now().Sub(s.readAt) < certRecheck {
		return s.cert, nil
	}
	cert, cs, ks, err := readPair(s.certFile, s.keyFile)
	s.certStat, s.keyStat, s.readAt = cs, ks, s.now()
	if err != nil {
		if msg := err.Error(); msg != s.bad {
			s.bad = msg
			s.log.Error("extproc: TLS: the certificate files are unusable; the last good pair is served", "cert", s.certFile, "key", s.keyFile, "err", err)
		}
		return s.cert, nil
	}
	if s.bad != "" || !cert.Leaf.Equal(s.cert.Leaf) {
		s.log.Info("extproc: TLS: certificate read again", "cert", s.certFile, "subject", cert.Leaf.Subject.String(),
			"serial", cert.Leaf.SerialNumber.String(), "not_after", cert.Leaf.NotAfter)
	}
	s.bad, s.cert = "", cert
	s.checkExpiry(cert)
	return cert, nil
}

// checkExpiry logs a certificate read from the files that is not valid now (it is served
// all the same: the files are what the operator gave).
func (s *certSource) checkExpiry(c *tls.Certificate) {
	if now := s.now(); now.After(c.Leaf.NotAfter) || now.Before(c.Leaf.NotBefore) {
		s.log.Warn("extproc: TLS: the certificate is not valid now", "cert", s.certFile,
			"not_before", c.Leaf.NotBefore, "not_after", c.Leaf.NotAfter)
	}
}

// renew generates a new self-signed certificate and sets when to renew it. Its caller holds
// mu (or owns s).
func (s *certSource) renew() error {
	now := s.now()
	cert, err := selfSigned(s.hosts, now, s.validity)
	if err != nil {
		return err
	}
	s.cert, s.readAt = cert, now.Add(s.validity*2/3)
	return nil
}

// sameFile reports whether two stats describe the same content as far as a stat can tell:
// the same file, size and modification time. A nil b (nothing read yet) is never the same.
func sameFile(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// readPair reads a certificate and key pair, with the stats of the files it read (taken from
// the open files, so that they describe what was read; nil for a file it could not open).
func readPair(certFile, keyFile string) (*tls.Certificate, os.FileInfo, os.FileInfo, error) {
	certPEM, cs, cerr := readSmall(certFile)
	keyPEM, ks, kerr := readSmall(keyFile)
	if err := errors.Join(cerr, kerr); err != nil {
		return nil, cs, ks, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, cs, ks, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, cs, ks, fmt.Errorf("certificate %s: %w", certFile, err)
		}
	}
	return &cert, cs, ks, nil
}

// readSmall reads at most maxCertFile bytes of a file, with its stat.
func readSmall(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxCertFile+1))
	if err != nil {
		return nil, fi, err
	}
	if len(data) > maxCertFile {
		return nil, fi, fmt.Errorf("%s: larger than %d bytes", path, maxCertFile)
	}
	return data, fi, nil
}

// selfSigned generates an ECDSA P-256 certificate for hosts, valid from an hour before now
// (clocks differ) for validity.
func selfSigned(hosts []string, now time.Time, validity time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: hosts[0], Organization: []string{"usher endpoint picker (self-signed)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// defaultHosts is what a self-signed certificate is for without TLSOptions.Hosts: the host
// name (a pod's name), localhost, the loopback addresses and the interface addresses (a
// pod's IP).
func defaultHosts() []string {
	var hosts []string
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		hosts = append(hosts, h)
	}
	hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				hosts = append(hosts, n.IP.String())
			}
		}
	}
	return hosts
}
