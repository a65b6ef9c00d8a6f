// Command gencorpus writes the conformance corpus: testdata/corpus.jsonl.gz (one JSON string, a
// prompt, per line) and testdata/conversations.jsonl.gz (one JSON chat conversation per line).
// The output is deterministic for a seed; the committed files were written with the default.
//
// Usage, from the conformance module's directory:
//
//	go run ./gencorpus [-seed 44] [-out testdata]
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/corpus"
)

func main() {
	seed := flag.Uint64("seed", corpus.Seed, "generator seed")
	out := flag.String("out", "testdata", "output directory")
	flag.Parse()
	prompts := corpus.Prompts(*seed)
	if err := write(filepath.Join(*out, "corpus.jsonl.gz"), len(prompts), func(i int) any { return prompts[i] }); err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
	convs := corpus.Conversations(*seed)
	if err := write(filepath.Join(*out, "conversations.jsonl.gz"), len(convs), func(i int) any { return convs[i] }); err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
	fmt.Printf("gencorpus: %d prompts, %d conversations (seed %d)\n", len(prompts), len(convs), *seed)
}

// write writes n JSON values, one per line, gzip-compressed (no name or time in the header, so
// the file is reproducible byte for byte).
func write(path string, n int, item func(int) any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range n {
		if err := enc.Encode(item(i)); err != nil {
			return fmt.Errorf("%s: item %d: %w", path, i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
