package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/metrics"
)

// exporterRegistry is a registry with one series to find in the answers.
func exporterRegistry(t testing.TB) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "usher_test_total", Help: "A test series."})
	c.Add(3)
	reg.MustRegister(c)
	return reg
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// scrape GETs url over loopback with a bearer token ("" for none) and returns the status,
// the WWW-Authenticate header and the body.
func scrape(t *testing.T, url, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(body)
}

// writeFile writes a token file the way a Secret volume is updated: a new file renamed over
// the old one (a new identity), or, with inPlace, the same file rewritten.
func writeFile(t *testing.T, path, content string, inPlace bool) {
	t.Helper()
	if inPlace {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The metrics listener's authentication over loopback, step by step: tokens from a file are
// served, a missing or wrong token is a 401 that says so, the file rotated (renamed over,
// rewritten in place, emptied, removed, fixed) counts from the next request, and no token
// ever reaches the log.
func TestExporterTokens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	writeFile(t, path, "# scrapers\n\n  alpha-token-1  \nbeta.token_2~+/==\n", false)
	var logs syncBuffer
	exp, err := metrics.NewExporter(metrics.ExporterOptions{
		Gatherer: exporterRegistry(t), TokenFile: path, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(exp)
	defer srv.Close()

	type step struct {
		name     string
		file     string // written before the request, unless empty
		inPlace  bool
		remove   bool
		token    string
		status   int
		wwwAuth  string
		inBody   string
		hasSerie bool
	}
	const challenge, invalid = `Bearer realm="metrics"`, `Bearer realm="metrics", error="invalid_token"`
	for _, s := range []step{
		{name: "no token", status: 401, wwwAuth: challenge},
		{name: "first token", token: "alpha-token-1", status: 200, hasSerie: true},
		{name: "second token", token: "beta.token_2~+/==", status: 200, hasSerie: true},
		{name: "wrong token", token: "alpha-token-2", status: 401, wwwAuth: invalid},
		{name: "a prefix of a token", token: "alpha", status: 401, wwwAuth: invalid},
		{name: "rotated: new file renamed over", file: "gamma-3\n", token: "gamma-3", status: 200, hasSerie: true},
		{name: "rotated: the old token is gone", token: "alpha-token-1", status: 401, wwwAuth: invalid},
		{name: "rewritten in place", file: "delta-4444\n", inPlace: true, token: "delta-4444", status: 200, hasSerie: true},
		{name: "rewritten in place: old refused", token: "gamma-3", status: 401, wwwAuth: invalid},
		{name: "emptied: nobody", file: "# all revoked\n", inPlace: true, token: "delta-4444", status: 401, wwwAuth: invalid},
		{name: "malformed: refused, 503", file: "delta-4444\nnot a token\n", token: "delta-4444", status: 503, inBody: "cannot check"},
		{name: "fixed", file: "delta-4444\n", token: "delta-4444", status: 200, hasSerie: true},
		{name: "removed: 503", remove: true, token: "delta-4444", status: 503},
		{name: "back", file: "epsilon-5\n", token: "epsilon-5", status: 200, hasSerie: true},
	} {
		if s.remove {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		if s.file != "" {
			writeFile(t, path, s.file, s.inPlace)
		}
		status, www, body := scrape(t, srv.URL, s.token)
		if status != s.status || www != s.wwwAuth {
			t.Errorf("%s: status %d, WWW-Authenticate %q; want %d, %q (body %q)", s.name, status, www, s.status, s.wwwAuth, body)
		}
		if got := strings.Contains(body, "usher_test_total 3"); got != s.hasSerie {
			t.Errorf("%s: series in the body %v, want %v", s.name, got, s.hasSerie)
		}
		if !strings.Contains(body, s.inBody) {
			t.Errorf("%s: body %q, want it to contain %q", s.name, body, s.inBody)
		}
	}
	log := logs.String()
	for _, tok := range []string{"alpha", "beta.token", "gamma-3", "delta-4444", "epsilon-5", "not a token"} {
		if strings.Contains(log, tok) {
			t.Errorf("the log holds token text %q:\n%s", tok, log)
		}
	}
	if !strings.Contains(log, "line 2 is not a bearer token") {
		t.Errorf("the log does not say which line is malformed:\n%s", log)
	}
}

// Other ways in: the scheme in any case, Basic refused, methods other than GET and HEAD 405,
// no authentication at all when neither TokenFile nor Authenticate is set, and an
// Authenticate judge beside the file (its error a 503).
func TestExporterRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, "file-token\n", false)
	errDown := errors.New("token review unavailable")
	judge := func(r *http.Request, token string) (bool, error) {
		switch token {
		case "reviewed":
			return true, nil
		case "review-fails":
			return false, errDown
		}
		return false, nil
	}
	open, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: exporterRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	both, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: exporterRegistry(t), TokenFile: path, Authenticate: judge,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		h      http.Handler
		method string
		auth   string
		status int
	}{
		{"open: no token", open, "GET", "", 200},
		{"open: HEAD", open, "HEAD", "", 200},
		{"open: POST", open, "POST", "", 405},
		{"scheme in lower case", both, "GET", "bearer file-token", 200},
		{"Basic", both, "GET", "Basic ZmlsZS10b2tlbg==", 401},
		{"Bearer without a token", both, "GET", "Bearer ", 401},
		{"the judge accepts", both, "GET", "Bearer reviewed", 200},
		{"the judge refuses", both, "GET", "Bearer stranger", 401},
		{"the judge fails", both, "GET", "Bearer review-fails", 503},
		{"POST with a token", both, "POST", "Bearer file-token", 405},
	} {
		srv := httptest.NewServer(tc.h)
		req, _ := http.NewRequest(tc.method, srv.URL, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: Allow %q, want GET, HEAD", tc.name, resp.Header.Get("Allow"))
		}
	}
}

// NewExporter refuses what cannot work, naming a bad line but never its content.
func TestNewExporterErrors(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, content, true)
		return p
	}
	for _, tc := range []struct {
		name string
		opts metrics.ExporterOptions
		want string
	}{
		{"no gatherer", metrics.ExporterOptions{}, "Gatherer is nil"},
		{"missing file", metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), TokenFile: filepath.Join(dir, "none")}, "no such file"},
		{"no token", metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), TokenFile: file("empty", "# nothing\n\n")}, "no token"},
		{"space inside", metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), TokenFile: file("space", "ok-token\nsecret part\n")}, "line 2 is not a bearer token"},
		{"padding first", metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), TokenFile: file("pad", "=abc\n")}, "line 1"},
		{"padding inside", metrics.ExporterOptions{Gatherer: prometheus.NewRegistry(), TokenFile: file("pad2", "ab=c\n")}, "line 1"},
	} {
		_, err := metrics.NewExporter(tc.opts)
		if !errors.Is(err, metrics.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidOptions saying %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error holds the token's text: %v", tc.name, err)
		}
	}
}

// ExampleExporter serves a registry on a listener of its own behind a bearer token read from
// a file, as examples/gateway's -metrics-listen and -metrics-token-file do.
func ExampleExporter() {
	dir, _ := os.MkdirTemp("", "tokens")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "metrics-tokens")
	_ = os.WriteFile(path, []byte("# one token a line\nprometheus-scraper-token\n"), 0o600)

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "usher_example_total", Help: "An example."}))
	exp, err := metrics.NewExporter(metrics.ExporterOptions{Gatherer: reg, TokenFile: path})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", exp)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, token := range []string{"", "guess", "prometheus-scraper-token"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("WWW-Authenticate"), strings.Contains(string(body), "usher_example_total 0"))
	}
	// Output:
	// 401 Bearer realm="metrics" false
	// 401 Bearer realm="metrics", error="invalid_token" false
	// 200  true
}
