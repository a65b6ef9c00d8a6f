package tokenizer

import (
	"bytes"
	"context"
	"fmt"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

var _ proxy.Tokenizer = (*Encoder)(nil)

// tokBufs are the buffers of one Tokenize call: the prompt's ids, and its text (the rendered
// chat, or a Completions prompt unescaped). An Encoder keeps idle ones in a free list rather
// than a sync.Pool, which the collector empties — an 8k-token prompt makes garbage enough to
// run it often.
type tokBufs struct {
	ids  []uint32
	text []byte
}

// getBufs takes idle buffers, or makes new ones. O(1).
func (e *Encoder) getBufs() *tokBufs {
	select {
	case b := <-e.bufs:
		return b
	default:
		return &tokBufs{ids: make([]uint32, 0, 16<<10), text: make([]byte, 0, 64<<10)}
	}
}

// putBufs gives b back, unless the free list is full or b grew too large to keep. O(1).
func (e *Encoder) putBufs(b *tokBufs) {
	if cap(b.ids) > maxPooledIDs || cap(b.text) > maxPooledText {
		return
	}
	b.ids, b.text = b.ids[:0], b.text[:0]
	select {
	case e.bufs <- b:
	default:
	}
}

// Pooled buffers above these sizes are dropped rather than kept, so one huge prompt does not
// pin its buffers for the life of the process.
const (
	maxPooledIDs  = 1 << 20
	maxPooledText = 4 << 20
)

// Tokenize implements [proxy.Tokenizer]: it computes the token ids the engine computes for
// req's prompt and appends their chained block hashes to dst, blocks of Options.BlockSize
// tokens seeded with [proxy.SeedOf] — the hashes [proxy.EndpointTokenizer] computes from the
// ids a server's /tokenize returns, without the round trip.
//
// The prompt is built as vLLM builds it:
//
//   - Chat Completions, Messages and Responses: the conversation [Encoder.ConversationOf]
//     returns, rendered by [Encoder.RenderChat] (the generation prompt added unless the
//     request continues its last message), then [Encoder.Encode] — add_special_tokens=False,
//     as vLLM tokenizes chat prompts: the template writes the BOS token itself.
//   - Completions: a string prompt (or an array of one string) is encoded with
//     [Encoder.EncodeSpecial] (add_special_tokens=True, vLLM's default for completions); a
//     prompt of token ids (an array of integers, or an array of one such array) is hashed as
//     given.
//
// It returns an error, and dst unchanged in the Prompt's Chain, for a request whose prompt it
// cannot compute exactly: one wrapping [ErrNoConversation] for a chat vLLM does not render
// from what the router sees (previous_response_id, images, a request's own chat_template;
// see ConversationOf), for several Completions prompts at once, and for Embeddings;
// [ErrNoChatTemplate] for a chat when the model has none (GPT-OSS, which vLLM renders with
// Harmony); the template's error when it raises. The proxy's Handler and the endpoint picker
// (proxy/extproc) then hash that request's prompt by bytes, as [proxy.BytesTokenizer] does,
// and route it on that chain — which matches no engine's KV events, so such requests get
// approximate-mode affinity only. A Chat request's "add_special_tokens" is not read (vLLM's
// default, false, is assumed).
//
// Tokenize does not block and does not use ctx. It is safe for concurrent use. It runs in
// O(rendered prompt) time; with dst of room for the chain, a Completions text prompt costs
// one allocation (the prompt's string) and token ids none, buffers being pooled; a chat costs
// the allocations of ConversationOf and RenderChat besides.
func (e *Encoder) Tokenize(_ context.Context, dst []prefixcache.BlockHash, req *openai.Request) (proxy.Prompt, error) {
	b := e.getBufs()
	err := e.promptIDs(b, req)
	out := proxy.Prompt{Chain: dst, BlockSize: e.blockSize}
	if err == nil {
		out.Chain = prefixcache.HashTokens(dst, proxy.SeedOf(req), b.ids, e.blockSize)
		out.Tokens = len(b.ids)
	}
	e.putBufs(b)
	return out, err
}

// promptIDs sets b.ids to the ids of req's prompt, using b.text for its text.
func (e *Encoder) promptIDs(b *tokBufs, req *openai.Request) error {
	var err error
	switch req.API {
	case openai.Chat, openai.Messages, openai.Responses:
		var c *Conversation
		if c, err = e.ConversationOf(req); err != nil {
			return err
		}
		if b.text, err = e.RenderChat(b.text[:0], c); err != nil {
			return err
		}
		b.ids = e.Encode(b.ids[:0], string(b.text))
		return nil
	case openai.Completions:
		var ok bool
		if b.ids, ok = appendIDs(b.ids[:0], req.Prompt); ok {
			return nil
		}
		// AppendPrompt gives the prompt's text when it is a string or an array of one
		// string, and the raw JSON of the prompt otherwise: several prompts.
		b.text = req.AppendPrompt(b.text[:0])
		if bytes.Equal(b.text, req.Prompt) {
			return fmt.Errorf("%w: several prompts, or ids beyond 32 bits", ErrNoConversation)
		}
		b.ids = e.EncodeSpecial(b.ids[:0], string(b.text))
		return nil
	}
	return fmt.Errorf("%w: %s requests have no prompt to tokenize", ErrNoConversation, req.API)
}

// appendIDs appends the token ids of a Completions prompt given as ids — the raw JSON
// [1, 2, 3] or [[1, 2, 3]] — to dst. For anything else (text, several prompts) it returns
// dst as it was and false. O(len(raw)); it allocates only to grow dst.
func appendIDs(dst []uint32, raw []byte) ([]uint32, bool) {
	start := len(dst)
	fail := func() ([]uint32, bool) { return dst[:start], false }
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return fail()
	}
	i = skipSpace(raw, i+1)
	nested := i < len(raw) && raw[i] == '['
	if nested {
		i = skipSpace(raw, i+1)
	}
	if i < len(raw) && raw[i] == ']' { // an empty list
		return fail()
	}
	for {
		if i >= len(raw) || raw[i] < '0' || raw[i] > '9' {
			return fail()
		}
		var v uint64
		for ; i < len(raw) && raw[i] >= '0' && raw[i] <= '9'; i++ {
			if v = v*10 + uint64(raw[i]-'0'); v > 1<<32-1 {
				return fail()
			}
		}
		dst = append(dst, uint32(v))
		i = skipSpace(raw, i)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
			continue
		}
		break
	}
	if i >= len(raw) || raw[i] != ']' {
		return fail()
	}
	if nested {
		if i = skipSpace(raw, i+1); i >= len(raw) || raw[i] != ']' { // a second prompt, or junk
			return fail()
		}
	}
	if skipSpace(raw, i+1) != len(raw) {
		return fail()
	}
	return dst, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
