package metrics

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ExporterOptions configures an [Exporter]. Gatherer is required; the zero value of every other
// field is a documented default.
type ExporterOptions struct {
	// Gatherer is what the Exporter serves: a gateway's proxy.Handler.Registry, an endpoint
	// picker's extproc.Server.Registry, or a registry of your own.
	Gatherer prometheus.Gatherer
	// TokenFile, if set, names a file of bearer tokens: one a line, white space around it
	// trimmed, blank lines and lines starting with # ignored; a token is 1 to 4096 of the
	// characters RFC 6750 allows (letters, digits, - . _ ~ + /, then any '='). A request is
	// then served only with "Authorization: Bearer TOKEN" naming one of them. NewExporter reads
	// the file (an error if it cannot, or finds no token). The Exporter looks at the file
	// again at every request that brings a token, and reads it again when its size,
	// modification time or identity changed (a Kubernetes Secret volume swaps a symlink) or
	// 10 s passed since it last did, so a token added or removed counts from the next request
	// (at worst 10 s later, on a file system with coarse timestamps), without a restart or a
	// signal.
	// While the file cannot be read or is malformed every token is refused (503, logged once
	// per change); a file that holds no token refuses every request (401).
	TokenFile string
	// Authenticate, if set, judges a bearer token that TokenFile does not hold (every token,
	// without a TokenFile): true serves the request, false answers 401, an error 503 (logged,
	// without the token). It is called concurrently, with the request (its context ends when
	// the client leaves); a Kubernetes TokenReview is one such judge.
	Authenticate func(r *http.Request, token string) (bool, error)
	// Logger receives the token file's reloads and failures; never a token. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// Exporter serves a Prometheus gatherer over HTTP, as GET /metrics does, behind optional
// bearer-token authentication: the one implementation of the metrics listener that the
// gateway (examples/gateway -metrics-listen, -metrics-token-file) and the endpoint picker
// (examples/epp) share. Mount it where the metrics are scraped:
//
//	exp, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: h.Registry(), TokenFile: "/etc/usher/metrics-tokens"})
//	mux.Handle("GET /metrics", exp)
//
// A request without a bearer token is answered 401 with "WWW-Authenticate: Bearer
// realm=\"metrics\"", one with a token no judge accepts 401 with error="invalid_token" added
// (RFC 6750); methods other than GET and HEAD get 405. Tokens are compared by their SHA-256
// digests in constant time, all of them every time, so an answer's timing tells nothing of a
// token's content; they are never logged. Without TokenFile and Authenticate every request
// is served.
//
// An Exporter is safe for concurrent use. A request costs one stat of TokenFile and
// O(tokens) comparisons before the gatherer's own work; the file is read again only when it
// changed.
type Exporter struct {
	serve http.Handler
	auth  func(r *http.Request, token string) (bool, error)
	path  string // TokenFile
	log   *slog.Logger

	mu     sync.Mutex // guards the fields below
	stat   os.FileInfo
	readAt time.Time           // when stat and tokens were read
	tokens [][sha256.Size]byte // digests of the file's tokens
	bad    error               // why the file is unusable now; nil when it is
}

// tokenRecheck is how long a token file's content is trusted while its stat stays the same: a
// file rewritten in place within its file system's timestamp granularity, at the same size,
// is read again after this at the latest.
const tokenRecheck = 10 * time.Second

// maxTokenFile bounds what NewExporter and the reloads read of a token file.
const maxTokenFile = 1 << 20

// NewExporter validates opts and returns an Exporter; it reads TokenFile once.
func NewExporter(opts ExporterOptions) (*Exporter, error) {
	if opts.Gatherer == nil {
		return nil, fmt.Errorf("%w: ExporterOptions.Gatherer is nil", ErrInvalidOptions)
	}
	e := &Exporter{
		serve: promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}),
		auth:  opts.Authenticate,
		path:  opts.TokenFile,
		log:   opts.Logger,
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.path != "" {
		fi, tokens, err := readTokens(e.path)
		if err == nil && len(tokens) == 0 {
			err = errors.New("no token in the file")
		}
		if err != nil {
			return nil, fmt.Errorf("%w: TokenFile %s: %w", ErrInvalidOptions, e.path, err)
		}
		e.stat, e.tokens, e.readAt = fi, tokens, time.Now()
	}
	return e, nil
}

// ServeHTTP serves the gatherer's exposition to a request that passes authentication (see
// [Exporter]). Safe for concurrent use.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if e.path != "" || e.auth != nil {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "unauthorized: this endpoint wants an Authorization: Bearer token", http.StatusUnauthorized)
			return
		}
		switch allowed, err := e.allow(r, token); {
		case err != nil:
			http.Error(w, "the metrics endpoint cannot check tokens now", http.StatusServiceUnavailable)
			return
		case !allowed:
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics", error="invalid_token"`)
			http.Error(w, "unauthorized: the bearer token is not accepted", http.StatusUnauthorized)
			return
		}
	}
	e.serve.ServeHTTP(w, r)
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header (the scheme in any
// case).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// allow judges a token: the file's first, then Authenticate. An error means it could not be
// judged.
func (e *Exporter) allow(r *http.Request, token string) (bool, error) {
	var fileErr error
	if e.path != "" {
		tokens, err := e.current()
		if err == nil && holds(tokens, token) {
			return true, nil
		}
		fileErr = err
	}
	if e.auth != nil {
		ok, err := e.auth(r, token)
		if err != nil {
			e.log.Warn("metrics: authenticating a bearer token failed", "err", err)
		}
		if ok || err != nil {
			return ok, err
		}
	}
	return false, fileErr
}

// holds reports whether token is one of tokens' (digests), looking at every one of them so
// that the time taken does not depend on which one matched. O(tokens).
func holds(tokens [][sha256.Size]byte, token string) bool {
	d := sha256.Sum256([]byte(token))
	found := 0
	for i := range tokens {
		found |= subtle.ConstantTimeCompare(d[:], tokens[i][:])
	}
	return found == 1
}

// current returns the token file's digests, read again if the file changed since they were.
// The error is why the file is unusable (its tokens are then none).
func (e *Exporter) current() ([][sha256.Size]byte, error) {
	fi, statErr := os.Stat(e.path)
	e.mu.Lock()
	defer e.mu.Unlock()
	if statErr == nil && e.bad == nil && e.stat != nil && sameFile(fi, e.stat) && time.Since(e.readAt) < tokenRecheck {
		return e.tokens, nil
	}
	var tokens [][sha256.Size]byte
	err := statErr
	if err == nil {
		fi, tokens, err = readTokens(e.path)
	}
	if err != nil {
		if e.bad == nil || e.bad.Error() != err.Error() {
			e.log.Error("metrics: the token file is unusable; every token is refused until it is fixed", "file", e.path, "err", err)
		}
		e.bad, e.stat, e.tokens = err, nil, nil
		return nil, err
	}
	if e.bad != nil || (e.stat != nil && !sameFile(fi, e.stat)) {
		e.log.Info("metrics: token file read again", "file", e.path, "tokens", len(tokens))
	}
	e.bad, e.stat, e.tokens, e.readAt = nil, fi, tokens, time.Now()
	return tokens, nil
}

// sameFile reports whether two stats describe the same content, as far as a stat can tell:
// the same file, size and modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// readTokens reads a token file: its stat (taken from the open file, so that it describes what
// was read) and the digests of its tokens. The errors name lines, never their content.
func readTokens(path string) (os.FileInfo, [][sha256.Size]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxTokenFile {
		return nil, nil, fmt.Errorf("larger than %d bytes", maxTokenFile)
	}
	var tokens [][sha256.Size]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxTokenFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !validToken(line) {
			return nil, nil, fmt.Errorf("line %d is not a bearer token (1 to 4096 of A-Z a-z 0-9 - . _ ~ + /, then any '=')", n)
		}
		tokens = append(tokens, sha256.Sum256([]byte(line)))
	}
	return fi, tokens, sc.Err()
}

// validToken reports whether s has RFC 6750's b64token syntax and at most 4096 bytes.
func validToken(s string) bool {
	if len(s) == 0 || len(s) > 4096 {
		return false
	}
	pad := false
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '=':
			pad = i > 0
			if !pad {
				return false
			}
		case pad:
			return false // only '=' after the first '='
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

var _ http.Handler = (*Exporter)(nil)
