package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/usher-llm/usher/examples/simfleet"
	"github.com/usher-llm/usher/prefixcache"
)

// A Tokenizer turns a request's prompt into the chained block hashes the prefix index and the
// router work on. The gateway hashes once per request and passes the chain on.
//
// Which index mode each enables:
//
//   - bytesTokenizer hashes the rendered prompt's bytes. It needs no tokenizer and feeds the
//     approximate index (the router inserts a backend's blocks after routing there). Its
//     hashes cannot match a model server's KV events, which are over token ids.
//   - endpointTokenizer asks a model server's POST /tokenize (vLLM serves it) for the exact
//     token ids the engine will cache, chat template applied, and hashes those. This is the
//     only way to match KV events (exact mode), at the cost of one extra round trip.
//   - localTokenizer tokenizes in process. Here it is the simulated fleet's tokenizer, so the
//     gateway's hashes equal the simulated engines' exactly; with a real model, implement
//     Tokenizer over that model's tokenizer file.
type Tokenizer interface {
	// Chain appends the block hashes of the request's prompt to dst and returns them, with
	// the prompt's length in tokens (estimated in bytes mode) and the tokens per block.
	Chain(ctx context.Context, dst []prefixcache.BlockHash, req *chatRequest) (chain []prefixcache.BlockHash, promptTokens, blockSize int, err error)
}

// seedOf folds the model (and cache salt) into the first block, so different models never
// share entries.
func seedOf(req *chatRequest) prefixcache.BlockHash {
	return prefixcache.Seed(req.Model, "", req.CacheSalt)
}

// renderPrompt renders the prompt deterministically for byte hashing: chat messages as
// role, newline, content; completions as the prompt text.
func renderPrompt(req *chatRequest) []byte {
	if !req.chat {
		return []byte(req.promptText)
	}
	var b bytes.Buffer
	for _, m := range req.Messages {
		text, _ := m.Text()
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(text)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

type bytesTokenizer struct{ blockBytes int }

func (t bytesTokenizer) Chain(_ context.Context, dst []prefixcache.BlockHash, req *chatRequest) ([]prefixcache.BlockHash, int, int, error) {
	p := renderPrompt(req)
	// About four bytes per token for English text and code; the router uses the estimate only
	// to weigh uncached prefill work.
	tokensPerBlock := max(1, t.blockBytes/4)
	return prefixcache.HashBytes(dst, seedOf(req), p, t.blockBytes), max(1, len(p)/4), tokensPerBlock, nil
}

type localTokenizer struct{ blockSize int }

func (t localTokenizer) Chain(_ context.Context, dst []prefixcache.BlockHash, req *chatRequest) ([]prefixcache.BlockHash, int, int, error) {
	var text string
	if req.chat {
		var err error
		if text, err = simfleet.RenderChat(req.Messages, true); err != nil {
			return dst, 0, 0, err
		}
	} else {
		text = req.promptText
	}
	tokens := simfleet.Tokenize(text)
	return prefixcache.HashTokens(dst, seedOf(req), tokens, t.blockSize), len(tokens), t.blockSize, nil
}

// endpointTokenizer calls POST /tokenize on the backends in turn.
type endpointTokenizer struct {
	blockSize int
	client    *http.Client
	urls      []string
	next      atomic.Uint64
}

var errTokenize = errors.New("tokenize")

func (t *endpointTokenizer) Chain(ctx context.Context, dst []prefixcache.BlockHash, req *chatRequest) ([]prefixcache.BlockHash, int, int, error) {
	body := map[string]any{"model": req.Model}
	if req.chat {
		body["messages"] = req.Messages
	} else {
		body["prompt"] = req.promptText
	}
	data, err := json.Marshal(body)
	if err != nil {
		return dst, 0, 0, err
	}
	// Try each backend once, starting at a rotating position.
	start := t.next.Add(1)
	var lastErr error
	for i := range t.urls {
		u := t.urls[(start+uint64(i))%uint64(len(t.urls))]
		tokens, err := t.tokenize(ctx, u, data)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return prefixcache.HashTokens(dst, seedOf(req), tokens, t.blockSize), len(tokens), t.blockSize, nil
	}
	return dst, 0, 0, fmt.Errorf("%w: no backend tokenized the prompt: %v", errTokenize, lastErr)
}

func (t *endpointTokenizer) tokenize(ctx context.Context, base string, body []byte) ([]uint32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
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
