package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/quota"
)

// quotaHandler serves the simulated fleet behind a Limiter of limits.
func quotaHandler(t *testing.T, limits ...quota.Limit) string {
	t.Helper()
	fleet := startFleet(t, 1)
	l, err := quota.New(quota.Options{Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(backendsOf(fleet))
	opts.Quota = l
	_, base := startHandler(t, opts)
	return base
}

// freshWindow waits until just after the start of a window of span (windows are aligned to
// the Unix epoch), so that a test's few requests fall in one window.
func freshWindow(span time.Duration) {
	now := time.Now()
	time.Sleep(now.Truncate(span).Add(span + 20*time.Millisecond).Sub(now))
}

// statuses records the status of every attempt a client makes.
type statuses struct {
	mu  sync.Mutex
	got []int
}

func (s *statuses) record(code int) {
	s.mu.Lock()
	s.got = append(s.got, code)
	s.mu.Unlock()
}

func (s *statuses) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.got
	s.got = nil
	return out
}

// The OpenAI SDK reads the x-ratelimit-* headers and, refused with 429, waits the
// Retry-After the window's refill gives and succeeds in the next window.
func TestQuotaOpenAISDKRetriesAfterRefill(t *testing.T) {
	const span = 2 * time.Second
	base := quotaHandler(t, quota.Limit{Window: span, Requests: 2, Tokens: 100000})
	var seen statuses
	c := client(base, option.WithMaxRetries(2), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if err == nil {
			seen.record(resp.StatusCode)
		}
		return resp, err
	}))
	ctx := context.Background()
	params := oa.ChatCompletionNewParams{Model: model, MaxTokens: oa.Int(8),
		Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hello there")}}
	freshWindow(span)
	start := time.Now()
	for i, wantRemaining := range []string{"1", "0"} {
		var resp *http.Response
		if _, err := c.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		h := resp.Header
		if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != wantRemaining ||
			h.Get("x-ratelimit-limit-tokens") != "100000" || h.Get("x-ratelimit-remaining-tokens") == "" {
			t.Fatalf("request %d: headers %v, want limit 2 and %s remaining requests", i, h, wantRemaining)
		}
		if d, err := time.ParseDuration(h.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > span {
			t.Fatalf("request %d: x-ratelimit-reset-requests %q: want a duration in (0, %v]", i, h.Get("x-ratelimit-reset-requests"), span)
		}
		t.Logf("request %d: x-ratelimit-limit-requests %s, -remaining-requests %s, -reset-requests %s, -limit-tokens %s, -remaining-tokens %s, -reset-tokens %s",
			i, h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"), h.Get("x-ratelimit-reset-requests"),
			h.Get("x-ratelimit-limit-tokens"), h.Get("x-ratelimit-remaining-tokens"), h.Get("x-ratelimit-reset-tokens"))
	}
	seen.take()
	if _, err := c.Chat.Completions.New(ctx, params); err != nil {
		t.Fatalf("third request, with retries: %v", err)
	}
	if got := seen.take(); len(got) != 2 || got[0] != http.StatusTooManyRequests || got[1] != http.StatusOK {
		t.Fatalf("third request's attempts answered %v, want [429 200]", got)
	}
	if el := time.Since(start); el < span-50*time.Millisecond {
		t.Fatalf("the retry succeeded after %v, before the window refilled (%v)", el, span)
	}
}

// A refusal is an OpenAI rate_limit_error naming the limit, with Retry-After and the headers,
// at once (without waiting in the queue).
func TestQuotaRefusalBody(t *testing.T) {
	base := quotaHandler(t, quota.Limit{Window: time.Hour, Tokens: 50})
	body := `{"model":"usher/demo","max_tokens":40,"messages":[{"role":"user","content":"a prompt long enough to pass fifty tokens together with its max_tokens"}]}`
	resp, e := post(t, base+"/v1/chat/completions", body, nil)
	if resp.StatusCode != http.StatusTooManyRequests || e.Type != "rate_limit_error" || e.Code != "rate_limit_exceeded" ||
		!strings.Contains(e.Message, "tokens per 1h0m0s") {
		t.Fatalf("status %d, error %+v: want 429 rate_limit_error naming tokens per 1h0m0s", resp.StatusCode, e)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("Retry-After %q: want 1..3600 seconds", resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("x-ratelimit-limit-tokens") != "50" || resp.Header.Get("x-ratelimit-remaining-tokens") != "50" {
		t.Fatalf("headers %v: want tokens limit 50, remaining 50", resp.Header)
	}
	t.Logf("429: Retry-After %s, message %q", resp.Header.Get("Retry-After"), e.Message)
}

// Every OpenAI API of the pipeline carries the x-ratelimit-* headers.
func TestQuotaHeadersOnEveryOpenAIAPI(t *testing.T) {
	base := quotaHandler(t, quota.Limit{Window: time.Hour, Requests: 100, Tokens: 1000000})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"usher/demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"model":"usher/demo","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/completions", `{"model":"usher/demo","max_tokens":4,"prompt":"hi"}`},
		{"/v1/responses", `{"model":"usher/demo","max_output_tokens":4,"input":"hi"}`},
		{"/v1/embeddings", `{"model":"usher/demo","input":"hi"}`},
	} {
		resp, e := post(t, base+c.path, c.body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %+v", c.path, resp.StatusCode, e)
		}
		for _, k := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
			"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
			if resp.Header.Get(k) == "" {
				t.Errorf("%s: no %s", c.path, k)
			}
		}
		t.Logf("%s: remaining requests %s, tokens %s, reset tokens %s", c.path, resp.Header.Get("x-ratelimit-remaining-requests"),
			resp.Header.Get("x-ratelimit-remaining-tokens"), resp.Header.Get("x-ratelimit-reset-tokens"))
	}
}

// Anthropic's SDK sees the anthropic-ratelimit-* headers (resets as RFC 3339 times) and
// retries a 429 — Anthropic's error shape, with retry-after — after the window's refill.
func TestQuotaAnthropicSDKRetriesAfterRefill(t *testing.T) {
	const span = 2 * time.Second
	base := quotaHandler(t, quota.Limit{Window: span, Requests: 1, Tokens: 100000, InputTokens: 50000, OutputTokens: 10000})
	// The refusal itself, without the SDK.
	freshWindow(span)
	body := `{"model":"usher/demo","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	if resp, _ := post(t, base+"/v1/messages", body, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("first message: %d", resp.StatusCode)
	}
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var shape struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(data, &shape) != nil || shape.Type != "error" ||
		shape.Error.Type != "rate_limit_error" || !strings.Contains(shape.Error.Message, "requests") || resp.Header.Get("retry-after") == "" {
		t.Fatalf("second message: %d %s (retry-after %q): want Anthropic's rate_limit_error with retry-after", resp.StatusCode, data, resp.Header.Get("retry-after"))
	}
	t.Logf("Anthropic 429: retry-after %s, body %s", resp.Header.Get("retry-after"), data)

	var seen statuses
	c := anthropic.NewClient(aoption.WithBaseURL(base+"/"), aoption.WithAPIKey("test-key"), aoption.WithMaxRetries(2),
		aoption.WithMiddleware(func(r *http.Request, next aoption.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if err == nil {
				seen.record(resp.StatusCode)
			}
			return resp, err
		}))
	freshWindow(span)
	params := anthropic.MessageNewParams{Model: model, MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	var hresp *http.Response
	if _, err := c.Messages.New(context.Background(), params, aoption.WithResponseInto(&hresp)); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		p := "anthropic-ratelimit-" + kind
		reset, err := time.Parse(time.RFC3339, hresp.Header.Get(p+"-reset"))
		if hresp.Header.Get(p+"-limit") == "" || hresp.Header.Get(p+"-remaining") == "" || err != nil ||
			reset.Before(time.Now().Add(-time.Second)) || reset.After(time.Now().Add(span+time.Second)) {
			t.Fatalf("%s headers: limit %q, remaining %q, reset %q", p, hresp.Header.Get(p+"-limit"), hresp.Header.Get(p+"-remaining"), hresp.Header.Get(p+"-reset"))
		}
		t.Logf("%s-limit %s, -remaining %s, -reset %s", p, hresp.Header.Get(p+"-limit"), hresp.Header.Get(p+"-remaining"), hresp.Header.Get(p+"-reset"))
	}
	seen.take()
	if _, err := c.Messages.New(context.Background(), params); err != nil {
		var ae *anthropic.Error
		errors.As(err, &ae)
		t.Fatalf("second message, with retries: %v", err)
	}
	if got := seen.take(); len(got) != 2 || got[0] != http.StatusTooManyRequests || got[1] != http.StatusOK {
		t.Fatalf("second message's attempts answered %v, want [429 200]", got)
	}
}

// exactStub is a chat backend that reports, as usage, the prompt as the gateway estimates it
// (proxy.BytesTokenizer) and a random answer length up to max_tokens (1..300 without one),
// streamed or whole, and sums what it reported.
type exactStub struct {
	mu      sync.Mutex
	rng     *rand.Rand
	settled int64 // prompt + completion tokens of every answer
	answers int
}

func (s *exactStub) chat(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p, _ := proxy.BytesTokenizer{}.Tokenize(r.Context(), nil, req)
	s.mu.Lock()
	maxOut := req.MaxTokens
	if maxOut == 0 {
		maxOut = 300
	}
	out := 1 + s.rng.IntN(maxOut)
	s.settled += int64(p.Tokens + out)
	s.answers++
	s.mu.Unlock()
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, p.Tokens, out, p.Tokens+out)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"length"}],"usage":%s}`,
			strings.Repeat("x", out), usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for range min(out, 8) {
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}`+"\n\n")
	}
	fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":%s}`+"\n\n", usage)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// On one gateway, with a limit of half the tokens offered in a window, the tokens settled
// (what the backend reported used) never pass the limit by more than one request's
// reservation: not at all when every request gives max_tokens, streamed or not.
func TestQuotaExactOnOneGateway(t *testing.T) {
	for _, c := range []struct {
		name      string
		maxTokens int // 0: none given, the Limiter reserves its learned expectation
	}{{"max-tokens", 100}, {"learned", 0}} {
		t.Run(c.name, func(t *testing.T) {
			stub := &exactStub{rng: rand.New(rand.NewPCG(1, 2))}
			backend := fakeBackend(t, stub.chat)
			// Requests and their reservations, as the gateway will estimate them.
			const n = 300
			bodies := make([]string, n)
			var offered, largest int64
			for i := range bodies {
				mt := ""
				if c.maxTokens > 0 {
					mt = fmt.Sprintf(`"max_tokens":%d,`, c.maxTokens)
				}
				bodies[i] = fmt.Sprintf(`{"model":"m",%s"stream":%v,"messages":[{"role":"user","content":"request %d: %s"}]}`,
					mt, i%2 == 0, i, strings.Repeat("words ", 20+i%40))
				req, err := openai.Parse([]byte(bodies[i]), openai.Chat, openai.ParseLimits{})
				if err != nil {
					t.Fatal(err)
				}
				p, _ := proxy.BytesTokenizer{}.Tokenize(context.Background(), nil, req)
				reserve := int64(p.Tokens + max(c.maxTokens, 150)) // 150: the mean answer without max_tokens
				offered += reserve
				largest = max(largest, int64(p.Tokens+max(c.maxTokens, 300)))
			}
			limit := offered / 2
			l, err := quota.New(quota.Options{Limits: []quota.Limit{{Window: time.Hour, Tokens: limit}}})
			if err != nil {
				t.Fatal(err)
			}
			_, base := startHandler(t, proxy.Options{Backends: []proxy.Backend{{URL: backend.URL}}, Quota: l, ScrapeInterval: 20 * time.Millisecond})
			if untilHour := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); untilHour < time.Minute {
				time.Sleep(untilHour + 10*time.Millisecond) // the whole run in one window
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			codes := map[int]int{}
			next := make(chan string)
			for range 16 {
				wg.Go(func() {
					for body := range next {
						resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
						if err != nil {
							t.Error(err)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						codes[resp.StatusCode]++
						mu.Unlock()
					}
				})
			}
			for _, b := range bodies {
				next <- b
			}
			close(next)
			wg.Wait()
			stub.mu.Lock()
			settled, answers := stub.settled, stub.answers
			stub.mu.Unlock()
			bound := limit
			if c.maxTokens == 0 {
				bound += largest
			}
			t.Logf("offered %d tokens in %d requests, limit %d: %d answered (%v), %d tokens settled (%.1f%% of the limit; bound %d)",
				offered, n, limit, answers, codes, settled, 100*float64(settled)/float64(limit), bound)
			if settled > bound {
				t.Fatalf("settled %d tokens, over the limit %d by %d: more than one reservation (%d)", settled, limit, settled-limit, largest)
			}
			if codes[http.StatusOK] != answers || codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK]+codes[http.StatusTooManyRequests] != n {
				t.Fatalf("answers %v (backend answered %d): want only 200s and 429s, some of each", codes, answers)
			}
		})
	}
}

// A streamed request cancelled by its client settles what it used — its prompt and the chunks
// relayed, counted from the stream since the backend reported no usage — not its reservation
// of max_tokens.
func TestQuotaCancelledStreamSettlesUse(t *testing.T) {
	estimate := func(body string) int64 {
		req, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := proxy.BytesTokenizer{}.Tokenize(context.Background(), nil, req)
		return int64(p.Tokens)
	}
	backend := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := openai.Parse(body, openai.Chat, openai.ParseLimits{})
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`,
				estimate(string(body)), estimate(string(body))+1)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range req.MaxTokens { // no usage: the gateway counts the chunks
			if _, err := fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}`+"\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	const limit = 100000
	l, err := quota.New(quota.Options{Limits: []quota.Limit{{Window: time.Hour, Tokens: limit}}})
	if err != nil {
		t.Fatal(err)
	}
	h, base := startHandler(t, proxy.Options{Backends: []proxy.Backend{{URL: backend.URL}}, Quota: l, ScrapeInterval: 20 * time.Millisecond})
	if untilHour := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); untilHour < 30*time.Second {
		time.Sleep(untilHour + 10*time.Millisecond)
	}
	stream := `{"model":"m","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"tell me a long story, please"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(stream))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != strconv.FormatInt(limit-estimate(stream)-1000, 10) {
		t.Fatalf("remaining tokens while streaming %s, want %d (the reservation of prompt and max_tokens held)", got, limit-estimate(stream)-1000)
	}
	buf := make([]byte, 1)
	for seen := 0; seen < 5; {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		if buf[0] == '\n' {
			seen++ // two newlines an event
		}
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the cancelled stream to settle", func() bool { return settled(h) })

	probe := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	presp, e := post(t, base+"/v1/chat/completions", probe, nil)
	if presp.StatusCode != http.StatusOK {
		t.Fatalf("probe: %d %+v", presp.StatusCode, e)
	}
	remaining, _ := strconv.ParseInt(presp.Header.Get("x-ratelimit-remaining-tokens"), 10, 64)
	used := limit - remaining - (estimate(probe) + 1) // what the cancelled stream settled to
	t.Logf("the cancelled stream reserved %d tokens and settled to %d (prompt %d and the chunks relayed)", estimate(stream)+1000, used, estimate(stream))
	if used <= estimate(stream) || used > estimate(stream)+50 {
		t.Fatalf("the cancelled stream settled to %d tokens, want its prompt (%d) and the few chunks it got", used, estimate(stream))
	}
}
