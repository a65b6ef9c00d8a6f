// Package golden reads the conformance module's committed data: the families' tokenizer files,
// the corpus and conversations, and the reference outputs (golden ids and renderings). It is
// shared by the module's tests and benchmarks.
package golden

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Family is one model family's data under testdata/Dir.
type Family struct {
	Dir          string
	TokenizerSHA string // sha256 of the uncompressed tokenizer.json (PROVENANCE)
	ConfigSHA    string // sha256 of the uncompressed tokenizer_config.json (PROVENANCE)
	Template     bool   // tokenizer_config.json has a chat_template, and templates.jsonl.gz exists
}

// Families are the four families, in the order the tests run them.
var Families = []Family{
	{"qwen3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4", "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63", true},
	{"gpt-oss", "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3", "9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070", false},
	{"deepseek-v3", "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41", "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546", true},
	{"mistral", "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc", "359af311800addb7c1254290f86f92f94d6c826e0c5610a8baf68ede399759ec", true},
}

// Dir returns the testdata directory's path, wherever the caller's working directory is.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata")
}

// Path returns testdata/name.
func Path(name string) string { return filepath.Join(Dir(), name) }

// Gunzip returns the uncompressed contents of testdata/name.
func Gunzip(tb testing.TB, name string) []byte {
	tb.Helper()
	f, err := os.Open(Path(name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return b
}

// Lines splits JSON Lines into its lines, on '\n' only (a prompt may hold U+2028 and friends,
// which some line splitters also take for line ends).
func Lines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// DecodeLines unmarshals every line of the gzip-compressed JSON Lines file testdata/name.
func DecodeLines[T any](tb testing.TB, name string) []T {
	tb.Helper()
	ls := Lines(Gunzip(tb, name))
	out := make([]T, len(ls))
	for i, l := range ls {
		if err := json.Unmarshal(l, &out[i]); err != nil {
			tb.Fatalf("%s line %d: %v", name, i+1, err)
		}
	}
	return out
}

// Prompts returns the corpus.
func Prompts(tb testing.TB) []string { return DecodeLines[string](tb, "corpus.jsonl.gz") }

// IDs is one prompt's reference ids: encode(text, add_special_tokens=False) is IDs; with
// add_special_tokens=True it is Special when set, else Pre + IDs + Suf.
type IDs struct {
	IDs     []uint32 `json:"ids"`
	Pre     []uint32 `json:"pre"`
	Suf     []uint32 `json:"suf"`
	Special []uint32 `json:"special"`
}

// WithSpecial returns the ids with add_special_tokens=True.
func (g *IDs) WithSpecial() []uint32 {
	if g.Special != nil {
		return g.Special
	}
	out := make([]uint32, 0, len(g.Pre)+len(g.IDs)+len(g.Suf))
	return append(append(append(out, g.Pre...), g.IDs...), g.Suf...)
}

// Rendering is one conversation's reference rendering: Text, or Error when the template raised.
type Rendering struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// IDsMeta is <family>/ids.meta.json, written by scripts/gen-ids.cjs.
type IDsMeta struct {
	Reference     string `json:"reference"`
	CorpusSHA256  string `json:"corpus_sha256"`
	Prompts       int    `json:"prompts"`
	Tokens        int    `json:"tokens"`
	TokenizerSHA  string `json:"tokenizer_json_sha256"`
	PostProcessor string `json:"post_processor"`
}

// TemplatesMeta is <family>/templates.meta.json, written by scripts/gen-templates.py.
type TemplatesMeta struct {
	Reference     string `json:"reference"`
	ConvSHA256    string `json:"conversations_sha256"`
	Conversations int    `json:"conversations"`
	Rendered      int    `json:"rendered"`
	Errors        int    `json:"errors"`
}

// ReadJSON unmarshals the (uncompressed) testdata/name into v.
func ReadJSON(tb testing.TB, name string, v any) {
	tb.Helper()
	b, err := os.ReadFile(Path(name))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
}

// SHA256 returns b's sha256 in hex.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Quote shows a prompt in a failure message, cut to a readable length.
func Quote(s string) string {
	const max = 160
	if len(s) > max {
		return fmt.Sprintf("%q... (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// FirstDiff describes where got and want part.
func FirstDiff(got, want []uint32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-3, 0)
	return fmt.Sprintf("at token %d: got %v, want %v (lengths %d, %d)",
		i, got[min(lo, len(got)):min(i+5, len(got))], want[min(lo, len(want)):min(i+5, len(want))], len(got), len(want))
}

// TextDiff shows where two renderings part.
func TextDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-80, 0)
	cut := func(s string) string { return s[min(lo, len(s)):min(i+80, len(s))] }
	return fmt.Sprintf("rendering differs at byte %d (lengths %d, %d)\n got: %q\nwant: %q", i, len(got), len(want), cut(got), cut(want))
}
