package tokenizer

import (
	"hash/maphash"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkEncodeCold is BenchmarkEncode with the word cache emptied before each op (the
// emptying, some 20 µs, included): the cost of a prompt none of whose words were seen.
func BenchmarkEncodeCold(b *testing.B) {
	root := os.Getenv("USHER_TOKENIZERS")
	if root == "" {
		b.Skip("USHER_TOKENIZERS not set (a directory of <family>/tokenizer.json)")
	}
	files, _ := filepath.Glob("*.go")
	var src strings.Builder
	for _, f := range files {
		x, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		src.Write(x)
	}
	for _, name := range []string{"qwen3", "gpt-oss", "deepseek-v3", "mistral"} {
		b.Run(name, func(b *testing.B) {
			e, err := New(Options{Dir: filepath.Join(root, name)})
			if err != nil {
				b.Skip(err)
			}
			text := src.String()
			for len(e.Encode(nil, text)) > 8192 {
				text = text[:len(text)*8192/len(e.Encode(nil, text))]
			}
			sc := &scratch{m: e}
			sc.cache.seed = maphash.MakeSeed()
			dst := make([]uint32, 0, 16384)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				clear(sc.cache.entries[:])
				sc.dst = dst[:0]
				sc.encode(text)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(sc.dst)), "ns/token")
		})
	}
}
