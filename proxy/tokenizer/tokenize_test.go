package tokenizer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer"
)

// testConfig gives the byte-level test tokenizer a ChatML template that writes a BOS token.
const testConfig = `{"bos_token": "<bos>", "chat_template": "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}`

func testEncoder(t testing.TB, blockSize int) *tokenizer.Encoder {
	t.Helper()
	tj, err := os.ReadFile("testdata/bytelevel/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj, ConfigJSON: []byte(testConfig), BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func parse(t testing.TB, api openai.API, body string) *openai.Request {
	t.Helper()
	r, err := openai.Parse([]byte(body), api, openai.ParseLimits{})
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return r
}

// TestTokenizeLikeEndpoint checks Tokenize against proxy.EndpointTokenizer asking a real
// /tokenize over loopback that answers the ids of the rendering written out by hand: the same
// prompt, the same ids, the same chain.
func TestTokenizeLikeEndpoint(t *testing.T) {
	e := testEncoder(t, 4)
	const rendered = "<bos><|im_start|>system\nthe world<|im_end|>\n<|im_start|>user\nthe hello world, the hello world<|im_end|>\n<|im_start|>assistant\n"
	ids := e.Encode(nil, rendered)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids)})
	}))
	defer srv.Close()
	ep := &proxy.EndpointTokenizer{URLs: []string{srv.URL}, BlockSize: 4}

	req := parse(t, openai.Chat, `{"model":"m","messages":[{"role":"system","content":"the world"},{"role":"user","content":[{"type":"text","text":"the hello world, the hello world"}]}]}`)
	want, err := ep.Tokenize(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Tokenize(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Chain) == 0 {
		t.Fatalf("the endpoint's chain is empty (%d ids): the test says nothing", len(ids))
	}
	if got.Tokens != want.Tokens || got.BlockSize != want.BlockSize || !slices.Equal(got.Chain, want.Chain) {
		t.Errorf("Tokenize = %+v, EndpointTokenizer = %+v", got, want)
	}
	if ids[0] != 303 {
		t.Errorf("the rendering's ids start with %d, want the template's <bos> 303 (and no second one)", ids[0])
	}
}

func TestTokenizeAPIs(t *testing.T) {
	e := testEncoder(t, 2)
	chain := func(req *openai.Request, ids []uint32) []prefixcache.BlockHash {
		return prefixcache.HashTokens(nil, proxy.SeedOf(req), ids, 2)
	}
	for _, tc := range []struct {
		name string
		api  openai.API
		body string
		ids  func(req *openai.Request) []uint32
	}{
		{"completions text", openai.Completions, `{"model":"m","prompt":"the hello world the world"}`,
			func(*openai.Request) []uint32 { return e.EncodeSpecial(nil, "the hello world the world") }},
		{"completions one text in a list", openai.Completions, `{"model":"m","prompt":["the hello world"]}`,
			func(*openai.Request) []uint32 { return e.EncodeSpecial(nil, "the hello world") }},
		{"completions ids", openai.Completions, `{"model":"m","prompt":[1, 2,3 ,4,5]}`,
			func(*openai.Request) []uint32 { return []uint32{1, 2, 3, 4, 5} }},
		{"completions one list of ids", openai.Completions, `{"model":"m","prompt":[ [7,8,9,4294967295] ]}`,
			func(*openai.Request) []uint32 { return []uint32{7, 8, 9, 4294967295} }},
		{"messages", openai.Messages, `{"model":"m","max_tokens":5,"system":"the world","messages":[{"role":"user","content":"the hello"}]}`,
			func(*openai.Request) []uint32 {
				return e.Encode(nil, "<bos><|im_start|>system\nthe world<|im_end|>\n<|im_start|>user\nthe hello<|im_end|>\n<|im_start|>assistant\n")
			}},
		{"responses", openai.Responses, `{"model":"m","instructions":"the world","input":"the hello"}`,
			func(*openai.Request) []uint32 {
				return e.Encode(nil, "<bos><|im_start|>system\nthe world<|im_end|>\n<|im_start|>user\nthe hello<|im_end|>\n<|im_start|>assistant\n")
			}},
		{"chat without generation prompt", openai.Chat, `{"model":"m","add_generation_prompt":false,"messages":[{"role":"user","content":"the hello"}]}`,
			func(*openai.Request) []uint32 { return e.Encode(nil, "<bos><|im_start|>user\nthe hello<|im_end|>\n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := parse(t, tc.api, tc.body)
			ids := tc.ids(req)
			dst := make([]prefixcache.BlockHash, 1, 64) // Tokenize appends
			got, err := e.Tokenize(context.Background(), dst, req)
			if err != nil {
				t.Fatal(err)
			}
			want := append(dst[:1:1], chain(req, ids)...)
			if got.Tokens != len(ids) || got.BlockSize != 2 || !slices.Equal(got.Chain, want) {
				t.Errorf("got %+v, want Tokens %d, BlockSize 2, Chain %v", got, len(ids), want)
			}
		})
	}
}

func TestTokenizeRefuses(t *testing.T) {
	e := testEncoder(t, 0)
	noTemplate, err := tokenizer.New(tokenizer.Options{Dir: "testdata/bytelevel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		e    *tokenizer.Encoder
		api  openai.API
		body string
		want error
	}{
		{"several prompts", e, openai.Completions, `{"model":"m","prompt":["a","b"]}`, tokenizer.ErrNoConversation},
		{"several id lists", e, openai.Completions, `{"model":"m","prompt":[[1,2],[3]]}`, tokenizer.ErrNoConversation},
		{"id over 32 bits", e, openai.Completions, `{"model":"m","prompt":[4294967296]}`, tokenizer.ErrNoConversation},
		{"embeddings", e, openai.Embeddings, `{"model":"m","input":"the"}`, tokenizer.ErrNoConversation},
		{"previous response", e, openai.Responses, `{"model":"m","previous_response_id":"resp_1","input":"the"}`, tokenizer.ErrNoConversation},
		{"no chat template", noTemplate, openai.Chat, `{"model":"m","messages":[{"role":"user","content":"the"}]}`, tokenizer.ErrNoChatTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := parse(t, tc.api, tc.body)
			dst := make([]prefixcache.BlockHash, 2, 8)
			got, err := tc.e.Tokenize(context.Background(), dst, req)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if len(got.Chain) != 2 || got.Tokens != 0 {
				t.Errorf("on error: Chain %v, Tokens %d; want dst unchanged and 0", got.Chain, got.Tokens)
			}
		})
	}
}

func TestTokenizeBlockSize(t *testing.T) {
	req := parse(t, openai.Completions, `{"model":"m","prompt":[`+strings.Repeat("1,", 99)+`1]}`)
	for _, tc := range []struct{ opt, size, blocks int }{{0, 16, 6}, {1, 1, 100}, {32, 32, 3}, {101, 101, 0}} {
		got, err := testEncoder(t, tc.opt).Tokenize(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		if got.BlockSize != tc.size || len(got.Chain) != tc.blocks || got.Tokens != 100 {
			t.Errorf("BlockSize %d: got BlockSize %d, %d blocks, %d tokens; want %d, %d, 100", tc.opt, got.BlockSize, len(got.Chain), got.Tokens, tc.size, tc.blocks)
		}
	}
	if _, err := tokenizer.New(tokenizer.Options{Dir: "testdata/bytelevel", BlockSize: -1}); !errors.Is(err, tokenizer.ErrInvalidOptions) {
		t.Errorf("BlockSize -1: err = %v, want ErrInvalidOptions", err)
	}
}

// TestTokenizeAllocsSmall holds Tokenize to its budget on the test tokenizer, with a dst that
// has room: one allocation for a text prompt (its string), none for token ids.
func TestTokenizeAllocsSmall(t *testing.T) {
	e := testEncoder(t, 16)
	text := strings.Repeat("the hello world, ", 2000)
	ids := "[" + strings.Repeat("301,", 8191) + "302]"
	for _, tc := range []struct {
		name, body string
		want       float64
	}{
		{"text", `{"model":"m","prompt":"` + text + `"}`, 1},
		{"ids", `{"model":"m","prompt":` + ids + `}`, 0},
	} {
		req := parse(t, openai.Completions, tc.body)
		dst := make([]prefixcache.BlockHash, 0, 1024)
		p, err := e.Tokenize(context.Background(), dst, req)
		if err != nil || p.Tokens < 8000 {
			t.Fatalf("%s: %d tokens, %v", tc.name, p.Tokens, err)
		}
		if got := testing.AllocsPerRun(50, func() { _, _ = e.Tokenize(context.Background(), dst[:0], req) }); got > tc.want {
			t.Errorf("%s: Tokenize of %d tokens: %v allocations, want ≤ %v", tc.name, p.Tokens, got, tc.want)
		}
	}
}

// TestTokenizeAllocs holds Tokenize to the issue's budget — at most 2 allocations a request for
// an 8k-token prompt — on each family (USHER_TOKENIZERS).
func TestTokenizeAllocs(t *testing.T) {
	for _, name := range families {
		t.Run(name, func(t *testing.T) {
			e := family(t, name)
			req := completion(t, prompt(t, e, 8192))
			dst := make([]prefixcache.BlockHash, 0, 1024)
			if _, err := e.Tokenize(context.Background(), dst, req); err != nil {
				t.Fatal(err)
			}
			if got := testing.AllocsPerRun(20, func() { _, _ = e.Tokenize(context.Background(), dst[:0], req) }); got > 2 {
				t.Errorf("Tokenize of an 8k-token prompt: %v allocations, want ≤ 2", got)
			}
		})
	}
}

// completion is a Completions request with text as its prompt.
func completion(tb testing.TB, text string) *openai.Request {
	tb.Helper()
	body, err := json.Marshal(map[string]any{"model": "m", "prompt": text})
	if err != nil {
		tb.Fatal(err)
	}
	return parse(tb, openai.Completions, string(body))
}

// chat20 is a Chat request of 20 messages cut from text, user and assistant in turn from a
// user's (what every family's template accepts, Mistral's included).
func chat20(tb testing.TB, text string) *openai.Request {
	tb.Helper()
	msgs := make([]map[string]string, 20)
	per := len(text) / 20
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = map[string]string{"role": role, "content": text[i*per : (i+1)*per]}
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		tb.Fatal(err)
	}
	return parse(tb, openai.Chat, string(body))
}

// BenchmarkTokenize8k measures Tokenize on an 8k-token prompt per family: "rendered" is a
// Completions request holding the text (the Encode and hash part, the template already
// applied), "chat20" the whole Tokenize of a 20-message chat of about 8k tokens (conversion,
// template, Encode, hash). GPT-OSS has no chat template in its files: chat20 skips it.
func BenchmarkTokenize8k(b *testing.B) {
	for _, name := range families {
		b.Run(name, func(b *testing.B) {
			e := family(b, name)
			text := prompt(b, e, 8192)
			for _, bc := range []struct {
				name string
				req  *openai.Request
			}{{"rendered", completion(b, text)}, {"chat20", chat20(b, text)}} {
				b.Run(bc.name, func(b *testing.B) {
					dst := make([]prefixcache.BlockHash, 0, 1024)
					p, err := e.Tokenize(context.Background(), dst, bc.req)
					if err != nil {
						b.Skip(err)
					}
					b.ReportAllocs()
					for b.Loop() {
						p, _ = e.Tokenize(context.Background(), dst[:0], bc.req)
					}
					b.ReportMetric(float64(p.Tokens), "tokens")
				})
			}
		})
	}
}

// BenchmarkTokenizeEndpoint8k is the round trip the local encoder saves: the same 20-message
// chat of about 8k tokens tokenized by proxy.EndpointTokenizer through POST /tokenize of a
// simulated server over loopback. The simulated server tokenizes in Go, so this is a lower bound
// of a real engine's /tokenize, served by its Python API server beside the streams it relays.
func BenchmarkTokenizeEndpoint8k(b *testing.B) {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fleet.Close() })
	e := family(b, "qwen3")
	req := chat20(b, prompt(b, e, 8192))
	req.Model = "usher/demo" // the simulated server's
	tk := &proxy.EndpointTokenizer{URLs: fleet.URLs(), BlockSize: 16}
	dst := make([]prefixcache.BlockHash, 0, 1024)
	if _, err := tk.Tokenize(context.Background(), dst, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.Tokenize(context.Background(), dst[:0], req); err != nil {
			b.Fatal(err)
		}
	}
}

// An Encoder as the proxy's Tokenizer: the chained block hashes of a chat's rendered, encoded
// prompt, in blocks of Options.BlockSize tokens.
func ExampleEncoder_Tokenize() {
	tj, err := os.ReadFile("testdata/bytelevel/tokenizer.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := tokenizer.New(tokenizer.Options{TokenizerJSON: tj, ConfigJSON: []byte(testConfig), BlockSize: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	var tok proxy.Tokenizer = e
	req, err := openai.Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"the hello world"}]}`), openai.Chat, openai.ParseLimits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := tok.Tokenize(context.Background(), nil, req)
	fmt.Println(p.Tokens, p.BlockSize, len(p.Chain), err)
	// Output:
	// 22 4 5 <nil>
}
