package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
)

// tokenizeServer answers POST /tokenize with one token per byte of the request's messages (or
// prompt), once release is closed (nil: at once), counting the calls; status != 200 makes it
// fail.
func tokenizeServer(t *testing.T, release <-chan struct{}, status int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var in struct {
			Model    string          `json:"model"`
			Messages json.RawMessage `json:"messages"`
			Prompt   json.RawMessage `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Model == "" {
			http.Error(w, "bad tokenize request", http.StatusBadRequest)
			return
		}
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		if status != http.StatusOK {
			http.Error(w, "tokenizer down", status)
			return
		}
		text := append(in.Messages, in.Prompt...)
		tokens := make([]uint32, len(text))
		for i, c := range text {
			tokens[i] = uint32(c)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": tokens, "count": len(tokens)})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func chatRequest(t *testing.T, content string) *openai.Request {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}}})
	req, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	return req
}

func TestEndpointTokenizer(t *testing.T) {
	down, downCalls := tokenizeServer(t, nil, http.StatusInternalServerError)
	up, _ := tokenizeServer(t, nil, http.StatusOK)
	tk := &EndpointTokenizer{URLs: []string{down.URL, up.URL}, BlockSize: 4}
	req := chatRequest(t, "hello there, tokenizer")
	for range 2 { // from both rotating starts: the failing server is skipped either way
		p, err := tk.Tokenize(context.Background(), nil, req)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		tokens := make([]uint32, len(req.RawMessages))
		for i, c := range req.RawMessages {
			tokens[i] = uint32(c)
		}
		if !reflect.DeepEqual(p.Tokens, len(tokens)) {
			t.Errorf("prompt tokens: got %v, want %v", p.Tokens, len(tokens))
		}
		if !reflect.DeepEqual(p.BlockSize, 4) {
			t.Errorf("block size: got %v, want %v", p.BlockSize, 4)
		}
		if !reflect.DeepEqual(p.Chain, prefixcache.HashTokens(nil, SeedOf(req), tokens, 4)) {
			t.Errorf("chain: got %v, want %v", p.Chain, prefixcache.HashTokens(nil, SeedOf(req), tokens, 4))
		}
	}
	if downCalls.Load() == 0 {
		t.Errorf("the failing server was never tried: got 0")
	}

	only := &EndpointTokenizer{URLs: []string{down.URL}}
	_, err := only.Tokenize(context.Background(), nil, req)
	if !errors.Is(err, ErrTokenize) {
		t.Errorf("every server failing: error %v, want %v", err, ErrTokenize)
	}
	_, err = (&EndpointTokenizer{}).Tokenize(context.Background(), nil, req)
	if !errors.Is(err, ErrTokenize) {
		t.Errorf("no URLs: error %v, want %v", err, ErrTokenize)
	}
}

// TestEndpointTokenizerShares sends the same prompt from many goroutines at once: they share
// one /tokenize call, and a caller that gives up does not fail the others.
func TestEndpointTokenizerShares(t *testing.T) {
	release := make(chan struct{})
	srv, calls := tokenizeServer(t, release, http.StatusOK)
	tk := &EndpointTokenizer{URLs: []string{srv.URL}}
	req := chatRequest(t, "the same long system prompt")

	impatient, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan struct{})
	var started, wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i == 0 {
				ctx = impatient
			}
			started.Done()
			_, errs[i] = tk.Tokenize(ctx, nil, req)
			if i == 0 {
				close(gaveUp)
			}
		}()
	}
	started.Wait()
	for calls.Load() == 0 { // the one call reached the server, and holds there
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the callers join it while it is held
	cancel()
	<-gaveUp // the impatient caller leaves while the call is still held
	close(release)
	wg.Wait()
	if !errors.Is(errs[0], ErrTokenize) {
		t.Errorf("the cancelled caller: error %v, want %v", errs[0], ErrTokenize)
	}
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("the cancelled caller: error %v, want %v", errs[0], context.Canceled)
	}
	for i, err := range errs[1:] {
		if err != nil {
			t.Errorf("caller %d: another caller's cancel must not fail it: unexpected error: %v", i+1, err)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("/tokenize calls for 8 identical concurrent prompts: got %v, want %v", calls.Load(), 1)
	}
	// A different prompt is its own call.
	_, err := tk.Tokenize(context.Background(), nil, chatRequest(t, "another prompt"))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("calls after a second prompt: got %v, want %v", calls.Load(), 2)
	}
}

// TestTokenizeBody: a chat's tokenize request carries what the chat template renders besides
// the messages — the tools above all, which change the prompt's ids from its first blocks.
func TestTokenizeBody(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],` +
		`"chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":true,"max_tokens":5}`
	req, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(tokenizeBody(req), &got); err != nil {
		t.Fatalf("tokenize body %s: %v", tokenizeBody(req), err)
	}
	for _, k := range []string{"model", "messages", "tools", "chat_template_kwargs", "add_generation_prompt"} {
		if _, ok := got[k]; !ok {
			t.Errorf("tokenize body %s: no %q", tokenizeBody(req), k)
		}
	}
	for _, k := range []string{"max_tokens", "continue_final_message", "prompt"} {
		if _, ok := got[k]; ok {
			t.Errorf("tokenize body %s: %q, which the chat request did not have or /tokenize does not take", tokenizeBody(req), k)
		}
	}
}
