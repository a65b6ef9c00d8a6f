package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestReferenceFiles compares Encode and EncodeSpecial with ids produced by the reference
// library, when TOKENIZER_REF_DIR (a model directory), TOKENIZER_REF_TEXTS (a JSON array of
// texts) and TOKENIZER_REF_IDS (a JSON array of [plain, special] id lists) are set. The
// conformance module runs the full corpus; this is for quick local checks.
func TestReferenceFiles(t *testing.T) {
	dir, textsFile, idsFile := os.Getenv("TOKENIZER_REF_DIR"), os.Getenv("TOKENIZER_REF_TEXTS"), os.Getenv("TOKENIZER_REF_IDS")
	if dir == "" || textsFile == "" || idsFile == "" {
		t.Skip("TOKENIZER_REF_DIR, TOKENIZER_REF_TEXTS and TOKENIZER_REF_IDS not set")
	}
	// tokenizer.json alone: the reference library does not read tokenizer_config.json.
	tj, err := os.ReadFile(dir + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{TokenizerJSON: tj})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	var ids [][2][]uint32
	for f, v := range map[string]any{textsFile: &texts, idsFile: &ids} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	bad := 0
	for i, text := range texts {
		plain := m.Encode(nil, text)
		special := m.EncodeSpecial(nil, text)
		if !slices.Equal(plain, ids[i][0]) || !slices.Equal(special, ids[i][1]) {
			bad++
			if bad <= 10 {
				t.Errorf("text %d %q:\n got %v\nwant %v\n got special %v\nwant special %v", i, text, plain, ids[i][0], special, ids[i][1])
			}
		}
	}
	t.Logf("%d texts, %d mismatches", len(texts), bad)
}
