package tokenizer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer"
)

// reference is testdata/reference.json: ids of the two small tokenizers in testdata, and the
// pieces of each known Split pattern, as the Hugging Face tokenizers library (npm tokenizers
// 0.23.2) produced them.
type reference struct {
	ByteLevel     []refCase `json:"bytelevel"`
	SentencePiece []refCase `json:"sentencepiece"`
	Metaspace     []struct {
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Cases        []refCase       `json:"cases"`
	} `json:"metaspace"`
	Pretok map[string]struct {
		Pattern string `json:"pattern"`
		Cases   []struct {
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		} `json:"cases"`
	} `json:"pretok"`
}

type refCase struct {
	Text    string   `json:"text"`
	IDs     []uint32 `json:"ids"`
	Special []uint32 `json:"special"`
}

func loadReference(t testing.TB) reference {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEncodeReference(t *testing.T) {
	ref := loadReference(t)
	for _, tc := range []struct {
		dir   string
		cases []refCase
	}{
		{"testdata/bytelevel", ref.ByteLevel},
		{"testdata/sentencepiece", ref.SentencePiece},
	} {
		m, err := tokenizer.New(tokenizer.Options{Dir: tc.dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tc.cases {
			if got := m.Encode(nil, c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("%s: Encode(%q) = %v, want %v", tc.dir, c.Text, got, c.IDs)
			}
			if got := m.EncodeSpecial(nil, c.Text); !slices.Equal(got, c.Special) {
				t.Errorf("%s: EncodeSpecial(%q) = %v, want %v", tc.dir, c.Text, got, c.Special)
			}
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	m, err := tokenizer.New(tokenizer.Options{Dir: "testdata/bytelevel"})
	if err != nil {
		t.Fatal(err)
	}
	dst := []uint32{7, 8}
	got := m.Encode(dst, "the hello world")
	want := append([]uint32{7, 8}, m.Encode(nil, "the hello world")...)
	if !slices.Equal(got, want) {
		t.Errorf("Encode(dst, ...) = %v, want %v", got, want)
	}
}

func TestNewRefuses(t *testing.T) {
	b, err := os.ReadFile("testdata/bytelevel/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	edit := func(change func(map[string]any)) []byte {
		var g map[string]any
		json.Unmarshal(b, &g)
		change(g)
		out, _ := json.Marshal(g)
		return out
	}
	pre := func(g map[string]any) map[string]any {
		return g["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
	}
	for name, data := range map[string][]byte{
		"not JSON":        []byte("{"),
		"unknown pattern": edit(func(g map[string]any) { pre(g)["pattern"] = map[string]any{"Regex": `\w+`} }),
		"behavior":        edit(func(g map[string]any) { pre(g)["behavior"] = "Removed" }),
		"model":           edit(func(g map[string]any) { g["model"].(map[string]any)["type"] = "Unigram" }),
		"normalizer":      edit(func(g map[string]any) { g["normalizer"] = map[string]any{"type": "Lowercase"} }),
		"post_processor":  edit(func(g map[string]any) { g["post_processor"] = map[string]any{"type": "BertProcessing"} }),
		"merge":           edit(func(g map[string]any) { g["model"].(map[string]any)["merges"] = []any{[]any{"zz", "q"}} }),
		"no vocab":        edit(func(g map[string]any) { delete(g["model"].(map[string]any), "vocab") }),
	} {
		if _, err := tokenizer.New(tokenizer.Options{TokenizerJSON: data}); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	if _, err := tokenizer.New(tokenizer.Options{TokenizerJSON: b}); err != nil {
		t.Errorf("unchanged: %v", err)
	}
	if _, err := tokenizer.New(tokenizer.Options{Dir: "testdata/none"}); err == nil {
		t.Error("New of a missing directory succeeded")
	}
	if _, err := tokenizer.New(tokenizer.Options{}); !errors.Is(err, tokenizer.ErrInvalidOptions) {
		t.Errorf("New(Options{}) = %v, want ErrInvalidOptions", err)
	}
}

// TestConfigSpecial checks EncodeSpecial against tokenizer_config.json: transformers rebuilds
// the post-processor of the Llama classes from add_bos_token and add_eos_token.
func TestConfigSpecial(t *testing.T) {
	tj, err := os.ReadFile("testdata/bytelevel/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	const text = "the world"
	base, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj})
	if err != nil {
		t.Fatal(err)
	}
	ids := base.Encode(nil, text)
	with := func(pre []uint32, post ...uint32) []uint32 {
		return append(append(slices.Clone(pre), ids...), post...)
	}
	const bos, start, end = 303, 301, 302 // <bos>, <|im_start|>, <|im_end|>
	for _, tc := range []struct {
		config string
		want   []uint32
	}{
		{``, with([]uint32{bos})}, // tokenizer.json's TemplateProcessing
		{`{"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": false}`, with([]uint32{bos})},
		{`{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|im_start|>"}`, with([]uint32{start})},
		{`{"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true, "eos_token": {"content": "<|im_end|>"}}`, with(nil, end)},
		{`{"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": true, "bos_token": "t", "eos_token": "<|im_end|>"}`, with([]uint32{116}, end)},
	} {
		m, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj, ConfigJSON: []byte(tc.config)})
		if err != nil {
			t.Errorf("%s: %v", tc.config, err)
			continue
		}
		if got := m.EncodeSpecial(nil, text); !slices.Equal(got, tc.want) {
			t.Errorf("%s: EncodeSpecial = %v, want %v", tc.config, got, tc.want)
		}
	}
	for _, config := range []string{
		`{`,
		`{"tokenizer_class": "LlamaTokenizerFast"}`,
		`{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<nope>"}`,
		`{"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false, "add_eos_token": true, "eos_token": 3}`,
	} {
		if _, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj, ConfigJSON: []byte(config)}); err == nil {
			t.Errorf("%s: New succeeded, want an error", config)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	m, err := tokenizer.New(tokenizer.Options{Dir: "testdata/bytelevel"})
	if err != nil {
		t.Fatal(err)
	}
	ref := loadReference(t)
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			var dst []uint32
			for i := 0; i < 200; i++ {
				c := ref.ByteLevel[i%len(ref.ByteLevel)]
				if dst = m.Encode(dst[:0], c.Text); !slices.Equal(dst, c.IDs) {
					done <- fmt.Errorf("Encode(%q) = %v, want %v", c.Text, dst, c.IDs)
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func Example() {
	m, err := tokenizer.New(tokenizer.Options{Dir: "testdata/bytelevel"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Encode(nil, "the hello world"))
	fmt.Println(m.EncodeSpecial(nil, "<|im_start|>the world<|im_end|>"))
	// Output:
	// [257 32 275 280]
	// [303 301 257 280 302]
}

// TestEncodeAllocsSmall holds Encode to its allocation budget on the test tokenizers, which
// need no files from elsewhere: none for text the normalizer leaves as it is, one for text it
// changes (the normalized string), with a dst that has room.
func TestEncodeAllocsSmall(t *testing.T) {
	const text = "<|im_start|>user\nthe hello world, 123 中文 <mask> and é!<|im_end|>\n"
	for _, tc := range []struct {
		dir, text string
		want      float64
	}{
		{"testdata/bytelevel", text, 0},
		{"testdata/bytelevel", strings.Repeat("e\u0301 ", 100) + text, 1}, // not NFC
		{"testdata/sentencepiece", "<s>the hello world in thing", 1},      // Prepend and Replace
	} {
		m, err := tokenizer.New(tokenizer.Options{Dir: tc.dir})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]uint32, 0, 4096)
		m.Encode(dst, tc.text)
		if got := testing.AllocsPerRun(100, func() { dst = m.Encode(dst[:0], tc.text) }); got > tc.want {
			t.Errorf("%s: Encode(%.20q...): %v allocations, want ≤ %v", tc.dir, tc.text, got, tc.want)
		}
	}
}

// TestMetaspace checks the Metaspace pre-tokenizer (each prepend_scheme, split or not) on the
// SentencePiece test tokenizer with its normalizer removed, against the reference.
func TestMetaspace(t *testing.T) {
	ref := loadReference(t)
	b, err := os.ReadFile("testdata/sentencepiece/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Metaspace) == 0 {
		t.Fatal("no Metaspace cases in the reference")
	}
	for _, v := range ref.Metaspace {
		var f map[string]json.RawMessage
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		f["normalizer"], f["pre_tokenizer"] = json.RawMessage("null"), v.PreTokenizer
		tj, _ := json.Marshal(f)
		m, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj})
		if err != nil {
			t.Fatalf("%s: %v", v.PreTokenizer, err)
		}
		for _, c := range v.Cases {
			if got := m.Encode(nil, c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("%s: Encode(%q) = %v, want %v", v.PreTokenizer, c.Text, got, c.IDs)
			}
		}
	}
}
