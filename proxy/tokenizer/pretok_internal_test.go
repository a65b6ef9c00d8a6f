package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestScanners compares each scanner's pieces with the reference library's Split
// pre-tokenizer over the same pattern (testdata/reference.json).
func TestScanners(t *testing.T) {
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Pretok map[string]struct {
			Pattern string `json:"pattern"`
			Cases   []struct {
				Text   string   `json:"text"`
				Pieces []string `json:"pieces"`
			} `json:"cases"`
		} `json:"pretok"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Pretok) != 7 {
		t.Fatalf("reference has %d patterns, want 7", len(ref.Pretok))
	}
	for name, p := range ref.Pretok {
		sp, err := scannerFor(p.Pattern)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, c := range p.Cases {
			if got := pieces(sp, c.Text); !slices.Equal(got, c.Pieces) {
				t.Errorf("%s: %q\n got %q\nwant %q", name, c.Text, got, c.Pieces)
			}
		}
	}
}

// pieces splits s as a Split pre-tokenizer with behaviour Isolated does.
func pieces(sp split, s string) []string {
	var out []string
	gap := 0
	for i := 0; i < len(s); {
		if sp.first != nil && !sp.first[s[i]] {
			i++
			continue
		}
		e := sp.scan(s, i)
		if e <= i {
			_, n := at(s, i)
			i += n
			continue
		}
		if gap < i {
			out = append(out, s[gap:i])
		}
		out = append(out, s[i:e])
		i, gap = e, e
	}
	if gap < len(s) {
		out = append(out, s[gap:])
	}
	return out
}
