package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
	"golang.org/x/sync/singleflight"
)

// Prompt is a request's prompt as the prefix index and the router see it.
type Prompt struct {
	// Chain is the prompt's chained block hashes.
	Chain []prefixcache.BlockHash
	// Tokens is the prompt's length in tokens (an estimate when the tokenizer has none).
	Tokens int
	// BlockSize is the tokens per block of Chain.
	BlockSize int
}

// A Tokenizer turns a request's prompt into the chained block hashes the prefix index and the
// router work on. The Handler calls it once per request and passes the chain on; nothing
// downstream hashes again. It must be safe for concurrent use.
//
// Which index mode each enables:
//
//   - BytesTokenizer hashes the rendered prompt's bytes. It needs no tokenizer and feeds the
//     approximate index (the router records a backend's blocks after routing there). Its
//     hashes cannot match a model server's KV events, which are over token ids.
//   - EndpointTokenizer asks a model server's POST /tokenize (vLLM and SGLang serve it) for
//     the exact token ids the engine will cache, chat template applied, and hashes them: the
//     way to match KV events (exact mode), at the cost of one round trip.
//   - Package proxy/tokenizer's Encoder computes the engine's token ids in process, from the
//     model's tokenizer.json and chat template, and hashes them as EndpointTokenizer does:
//     exact mode without the round trip.
//   - Your own, over your model's tokenizer, in process.
type Tokenizer interface {
	// Tokenize appends the block hashes of req's prompt to dst and returns the prompt.
	Tokenize(ctx context.Context, dst []prefixcache.BlockHash, req *openai.Request) (Prompt, error)
}

// SeedOf is the seed of a request's chain: the model, the LoRA adapter and vLLM's
// cache_salt folded into the first block, so that different models, adapters (and salts)
// never share entries, as the engine keys its cache. A request naming an adapter is seeded
// with its base model and the adapter (Request.BaseModel and Adapter, which the Handler
// sets), as KV events key the adapter's blocks. Tokenizers use it.
func SeedOf(req *openai.Request) prefixcache.BlockHash {
	if req.Adapter != "" {
		return prefixcache.Seed(req.BaseModel, req.Adapter, req.CacheSalt)
	}
	return prefixcache.Seed(req.Model, "", req.CacheSalt)
}

// BytesTokenizer hashes the rendered prompt (openai.Request.AppendPrompt) in blocks of
// BlockBytes bytes. It is safe for concurrent use and allocates nothing in steady state.
type BytesTokenizer struct {
	// BlockBytes is bytes per block. Zero: 64 (about 16 tokens of English text or code).
	BlockBytes int
}

var promptBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// Tokenize implements Tokenizer. Tokens is estimated at four bytes per token; the router
// uses it only to weigh uncached prefill work. O(prompt bytes).
func (t BytesTokenizer) Tokenize(_ context.Context, dst []prefixcache.BlockHash, req *openai.Request) (Prompt, error) {
	bb := t.BlockBytes
	if bb <= 0 {
		bb = 64
	}
	bp := promptBufs.Get().(*[]byte)
	p := req.AppendPrompt((*bp)[:0])
	out := Prompt{
		Chain:     prefixcache.HashBytes(dst, SeedOf(req), p, bb),
		Tokens:    max(1, len(p)/4),
		BlockSize: max(1, bb/4),
	}
	if cap(p) <= 4<<20 { // keep pooled buffers bounded
		*bp = p[:0]
		promptBufs.Put(bp)
	}
	return out, nil
}

// EndpointTokenizer asks model servers' POST /tokenize for the prompt's token ids and hashes
// them in blocks of BlockSize tokens. It tries the URLs in turn from a rotating start. It is
// safe for concurrent use.
type EndpointTokenizer struct {
	// URLs are the servers' base URLs (http://host:port).
	URLs []string
	// BlockSize is the engines' block size (vLLM --block-size). Zero: 16.
	BlockSize int
	// Client sends the requests. Nil: a client with a 10 s timeout. Each call is also bound
	// by the request's context.
	Client *http.Client

	next  atomic.Uint64
	calls singleflight.Group // identical prompts tokenizing at once share one round trip
}

// tokenizeTimeout bounds one shared tokenize call, every server tried included.
const tokenizeTimeout = 10 * time.Second

// tokenizeClient is EndpointTokenizer's client when it names none.
var tokenizeClient = &http.Client{Timeout: tokenizeTimeout}

// ErrTokenize is returned (wrapped) when no server tokenized the prompt.
var ErrTokenize = errors.New("proxy: tokenize")

// Tokenize implements Tokenizer. Concurrent calls for the same prompt (the same model and
// messages or prompt: a fan-out's siblings, a retried request) share one round trip, which
// runs detached from any one caller's cancellation and is bounded by 10 s (and the client's
// own timeout); each caller still stops waiting when its own context ends.
func (t *EndpointTokenizer) Tokenize(ctx context.Context, dst []prefixcache.BlockHash, req *openai.Request) (Prompt, error) {
	if len(t.URLs) == 0 {
		return Prompt{Chain: dst}, fmt.Errorf("%w: no URLs", ErrTokenize)
	}
	body := tokenizeBody(req)
	bs := t.BlockSize
	if bs <= 0 {
		bs = 16
	}
	key := strconv.FormatUint(xxhash.Sum64(body), 16) + "/" + strconv.Itoa(len(body))
	shared := context.WithoutCancel(ctx)
	ch := t.calls.DoChan(key, func() (any, error) {
		c, cancel := context.WithTimeout(shared, tokenizeTimeout)
		defer cancel()
		return t.tokenizeAny(c, body)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Prompt{Chain: dst}, r.Err
		}
		tokens := r.Val.([]uint32) // shared by the callers: only read
		return Prompt{Chain: prefixcache.HashTokens(dst, SeedOf(req), tokens, bs), Tokens: len(tokens), BlockSize: bs}, nil
	case <-ctx.Done():
		return Prompt{Chain: dst}, fmt.Errorf("%w: %w", ErrTokenize, context.Cause(ctx))
	}
}

// tokenizeAny asks the servers in turn, from a rotating start, until one tokenizes body.
func (t *EndpointTokenizer) tokenizeAny(ctx context.Context, body []byte) ([]uint32, error) {
	start := t.next.Add(1)
	var lastErr error
	for i := range t.URLs {
		u := t.URLs[(start+uint64(i))%uint64(len(t.URLs))]
		tokens, err := t.tokenize(ctx, u, body)
		if err == nil {
			return tokens, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("%w: no server tokenized the prompt: %v", ErrTokenize, lastErr)
}

// tokenizeBody is vLLM's tokenize request for req: the chat messages as received (so the
// server applies its chat template to exactly what it will serve), with the fields of the
// chat request its template also renders (tools, chat_template_kwargs, add_generation_prompt,
// continue_final_message: vLLM's tokenize request takes them alike), or the prompt.
func tokenizeBody(req *openai.Request) []byte {
	b := make([]byte, 0, len(req.Body)+64)
	model, _ := json.Marshal(req.Model)
	b = append(b, `{"model":`...)
	b = append(b, model...)
	if req.API == openai.Chat {
		b = append(b, `,"messages":`...)
		b = append(b, req.RawMessages...)
		var rendered struct {
			Tools                json.RawMessage `json:"tools"`
			ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
			AddGenerationPrompt  json.RawMessage `json:"add_generation_prompt"`
			ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
		}
		// The body was parsed and validated already; a field that does not decode is left out.
		_ = json.Unmarshal(req.Body, &rendered)
		for _, f := range []struct {
			name string
			v    json.RawMessage
		}{{"tools", rendered.Tools}, {"chat_template_kwargs", rendered.ChatTemplateKwargs},
			{"add_generation_prompt", rendered.AddGenerationPrompt}, {"continue_final_message", rendered.ContinueFinalMessage}} {
			if len(f.v) > 0 && string(f.v) != "null" {
				b = append(b, `,"`...)
				b = append(b, f.name...)
				b = append(b, `":`...)
				b = append(b, f.v...)
			}
		}
	} else {
		b = append(b, `,"prompt":`...)
		b = append(b, req.Prompt...)
	}
	return append(b, '}')
}

func (t *EndpointTokenizer) tokenize(ctx context.Context, base string, body []byte) ([]uint32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	c := t.Client
	if c == nil {
		c = tokenizeClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s/tokenize: %s: %s", base, resp.Status, bytes.TrimSpace(msg))
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s/tokenize: %w", base, err)
	}
	return out.Tokens, nil
}
