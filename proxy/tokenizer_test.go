package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	req, err := openai.Parse(body, openai.Chat, openai.Limits{})
	require.NoError(t, err)
	return req
}

func TestEndpointTokenizer(t *testing.T) {
	down, downCalls := tokenizeServer(t, nil, http.StatusInternalServerError)
	up, _ := tokenizeServer(t, nil, http.StatusOK)
	tk := &EndpointTokenizer{URLs: []string{down.URL, up.URL}, BlockSize: 4}
	req := chatRequest(t, "hello there, tokenizer")
	for range 2 { // from both rotating starts: the failing server is skipped either way
		p, err := tk.Tokenize(context.Background(), nil, req)
		require.NoError(t, err)
		tokens := make([]uint32, len(req.RawMessages))
		for i, c := range req.RawMessages {
			tokens[i] = uint32(c)
		}
		assert.Equal(t, len(tokens), p.Tokens, "prompt tokens")
		assert.Equal(t, 4, p.BlockSize, "block size")
		assert.Equal(t, prefixcache.HashTokens(nil, SeedOf(req), tokens, 4), p.Chain, "chain")
	}
	assert.NotZero(t, downCalls.Load(), "the failing server was never tried")

	only := &EndpointTokenizer{URLs: []string{down.URL}}
	_, err := only.Tokenize(context.Background(), nil, req)
	assert.ErrorIs(t, err, ErrTokenize, "every server failing")
	_, err = (&EndpointTokenizer{}).Tokenize(context.Background(), nil, req)
	assert.ErrorIs(t, err, ErrTokenize, "no URLs")
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
	assert.ErrorIs(t, errs[0], ErrTokenize, "the cancelled caller")
	assert.ErrorIs(t, errs[0], context.Canceled, "the cancelled caller")
	for i, err := range errs[1:] {
		assert.NoError(t, err, "caller %d: another caller's cancel must not fail it", i+1)
	}
	assert.EqualValues(t, 1, calls.Load(), "/tokenize calls for 8 identical concurrent prompts")
	// A different prompt is its own call.
	_, err := tk.Tokenize(context.Background(), nil, chatRequest(t, "another prompt"))
	require.NoError(t, err)
	assert.EqualValues(t, 2, calls.Load(), "calls after a second prompt")
}
