package main

import (
	"context"
	"strings"
	"testing"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer"
)

// TestTokenizerFlag: -tokenizer bytes (the default) or local:DIR reaches extproc.Options; a
// tokenizer that cannot be loaded is an error naming the directory and the file.
func TestTokenizerFlag(t *testing.T) {
	const dir = "../../proxy/tokenizer/testdata/bytelevel"
	c, err := parseConfig([]string{"-endpoints", "10.0.0.1:8000"})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := c.options(false); err != nil || o.Tokenizer != (proxy.BytesTokenizer{BlockBytes: 64}) {
		t.Errorf("default: Tokenizer %#v, %v; want BytesTokenizer{BlockBytes: 64}", o.Tokenizer, err)
	}
	c, err = parseConfig([]string{"-endpoints", "10.0.0.1:8000", "-tokenizer", "local:" + dir, "-block-size", "2"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.options(false)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := o.Tokenizer.(*tokenizer.Encoder)
	if !ok {
		t.Fatalf("-tokenizer local:DIR: Tokenizer is %T, want *tokenizer.Encoder", o.Tokenizer)
	}
	req, err := openai.Parse([]byte(`{"model":"m","prompt":"the hello world the world"}`), openai.Completions, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Tokenize(context.Background(), nil, req)
	if err != nil || p.BlockSize != 2 || len(p.Chain) != p.Tokens/2 {
		t.Errorf("Tokenize: %+v, %v; want blocks of -block-size 2", p, err)
	}
	for _, tc := range []struct {
		flag string
		want []string
	}{
		{"endpoint", []string{`"endpoint"`, "local:DIR"}},
		{"local:", []string{`"local:"`}},
		{"local:/does/not/exist", []string{"/does/not/exist", "tokenizer.json"}},
	} {
		_, err := parseConfig([]string{"-endpoints", "10.0.0.1:8000", "-tokenizer", tc.flag})
		if err == nil {
			t.Errorf("-tokenizer %s: no error", tc.flag)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("-tokenizer %s: %v; want it to name %s", tc.flag, err, s)
			}
		}
	}
}
