package tokenizer_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer"
)

// families are the model directories the benchmarks and allocation tests use when
// USHER_TOKENIZERS names a directory holding them (each with tokenizer.json); they skip
// otherwise. The conformance module carries the files.
var families = []string{"qwen3", "gpt-oss", "deepseek-v3", "mistral"}

var (
	modelsMu sync.Mutex
	models   = map[string]*tokenizer.Encoder{}
)

func family(tb testing.TB, name string) *tokenizer.Encoder {
	tb.Helper()
	root := os.Getenv("USHER_TOKENIZERS")
	if root == "" {
		tb.Skip("USHER_TOKENIZERS not set (a directory of <family>/tokenizer.json)")
	}
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if m := models[name]; m != nil {
		return m
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Skipf("no %s: %v", name, err)
	}
	m, err := tokenizer.New(tokenizer.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	models[name] = m
	return m
}

// prompt returns a text of about n tokens under m: this package's own sources, code and
// English comments, repeated.
func prompt(tb testing.TB, m *tokenizer.Encoder, n int) string {
	tb.Helper()
	files, _ := filepath.Glob("*.go")
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		src.Write(b)
	}
	var out strings.Builder
	for len(m.Encode(nil, out.String())) < n {
		out.WriteString(src.String())
	}
	// Trim to about n tokens.
	s := out.String()
	lo, hi := 0, len(s)
	for lo < hi {
		mid := (lo + hi) / 2
		if len(m.Encode(nil, s[:mid])) < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return s[:lo]
}

func BenchmarkEncode(b *testing.B) {
	for _, name := range families {
		b.Run(name, func(b *testing.B) {
			m := family(b, name)
			text := prompt(b, m, 8192)
			dst := make([]uint32, 0, 16384)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			var n int
			for b.Loop() {
				dst = m.Encode(dst[:0], text)
				n = len(dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}

func BenchmarkEncodeParallel(b *testing.B) {
	m := family(b, "qwen3")
	text := prompt(b, m, 8192)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]uint32, 0, 16384)
		for pb.Next() {
			dst = m.Encode(dst[:0], text)
		}
	})
}

// TestEncodeAllocs holds Encode to its allocation budget: at most 2 a request with a dst that
// has room (none for models whose normalizer leaves the text as it is).
func TestEncodeAllocs(t *testing.T) {
	for _, name := range families {
		t.Run(name, func(t *testing.T) {
			m := family(t, name)
			text := prompt(t, m, 8192)
			dst := make([]uint32, 0, 16384)
			m.Encode(dst, text) // warm the pool
			got := testing.AllocsPerRun(20, func() { dst = m.Encode(dst[:0], text) })
			if got > 2 {
				t.Errorf("Encode of %d tokens: %v allocations, want ≤ 2", len(dst), got)
			}
		})
	}
}
