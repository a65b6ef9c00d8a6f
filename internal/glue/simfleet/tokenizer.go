package simfleet

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

// Tokenizer is a proxy.Tokenizer over the simulated model's tokenizer and chat template, so
// a gateway in front of a simulated fleet hashes exactly the token ids the simulated engines
// cache, and its prefix index can follow their KV events (exact mode). It is safe for
// concurrent use.
type Tokenizer struct {
	// BlockSize is the engines' tokens per block. Zero: 16.
	BlockSize int
}

var _ proxy.Tokenizer = Tokenizer{}

var tokenBufs = sync.Pool{New: func() any { s := make([]uint32, 0, 8192); return &s }}

// Tokenize implements proxy.Tokenizer: chat messages rendered with the simulated chat
// template (generation prompt added), a completions prompt as text or token ids, Messages and
// Responses bodies as the simulated server renders them (RenderMessages, RenderResponses),
// embeddings not at all (they are routed by load). O(prompt).
func (t Tokenizer) Tokenize(_ context.Context, dst []prefixcache.BlockHash, req *openai.Request) (proxy.Prompt, error) {
	bs := t.BlockSize
	if bs <= 0 {
		bs = 16
	}
	bp := tokenBufs.Get().(*[]uint32)
	defer tokenBufs.Put(bp)
	tokens := (*bp)[:0]
	switch text, ok := req.PromptText(); {
	case req.API == openai.Messages || req.API == openai.Responses:
		render := RenderMessages
		if req.API == openai.Responses {
			render = RenderResponses // without the stored history of a previous response
		}
		rendered, err := render(req.Body)
		if err != nil {
			return proxy.Prompt{Chain: dst}, err
		}
		tokens = AppendTokens(tokens, rendered)
	case req.API == openai.Embeddings:
		*bp = tokens[:0]
		return proxy.Prompt{Chain: dst, Tokens: max(1, len(req.Input)/4)}, nil
	case req.API == openai.Chat:
		msgs := make([]Message, len(req.Messages))
		for i, m := range req.Messages {
			msgs[i] = Message{Role: m.Role, Content: m.Content}
		}
		rendered, err := RenderChat(msgs, true)
		if err != nil {
			return proxy.Prompt{Chain: dst}, err
		}
		tokens = AppendTokens(tokens, rendered)
	case ok:
		tokens = AppendTokens(tokens, text)
	default:
		if err := json.Unmarshal(req.Prompt, &tokens); err != nil {
			return proxy.Prompt{Chain: dst}, errors.New("simfleet: the prompt is neither text nor one list of token ids")
		}
	}
	*bp = tokens[:0]
	return proxy.Prompt{Chain: prefixcache.HashTokens(dst, proxy.SeedOf(req), tokens, bs), Tokens: len(tokens), BlockSize: bs}, nil
}
