package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/examples/simfleet"
	"github.com/usher-llm/usher/prefixcache"
)

const model = "usher/demo"

// startFleet starts n simulated vLLM servers on loopback.
func startTestFleet(t *testing.T, n int) *simfleet.Fleet {
	t.Helper()
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return fleet
}

// startTestGateway serves a gateway over the backends on a loopback port.
func startTestGateway(t *testing.T, cfg Config, backends []Backend) (*gateway, string) {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(cfg, backends)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		g.Close()
		cancel()
		<-done
	})
	return g, srv.URL
}

func testConfig() Config {
	cfg := defaultConfig()
	cfg.Tokenizer = "local"
	cfg.ScrapeInterval = 20 * time.Millisecond
	return cfg
}

func fleetBackends(f *simfleet.Fleet) []Backend {
	var bs []Backend
	for _, u := range f.URLs() {
		bs = append(bs, Backend{URL: u, Engine: "vllm"})
	}
	return bs
}

func client(base string, opts ...option.RequestOption) openai.Client {
	opts = append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
	}, opts...)
	return openai.NewClient(opts...)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled reports whether the gateway holds nothing: no ticket in flight, nothing queued, no
// router in-flight request or prefill tokens on any backend.
func settled(g *gateway) bool {
	st := g.queue.Stats()
	if st.InFlight != 0 || st.Queued != 0 {
		return false
	}
	for _, b := range g.backends {
		if in, ok := g.router.InFlight(b.URL); ok && (in.Requests != 0 || in.PrefillTokens != 0) {
			return false
		}
	}
	return true
}

func TestOpenAIClientChat(t *testing.T) {
	fleet := startTestFleet(t, 2)
	g, base := startTestGateway(t, testConfig(), fleetBackends(fleet))
	c := client(base)
	ctx := context.Background()

	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Say hello.")},
		MaxTokens: openai.Int(12),
	})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("chat: got %+v, want one choice with content", resp.Choices)
	}
	if resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 12 {
		t.Errorf("chat usage = %+v, want prompt > 0 and 0 < completion ≤ 12", resp.Usage)
	}

	// Streamed, without asking for usage: the gateway asks for it upstream and must not leak
	// the extra chunk.
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream, please.")},
		MaxTokens: openai.Int(10),
	})
	var text strings.Builder
	chunks := 0
	for stream.Next() {
		ch := stream.Current()
		chunks++
		if len(ch.Choices) == 0 {
			t.Errorf("client got a usage-only chunk it did not ask for: %+v", ch)
			continue
		}
		text.WriteString(ch.Choices[0].Delta.Content)
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if chunks < 2 || text.Len() == 0 {
		t.Fatalf("stream: %d chunks, text %q; want several chunks with text", chunks, text.String())
	}

	// Streamed with usage requested: the last chunk carries it, with cached tokens on a
	// repeated prompt.
	params := openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("a long shared opening instruction ", 20))},
		MaxTokens:     openai.Int(4),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	var last openai.ChatCompletionChunk
	for range 2 {
		s := c.Chat.Completions.NewStreaming(ctx, params, option.WithHeader("X-Session-Id", "cached"))
		for s.Next() {
			last = s.Current()
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream with usage: %v", err)
		}
	}
	if last.Usage.PromptTokens == 0 || last.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("second identical prompt: usage %+v, want cached tokens > 0 (same session, same server)", last.Usage)
	}
	eventually(t, "the gateway to settle", func() bool { return settled(g) })
	if st := g.queue.Stats(); st.Dispatched != 4 || st.Completed != 4 {
		t.Errorf("queue stats = %+v, want 4 dispatched and completed", st)
	}
}

// served returns the index of the fleet server whose submitted count grew since before.
func served(t *testing.T, fleet *simfleet.Fleet, before []int64) int {
	t.Helper()
	got := -1
	for i, s := range fleet.Servers() {
		if n := s.Stats().Submitted; n != before[i] {
			if got >= 0 {
				t.Fatalf("request reached servers %d and %d", got, i)
			}
			got = i
		}
	}
	if got < 0 {
		t.Fatal("request reached no server")
	}
	return got
}

func submitted(fleet *simfleet.Fleet) []int64 {
	var out []int64
	for _, s := range fleet.Servers() {
		out = append(out, s.Stats().Submitted)
	}
	return out
}

// Later turns of a session go to the server holding its history; first turns of new sessions
// that share a long opening prompt spread over the fleet instead of piling onto the server that
// cached the opening first.
func TestSessionsStayWarmAndNewSessionsSpread(t *testing.T) {
	fleet := startTestFleet(t, 2)
	_, base := startTestGateway(t, testConfig(), fleetBackends(fleet))
	c := client(base)
	ctx := context.Background()
	system := strings.Repeat("You are a coding agent. Follow the repository conventions. ", 30)

	firstTurn := map[int]int{}
	for s := range 8 {
		session := fmt.Sprintf("session-%d", s)
		history := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
		home := -1
		for turn := range 3 {
			history = append(history, openai.UserMessage(fmt.Sprintf("turn %d of %s: change file %d", turn, session, turn)))
			before := submitted(fleet)
			resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: model, Messages: history, MaxTokens: openai.Int(8),
			}, option.WithHeader("X-Session-Id", session))
			if err != nil {
				t.Fatalf("%s turn %d: %v", session, turn, err)
			}
			at := served(t, fleet, before)
			if turn == 0 {
				home = at
				firstTurn[at]++
			} else if at != home {
				t.Errorf("%s turn %d went to server %d, want its home %d", session, turn, at, home)
			}
			history = append(history, openai.AssistantMessage(resp.Choices[0].Message.Content))
		}
	}
	if firstTurn[0] == 0 || firstTurn[1] == 0 {
		t.Errorf("first turns per server = %v, want both servers used", firstTurn)
	}
}

// A client that disconnects mid-stream frees its ticket, the router's in-flight counters and
// the server's request.
func TestClientDisconnectFreesEverything(t *testing.T) {
	fleet := startTestFleet(t, 1)
	g, base := startTestGateway(t, testConfig(), fleetBackends(fleet))
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"usher/demo","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"write a long story"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 { // a few events arrive
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.queue.Stats(); st.InFlight != 1 {
		t.Fatalf("in flight mid-stream = %d, want 1", st.InFlight)
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the gateway to release the request", func() bool { return settled(g) })
	eventually(t, "the server to abort the request", func() bool {
		st := fleet.Servers()[0].Stats()
		return st.Running == 0 && st.Waiting == 0 && st.Aborted == 1
	})
}

// fakeBackend is a vLLM-like server whose chat stream breaks after two chunks.
func fakeBackend(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 2 {
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the server dies mid-stream
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// A backend that dies mid-stream gives the client a clean error and frees everything.
func TestBackendKilledMidStream(t *testing.T) {
	backend := fakeBackend(t)
	g, base := startTestGateway(t, testConfig(), []Backend{{URL: backend.URL, Engine: "vllm"}})
	c := client(base)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var got strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			got.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if got.String() != "w0 w1 " {
		t.Errorf("content before the break = %q, want %q", got.String(), "w0 w1 ")
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "stream broke") {
		t.Fatalf("stream error = %v, want the gateway's upstream error", err)
	}
	eventually(t, "the gateway to release the request", func() bool { return settled(g) })
}

func postJSON(t *testing.T, url, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("answer is not JSON: %q", data)
	}
	return resp, out
}

func TestBadRequests(t *testing.T) {
	fleet := startTestFleet(t, 1)
	cfg := testConfig()
	cfg.MaxBodyBytes = 4096
	g, base := startTestGateway(t, cfg, fleetBackends(fleet))
	tests := []struct {
		name, body string
		status     int
	}{
		{"malformed JSON", `{"model": "usher/demo", "messages": [`, http.StatusBadRequest},
		{"no messages", `{"model": "usher/demo", "messages": []}`, http.StatusBadRequest},
		{"no model", `{"messages": [{"role":"user","content":"hi"}]}`, http.StatusBadRequest},
		{"negative max_tokens", `{"model":"usher/demo","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, http.StatusBadRequest},
		{"oversized", `{"model":"usher/demo","messages":[{"role":"user","content":"` + strings.Repeat("x", 8192) + `"}]}`, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := postJSON(t, base+"/v1/chat/completions", tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			e, ok := out["error"].(map[string]any)
			if !ok || e["message"] == "" || e["type"] == "" {
				t.Errorf("body = %v, want an OpenAI error object", out)
			}
		})
	}
	if st := g.queue.Stats(); st.Dispatched != 0 {
		t.Errorf("bad requests reached the queue: %+v", st)
	}
}

// When the queue is full the gateway answers 429 with Retry-After, in OpenAI's error shape.
func TestAdmissionRejected429(t *testing.T) {
	fleet := startTestFleet(t, 1)
	cfg := testConfig()
	cfg.MaxInFlight, cfg.MaxQueue = 1, 1
	g, base := startTestGateway(t, cfg, fleetBackends(fleet))
	long := `{"model":"usher/demo","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"long"}]}`

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 { // one in flight, one waiting
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(long))
			req.Header.Set("X-Session-Id", fmt.Sprint("holder-", i))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		eventually(t, "the holder to be admitted or queued", func() bool {
			st := g.queue.Stats()
			return st.InFlight+st.Queued == i+1
		})
	}
	resp, out := postJSON(t, base+"/v1/chat/completions", `{"model":"usher/demo","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d (%v), want 429", resp.StatusCode, out)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if e, ok := out["error"].(map[string]any); !ok || e["type"] != "rate_limit_error" {
		t.Errorf("body = %v, want an OpenAI rate_limit_error", out)
	}
	cancel()
	wg.Wait()
	eventually(t, "the gateway to settle", func() bool { return settled(g) })
}

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]string{"-backend", "http://10.0.0.7:8000,engine=sglang,kv-events=tcp://10.0.0.7:5557", "-policy", "vtc", "-router", "llmd"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Backends) != 1 || cfg.Backends[0].Engine != "sglang" || cfg.Backends[0].KVEvents != "tcp://10.0.0.7:5557" {
		t.Errorf("backends = %+v", cfg.Backends)
	}
	if cfg.Tokenizer != "bytes" {
		t.Errorf("tokenizer with real backends = %q, want bytes", cfg.Tokenizer)
	}
	for _, args := range [][]string{
		{"-policy", "nope"},
		{"-router", "nope"},
		{"-backend", "ftp://x"},
		{"-backend", "http://x:1,colour=red"},
		{"-ttl", "10s", "-bounded-wait", "20s"},
		{"-max-queue", "0"},
		{"-tokenizer", "sentencepiece"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", args)
		}
	}
}

// With the simulated servers publishing KV events, the prefix index learns what the engine
// really cached — including the blocks of the answer, which the router's own bookkeeping cannot
// know — so the next turn of a conversation matches beyond the previous prompt.
func TestSimKVEventsKeepIndexExact(t *testing.T) {
	cfg := testConfig()
	cfg.SimServers, cfg.SimKVEvents = 2, true
	sim, err := startFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	g, base := startTestGateway(t, cfg, sim.backends)
	if g.kv == nil {
		t.Fatal("gateway is not following KV events")
	}
	c := client(base)
	history := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(strings.Repeat("You review pull requests carefully. ", 12)),
		openai.UserMessage("Review change 1."),
	}
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model, Messages: history, MaxTokens: openai.Int(40),
	}, option.WithHeader("X-Session-Id", "kv"))
	if err != nil {
		t.Fatal(err)
	}
	history = append(history, openai.AssistantMessage(resp.Choices[0].Message.Content), openai.UserMessage("And change 2?"))

	chainOf := func(msgs []openai.ChatCompletionMessageParamUnion) []uint64 {
		body, _ := json.Marshal(openai.ChatCompletionNewParams{Model: model, Messages: msgs})
		req, err := parseRequest(body, true)
		if err != nil {
			t.Fatal(err)
		}
		chain, _, _, err := localTokenizer{blockSize: cfg.BlockSize}.Chain(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]uint64, len(chain))
		for i, h := range chain {
			out[i] = uint64(h)
		}
		return out
	}
	first := chainOf(history[:2])
	next := chainOf(history)
	eventually(t, "KV events to reach the index", func() bool {
		st := g.kv.sub.Stats()
		return st.Events > 0
	})
	defer func() {
		if t.Failed() {
			var chain []prefixcache.BlockHash
			for _, h := range next {
				chain = append(chain, prefixcache.BlockHash(h))
			}
			t.Logf("first %d next %d match %v stats %+v kv %+v", len(first), len(next), g.index.Match(nil, chain), g.index.Stats().Backends, g.kv.sub.Stats())
		}
	}()
	eventually(t, "the answer's blocks to be matched", func() bool {
		var chain []prefixcache.BlockHash
		for _, h := range next {
			chain = append(chain, prefixcache.BlockHash(h))
		}
		best := int32(0)
		for _, m := range g.index.Match(nil, chain) {
			best = max(best, m)
		}
		return int(best) > len(first)
	})
	if st := g.kv.sub.Stats(); st.ApplyErrors != 0 || st.Unregistered != 0 || st.DecodeErrors != 0 {
		t.Errorf("subscriber stats = %+v, want no errors", st)
	}
}

// Streamed answers leave the backend connection reusable: the gateway reads each body to its
// end, so ten streams in a row dial the backend once (plus the scraper's own connection).
func TestStreamsReuseBackendConnections(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		// The end of the body (the chunked terminator) arrives after [DONE], as from a
		// server that finishes its handler a moment after the last event.
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
	})
	backend := httptest.NewUnstartedServer(mux)
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	backend.Start()
	t.Cleanup(backend.Close)
	cfg := testConfig()
	cfg.ScrapeInterval = time.Hour // only the initial scrape
	_, base := startTestGateway(t, cfg, []Backend{{URL: backend.URL, Engine: "vllm"}})
	mu.Lock()
	before := conns
	mu.Unlock()
	c := client(base)
	for range 10 {
		s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := conns - before; got > 1 {
		t.Errorf("10 streams dialled the backend %d times, want 1", got)
	}
}

// BenchmarkGateway is one streamed chat request through the gateway — parse, tokenize and hash a
// 2,600-token conversation, admit, pick, proxy 40 events — against a backend that answers at once,
// so what it measures is the gateway's own work per request (client and backend included).
func BenchmarkGateway(b *testing.B) {
	var events strings.Builder
	events.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for range 40 {
		events.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}\n\n")
	}
	events.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2600,\"completion_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":2400}}}\n\ndata: [DONE]\n\n")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, events.String())
	})
	backend := httptest.NewServer(mux)
	b.Cleanup(backend.Close)

	cfg := defaultConfig()
	cfg.Tokenizer = "local"
	g, err := newGateway(cfg, []Backend{{URL: backend.URL, Engine: "vllm"}})
	if err != nil {
		b.Fatal(err)
	}
	g.Start(context.Background())
	srv := httptest.NewServer(g)
	b.Cleanup(func() { srv.Close(); g.Close() })

	var msgs []map[string]string
	msgs = append(msgs, map[string]string{"role": "system", "content": strings.Repeat("You are a coding agent; follow the repository conventions. ", 200)})
	for i := range 6 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("please change this function ", 20))},
			map[string]string{"role": "assistant", "content": strings.Repeat("done ", 40)})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": "and now the tests"})
	body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": msgs})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("X-Session-Id", "bench")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func TestPrepareBody(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"model":"m","stream":true,"messages":[]}`, `{"model":"m","stream":true,"messages":[],"stream_options":{"include_usage":true}}`},
		{` { "stream" : true }`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":{"include_obfuscation":false}}`, `{"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}}`},
		{`{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":false}`, `{"stream":false}`},
	}
	for _, tt := range tests {
		req := &chatRequest{}
		if err := json.Unmarshal([]byte(tt.body), req); err != nil {
			t.Fatal(err)
		}
		req.wantsUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		got, err := prepareBody([]byte(tt.body), req)
		if err != nil {
			t.Fatalf("prepareBody(%s): %v", tt.body, err)
		}
		// Compare as values: key order is not the point.
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(tt.want), &w) != nil {
			t.Fatalf("prepareBody(%s) = %s: not JSON", tt.body, got)
		}
		if gs, ws := fmt.Sprint(g), fmt.Sprint(w); gs != ws {
			t.Errorf("prepareBody(%s) = %s, want %s", tt.body, got, tt.want)
		}
	}
}
