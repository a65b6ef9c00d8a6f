package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzParse feeds New arbitrary bytes as tokenizer.json, seeded with the test tokenizers: it must return a
// model or an error, never panic, and a model it returns must encode without panicking.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/bytelevel", "testdata/sentencepiece"} {
		b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`))
	f.Add([]byte(`{"model":{"vocab":{}},"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"x"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		m, err := New(Options{TokenizerJSON: data})
		if err != nil {
			return
		}
		m.Encode(nil, "Hello, world! 12345 <s> é\u0301 中文  \n\n x")
		m.EncodeSpecial(nil, "")
	})
}

// FuzzEncode encodes arbitrary text with the test tokenizers: no panic, and for the
// byte-level one the ids decode to the text again (for text that its normalizer, NFC,
// leaves as it is, and without <mask>, an added token that takes the spaces around it).
func FuzzEncode(f *testing.F) {
	bl, err := New(Options{Dir: "testdata/bytelevel"})
	if err != nil {
		f.Fatal(err)
	}
	sp, err := New(Options{Dir: "testdata/sentencepiece"})
	if err != nil {
		f.Fatal(err)
	}
	dec := decoder(bl)
	// With USHER_TOKENIZERS set, the byte-level families too.
	type family struct {
		e   *Encoder
		dec map[uint32]string
	}
	var fams []family
	if root := os.Getenv("USHER_TOKENIZERS"); root != "" {
		for _, name := range []string{"qwen3", "gpt-oss", "deepseek-v3"} {
			e, err := New(Options{Dir: filepath.Join(root, name)})
			if err != nil {
				f.Fatal(err)
			}
			fams = append(fams, family{e, decoder(e)})
		}
	}
	for _, s := range []string{"", " ", "the hello world", "a <mask> b", "<|im_start|>x<|im_end|>", "é! e\u0301!", "   \n\n  x", "'S 'll", "\xff\xfe", "中文 123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp.EncodeSpecial(nil, s)
		ids := bl.Encode(nil, s)
		if !utf8.ValidString(s) || !norm.NFC.IsNormalString(s) || strings.Contains(s, "<mask>") {
			return // <mask> strips the spaces around it: the one token that drops text
		}
		var got []byte
		for _, id := range ids {
			got = append(got, dec[id]...)
		}
		if string(got) != s {
			t.Errorf("decode(encode(%q)) = %q (ids %v)", s, got, ids)
		}
		for _, fam := range fams {
			got = got[:0]
			for _, id := range fam.e.Encode(nil, s) {
				got = append(got, fam.dec[id]...)
			}
			if string(got) != s {
				t.Errorf("family: decode(encode(%q)) = %q", s, got)
			}
		}
	})
}

// decoder returns the bytes of each id of a byte-level model: its vocabulary (stored as raw
// bytes) and its added tokens.
func decoder(m *Encoder) map[uint32]string {
	d := make(map[uint32]string, len(m.bpe.vocab))
	for tok, id := range m.bpe.vocab {
		d[id] = tok
	}
	for _, mt := range []*matcher{m.added, m.addedNorm} {
		if mt != nil {
			for _, t := range mt.tokens {
				d[t.ID] = t.Content
			}
		}
	}
	return d
}
