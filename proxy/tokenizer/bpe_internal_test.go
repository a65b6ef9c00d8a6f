package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMergeSmallHeap holds the two merge loops to one another: the scan of short words and
// the priority queue of long ones must merge in the same order.
func TestMergeSmallHeap(t *testing.T) {
	for _, dir := range []string{"testdata/bytelevel", "testdata/sentencepiece"} {
		e, err := New(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m := e.bpe
		rng := rand.New(rand.NewPCG(1, 2))
		const alphabet = "thelowrdinagé中▁ "
		runes := []rune(alphabet)
		for n := 0; n < 2000; n++ {
			w := make([]rune, 1+rng.IntN(smallWord/2))
			for i := range w {
				w[i] = runes[rng.IntN(len(runes))]
			}
			s := string(w)
			var syms []symbol
			if m.byteLevel {
				for i := 0; i < len(s); i++ {
					syms = append(syms, symbol{id: m.byteIDs[s[i]], size: 1})
				}
			} else {
				syms = m.runeSymbols(nil, s)
			}
			if len(syms) > smallWord {
				continue
			}
			small := m.mergeSmall(nil, slices.Clone(syms))
			for i := range syms {
				syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
			}
			syms[len(syms)-1].next = -1
			m.mergeAll(syms, nil)
			var heap []uint32
			for i := 0; i >= 0; i = int(syms[i].next) {
				heap = append(heap, syms[i].id)
			}
			if !slices.Equal(small, heap) {
				t.Fatalf("%s: %q: scan %v, queue %v", dir, s, small, heap)
			}
		}
	}
}

// TestSpaceSplit holds the cut at runs of "▁" to its claim: the ids are those of the whole
// stretch merged as one word (the reference's way), on random text.
func TestSpaceSplit(t *testing.T) {
	dirs := []string{"testdata/sentencepiece"}
	if root := os.Getenv("USHER_TOKENIZERS"); root != "" {
		dirs = append(dirs, filepath.Join(root, "mistral"))
	}
	for _, dir := range dirs {
		cut, err := New(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if !cut.spaceSplit {
			t.Fatalf("%s: the vocabulary should allow the cut", dir)
		}
		whole, _ := New(Options{Dir: dir})
		whole.spaceSplit = false
		rng := rand.New(rand.NewPCG(3, 4))
		words := []string{"the", "hello", "world", "in", "ing", "thing", " ", "  ", "\n", "é中", "Th", "x", "▁", "<s>"}
		for n := 0; n < 500; n++ {
			var b strings.Builder
			for k := rng.IntN(40); k >= 0; k-- {
				b.WriteString(words[rng.IntN(len(words))])
			}
			s := b.String()
			if got, want := cut.Encode(nil, s), whole.Encode(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%s: %q: cut %v, whole %v", dir, s, got, want)
			}
		}
	}
}
