package simfleet

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func pieces(text string) []string {
	var out []string
	for i := 0; i < len(text); {
		n := nextPiece(text[i:])
		out = append(out, text[i:i+n])
		i += n
	}
	return out
}

func TestTokenizePieces(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"a  b", []string{"a", " ", " b"}},
		{"line\n\nnext", []string{"line", "\n\n", "next"}},
		{"12345 x", []string{"123", "45", " x"}},
		{"internationalization", []string{"internat", "ionaliza", "tion"}},
		{"<|im_start|>user\nhi<|im_end|>\n", []string{"<|im_start|>", "user", "\n", "hi", "<|im_end|>", "\n"}},
		{"ok <|im_end|>", []string{"ok", " ", "<|im_end|>"}},
		{"x <| y |>", []string{"x", " <|", " y", " |>"}},
		{"naïve café", []string{"naïve", " café"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := pieces(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("pieces(%q) = %q, want %q", tt.text, got, tt.want)
		}
		if got := TokenCount(tt.text); got != len(tt.want) {
			t.Errorf("TokenCount(%q) = %d, want %d", tt.text, got, len(tt.want))
		}
	}
}

func TestTokenizeIDs(t *testing.T) {
	a, b := Tokenize("the cat sat"), Tokenize("the dog sat")
	if a[0] != b[0] || a[2] != b[2] || a[1] == b[1] {
		t.Errorf("ids %v and %v: equal pieces must share ids, different ones differ", a, b)
	}
	for _, id := range Tokenize(strings.Repeat("token soup 42 ", 100)) {
		if id >= VocabSize {
			t.Fatalf("id %d outside the vocabulary", id)
		}
	}
	for _, w := range words {
		if n := TokenCount(w); n != 1 {
			t.Errorf("answer word %q is %d tokens", w, n)
		}
		if n := TokenCount(" " + w); n != 1 {
			t.Errorf("answer word %q with its space is %d tokens", " "+w, n)
		}
	}
}

// checkPrefix verifies the prefix property on text cut at k.
func checkPrefix(t *testing.T, text string, k int) {
	full := Tokenize(text)
	pre := Tokenize(text[:k])
	if len(pre) == 0 {
		return
	}
	if len(pre)-1 > len(full) || !slices.Equal(pre[:len(pre)-1], full[:len(pre)-1]) {
		t.Fatalf("Tokenize(%q) = %v is not a prefix (but for its last token) of Tokenize(%q) = %v", text[:k], pre, text, full)
	}
}

func TestTokenizePrefixProperty(t *testing.T) {
	text := "<|im_start|>system\nYou are a helpful assistant.  Answer in 1234 words!<|im_end|>\n<|im_start|>user\nhello"
	for k := range len(text) + 1 {
		if markerInside(text, k) {
			continue
		}
		checkPrefix(t, text, k)
	}
}

// markerInside reports whether the cut at k falls inside a <|...|> marker, where the property
// does not hold (a partial marker is ordinary punctuation and letters).
func markerInside(text string, k int) bool {
	for i := 0; i < len(text); i++ {
		if n := markerLen(text[i:]); n > 0 {
			if k > i && k < i+n {
				return true
			}
			i += n - 1
		}
	}
	return false
}

func FuzzTokenizePrefix(f *testing.F) {
	f.Add("Hello, world! 12345   spaces\n\nand <|im_end|> markers", 7)
	f.Add("a  b", 3)
	f.Fuzz(func(t *testing.T, text string, k int) {
		if len(text) == 0 {
			return
		}
		k = int(uint(k) % uint(len(text)+1))
		if markerInside(text, k) || (k < len(text) && !utf8.RuneStart(text[k])) {
			return // the property is about text prefixes: whole characters, whole markers
		}
		checkPrefix(t, text, k)
		if got := TokenCount(text); got != len(Tokenize(text)) {
			t.Fatalf("TokenCount = %d, len(Tokenize) = %d", got, len(Tokenize(text)))
		}
	})
}

func TestAppendTokensAllocs(t *testing.T) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	dst := make([]uint32, 0, 1024)
	if a := testing.AllocsPerRun(100, func() { dst = AppendTokens(dst[:0], text) }); a != 0 {
		t.Errorf("AppendTokens allocates %v times, want 0", a)
	}
}

func BenchmarkTokenize(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200) // ~2k tokens
	dst := make([]uint32, 0, 4096)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendTokens(dst[:0], text)
	}
}
