package metrics

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// tokenSyntax is RFC 6750's b64token, the reference FuzzTokenFile checks the parser against.
var tokenSyntax = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`)

// FuzzTokenFile compares the token file's parser with a naive reference (split into lines,
// trim, skip blanks and comments, match the RFC's syntax): the file is refused exactly when a
// line is not a token or none is there, and otherwise every token it lists is served and a
// string it does not list is not.
func FuzzTokenFile(f *testing.F) {
	for _, seed := range []string{"a\n", "# c\n\nabc-1\nxyz==\n", "bad token\n", "=\n", "a=b\n", "\r\ntok\r\n", strings.Repeat("x", 4097)} {
		f.Add(seed, "abc-1")
	}
	reg := prometheus.NewRegistry()
	f.Fuzz(func(t *testing.T, content, probe string) {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var tokens []string
		valid := true
		for _, line := range strings.Split(strings.ReplaceAll(content, "\r\n", "\n"), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if len(line) > 4096 || !tokenSyntax.MatchString(line) {
				valid = false
			}
			tokens = append(tokens, line)
		}
		e, err := NewExporter(ExporterOptions{Gatherer: reg, TokenFile: path})
		if wantErr := !valid || len(tokens) == 0; (err != nil) != wantErr {
			t.Fatalf("NewExporter(%q) = %v; want an error: %v", content, err, wantErr)
		}
		if err != nil {
			return
		}
		status := func(token string) int {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			return w.Code
		}
		for _, tok := range tokens {
			if got := status(tok); got != http.StatusOK {
				t.Fatalf("token %q of the file: %d, want 200", tok, got)
			}
		}
		listed := false
		for _, tok := range tokens {
			listed = listed || tok == strings.TrimSpace(probe)
		}
		if got := status(probe); !listed && strings.TrimSpace(probe) != "" && got != http.StatusUnauthorized {
			t.Fatalf("probe %q not in the file: %d, want 401", probe, got)
		}
	})
}
