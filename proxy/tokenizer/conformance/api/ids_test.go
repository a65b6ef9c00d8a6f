package api

import (
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
)

// TestIDs holds Encode and EncodeSpecial to the reference's ids on every prompt of the corpus,
// for each family. Every mismatch is counted; the first few are shown with their text. The
// target is zero.
func TestIDs(t *testing.T) {
	ps := golden.Prompts(t)
	for _, f := range golden.Families {
		t.Run(f.Dir, func(t *testing.T) {
			m := encoder(t, f)
			goldens := golden.DecodeLines[golden.IDs](t, f.Dir+"/ids.jsonl.gz")
			if len(goldens) != len(ps) {
				t.Fatalf("%d goldens for %d prompts", len(goldens), len(ps))
			}
			const show = 5
			var bad, badSpecial, tokens int
			var dst []uint32
			for i, p := range ps {
				g := &goldens[i]
				tokens += len(g.IDs)
				dst = m.Encode(dst[:0], p)
				if !equal(dst, g.IDs) {
					if bad++; bad <= show {
						t.Errorf("Encode(prompt %d = %s): %s", i, golden.Quote(p), golden.FirstDiff(dst, g.IDs))
					}
				}
				want := g.WithSpecial()
				dst = m.EncodeSpecial(dst[:0], p)
				if !equal(dst, want) {
					if badSpecial++; badSpecial <= show {
						t.Errorf("EncodeSpecial(prompt %d = %s): %s", i, golden.Quote(p), golden.FirstDiff(dst, want))
					}
				}
			}
			t.Logf("%s: %d prompts, %d tokens; mismatches: Encode %d, EncodeSpecial %d", f.Dir, len(ps), tokens, bad, badSpecial)
			if bad+badSpecial > 0 {
				t.Errorf("%s: %d of %d prompts differ from the reference in Encode, %d in EncodeSpecial (want 0 and 0)", f.Dir, bad, len(ps), badSpecial)
			}
		})
	}
}
