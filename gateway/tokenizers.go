package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer"
)

// tokenizers builds the Handler's Tokenizer: Tokenizer's, or, when Tokenizers names models'
// own, one that dispatches each request by its base model. urls are the backends' URLs, in
// c.Backends' order. A local tokenizer is loaded here, once per directory: a directory that
// does not hold a tokenizer it can load is an error naming it and the file.
func (c Config) tokenizers(urls []string) (proxy.Tokenizer, error) {
	loaded := map[string]*tokenizer.Encoder{}
	build := func(spec string, urls []string) (proxy.Tokenizer, error) {
		switch spec {
		case "bytes":
			return proxy.BytesTokenizer{BlockBytes: c.ByteBlock}, nil
		case "endpoint":
			return &proxy.EndpointTokenizer{URLs: urls, BlockSize: c.BlockSize, Client: &http.Client{Transport: proxyseam.DefaultTransport(), Timeout: 10 * time.Second}}, nil
		}
		dir, ok := strings.CutPrefix(spec, "local:")
		if !ok || dir == "" {
			return nil, fmt.Errorf("%w: tokenizer %q: want bytes, endpoint or local:DIR", proxy.ErrInvalidOptions, spec)
		}
		if e := loaded[dir]; e != nil {
			return e, nil
		}
		e, err := tokenizer.New(tokenizer.Options{Dir: dir, BlockSize: c.BlockSize})
		if err != nil {
			// New's error names the directory, and the file when one of them is at fault.
			return nil, fmt.Errorf("%w: tokenizer %q: %w", proxy.ErrInvalidOptions, spec, err)
		}
		loaded[dir] = e
		return e, nil
	}
	def, err := build(c.Tokenizer, urls)
	if err != nil || len(c.Tokenizers) == 0 {
		return def, err
	}
	t := &modelTokenizers{models: make(map[string]proxy.Tokenizer, len(c.Tokenizers)), def: def, bytes: proxy.BytesTokenizer{BlockBytes: c.ByteBlock}}
	for _, m := range slices.Sorted(maps.Keys(c.Tokenizers)) { // the first bad one, always the same
		var serving []string // the backends of m, for "endpoint"
		for i, b := range c.Backends {
			if len(b.Models) == 0 || slices.Contains(b.Models, m) {
				serving = append(serving, urls[i])
			}
		}
		if t.models[m], err = build(c.Tokenizers[m], serving); err != nil {
			return nil, fmt.Errorf("pool %q: %w", m, err)
		}
	}
	return t, nil
}

// modelTokenizers tokenizes each request with its base model's tokenizer (a LoRA adapter's
// request with its base model's), and the requests of other models with def. It is immutable
// and safe for concurrent use.
type modelTokenizers struct {
	models map[string]proxy.Tokenizer
	def    proxy.Tokenizer
	bytes  proxy.BytesTokenizer
}

// Tokenize implements proxy.Tokenizer. As the Handler does with its own EndpointTokenizer, a
// Messages or Responses request whose tokenizer asks servers' /tokenize (which takes only chat
// messages or a prompt) is hashed by bytes. O(1) besides the tokenizer's work.
func (t *modelTokenizers) Tokenize(ctx context.Context, dst []prefixcache.BlockHash, req *openai.Request) (proxy.Prompt, error) {
	base := req.Model
	if req.Adapter != "" {
		base = req.BaseModel
	}
	tok, ok := t.models[base]
	if !ok {
		tok = t.def
	}
	if _, ok := tok.(*proxy.EndpointTokenizer); ok && (req.API == openai.Messages || req.API == openai.Responses) {
		return t.bytes.Tokenize(ctx, dst, req)
	}
	return tok.Tokenize(ctx, dst, req)
}
