package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/corpus"
	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
)

// TestData checks that the committed data hangs together: the tokenizer files are the ones
// PROVENANCE names, every golden file was computed from the committed corpus and covers all of
// it, and the corpus is as large as the issue asks.
func TestData(t *testing.T) {
	t.Parallel()
	corpusRaw := golden.Gunzip(t, "corpus.jsonl.gz")
	prompts := golden.Lines(corpusRaw)
	if len(prompts) < 10000 {
		t.Errorf("corpus has %d prompts, want >= 10000", len(prompts))
	}
	convRaw := golden.Gunzip(t, "conversations.jsonl.gz")
	convs := golden.Lines(convRaw)
	if len(convs) < 1000 {
		t.Errorf("conversations: %d, want >= 1000", len(convs))
	}
	for _, f := range golden.Families {
		t.Run(f.Dir, func(t *testing.T) {
			if got := golden.SHA256(golden.Gunzip(t, f.Dir+"/tokenizer.json.gz")); got != f.TokenizerSHA {
				t.Errorf("tokenizer.json sha256 = %s, want %s (PROVENANCE)", got, f.TokenizerSHA)
			}
			if got := golden.SHA256(golden.Gunzip(t, f.Dir+"/tokenizer_config.json.gz")); got != f.ConfigSHA {
				t.Errorf("tokenizer_config.json sha256 = %s, want %s (PROVENANCE)", got, f.ConfigSHA)
			}
			if _, err := os.Stat(golden.Path(f.Dir + "/LICENSE")); err != nil {
				t.Error(err)
			}
			var im golden.IDsMeta
			golden.ReadJSON(t, f.Dir+"/ids.meta.json", &im)
			if im.CorpusSHA256 != golden.SHA256(corpusRaw) || im.Prompts != len(prompts) || im.TokenizerSHA != f.TokenizerSHA {
				t.Errorf("ids.meta.json = %+v: stale for this corpus (%d prompts) or tokenizer; run scripts/gen-ids.cjs", im, len(prompts))
			}
			if n := len(golden.Lines(golden.Gunzip(t, f.Dir+"/ids.jsonl.gz"))); n != len(prompts) {
				t.Errorf("ids.jsonl.gz has %d lines, corpus %d prompts", n, len(prompts))
			}
			if !f.Template {
				if _, err := os.Stat(golden.Path(f.Dir + "/templates.jsonl.gz")); err == nil {
					t.Errorf("templates.jsonl.gz present for a family marked without chat template")
				}
				return
			}
			var tm golden.TemplatesMeta
			golden.ReadJSON(t, f.Dir+"/templates.meta.json", &tm)
			if tm.ConvSHA256 != golden.SHA256(convRaw) || tm.Conversations != len(convs) {
				t.Errorf("templates.meta.json = %+v: stale for these conversations; run scripts/gen-templates.py", tm)
			}
			if n := len(golden.Lines(golden.Gunzip(t, f.Dir+"/templates.jsonl.gz"))); n != len(convs) {
				t.Errorf("templates.jsonl.gz has %d lines, %d conversations", n, len(convs))
			}
		})
	}
}

// TestCorpusReproducible checks that the generator still writes the committed corpus byte for
// byte, so that goldens regenerated after `go run ./gencorpus` describe the same prompts.
func TestCorpusReproducible(t *testing.T) {
	t.Parallel()
	check := func(name string, n int, item func(int) any) {
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		for i := range n {
			if err := enc.Encode(item(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := golden.SHA256(buf.Bytes()), golden.SHA256(golden.Gunzip(t, name)); got != want {
			t.Errorf("%s: generator output sha256 %s, committed %s: run `go run ./gencorpus` and regenerate the goldens", name, got, want)
		}
	}
	prompts := corpus.Prompts(corpus.Seed)
	check("corpus.jsonl.gz", len(prompts), func(i int) any { return prompts[i] })
	convs := corpus.Conversations(corpus.Seed)
	check("conversations.jsonl.gz", len(convs), func(i int) any { return convs[i] })
}
