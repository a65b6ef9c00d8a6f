package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/proxy/openai"
	"github.com/usher-llm/usher/proxy/tokenizer"
	"github.com/usher-llm/usher/proxy/tokenizer/conformance/internal/golden"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// exactRequest is one line of testdata/exact/<family>.jsonl.gz (scripts/gen-exact.py and
// gen-exact-ids.cjs): a request of a multi-turn conversation and the reference's prompt.
type exactRequest struct {
	API  string          `json:"api"` // chat, messages, responses
	Conv int             `json:"conv"`
	Turn int             `json:"turn"`
	Body json.RawMessage `json:"body"` // without model, max_tokens and stream
	Text string          `json:"text"` // the reference's rendered prompt (vLLM's conversion, Jinja2)
	IDs  []uint32        `json:"ids"`  // the reference tokenizer's ids of Text
}

var exactAPIs = []struct {
	name string
	api  openai.API
	path string
}{
	{"chat", openai.Chat, "/v1/chat/completions"},
	{"messages", openai.Messages, "/v1/messages"},
	{"responses", openai.Responses, "/v1/responses"},
}

const (
	exactModel     = "Qwen/Qwen3-32B"
	exactBlockSize = 16
	exactServers   = 3
	exactParallel  = 4 // conversations in flight at once
)

// exactResult is what one (tokenization, API) run measured.
type exactResult struct {
	reusable, matched int // later turns: blocks the previous turn's prompt shares, blocks the index matched
	cached, prompt    int // later turns: tokens the serving engine reported cached, prompt tokens
	ttft              []time.Duration
}

// TestExactMode runs the gateway (proxy.Handler) over simulated servers in exact mode — the
// servers publish KV events (vLLM's ZMQ wire format) for the token ids the REFERENCE computed
// (simfleet's table mode: scripts/gen-exact.py renders with vLLM's conversions and Jinja2,
// gen-exact-ids.cjs tokenizes with the tokenizers library), and the index learns from those
// events alone (routing.LearnFromEvents) — for multi-turn conversations over the Chat,
// Messages and Responses APIs, once with the local tokenizer (tokenizer.Encoder) and once
// with the servers' /tokenize (proxy.EndpointTokenizer, which takes chat messages only: the
// Handler hashes Messages and Responses by bytes, which cannot match KV events).
//
// Per API and tokenizer it reports, over every turn after a conversation's first: the share
// of the blocks that turn's prompt shares with the previous turn's (its reusable blocks) that
// the router's index matched from KV events just before sending it, the share of them the
// serving engine reported cached (usage), and TTFT p50/p99 of all turns. The local tokenizer
// must match ≥ 90% on all three APIs.
func TestExactMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 18 simulated servers and sends 252 streamed requests")
	}
	reqs := golden.DecodeLines[exactRequest](t, "exact/qwen3.jsonl.gz")
	table := simfleet.TokenTable{}
	for _, r := range reqs {
		key, err := simfleet.TableKey(apiNamed(t, r.API), r.Body)
		if err != nil {
			t.Fatal(err)
		}
		table[key] = r.IDs
	}
	enc, err := tokenizer.New(tokenizer.Options{
		TokenizerJSON: golden.Gunzip(t, "qwen3/tokenizer.json.gz"),
		ConfigJSON:    golden.Gunzip(t, "qwen3/tokenizer_config.json.gz"),
		BlockSize:     exactBlockSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The local tokenizer's chains against the reference's, request by request: what the
	// index can match at best.
	same := map[string]int{}
	for _, r := range reqs {
		req := parseExact(t, r)
		got, err := enc.Tokenize(context.Background(), nil, req)
		if err != nil {
			t.Errorf("%s conversation %d turn %d: local Tokenize: %v", r.API, r.Conv, r.Turn, err)
			continue
		}
		if slices.Equal(got.Chain, prefixcache.HashTokens(nil, proxy.SeedOf(req), r.IDs, exactBlockSize)) && got.Tokens == len(r.IDs) {
			same[r.API]++
		}
	}

	type row struct {
		tok, api string
		res      exactResult
	}
	var rows []row
	for _, tok := range []string{"local", "endpoint"} {
		for _, a := range exactAPIs {
			var convs [][]exactRequest
			for _, r := range reqs {
				if r.API != a.name {
					continue
				}
				for len(convs) <= r.Conv {
					convs = append(convs, nil)
				}
				convs[r.Conv] = append(convs[r.Conv], r)
			}
			res := runExact(t, table, enc, tok, a.api, a.path, convs)
			rows = append(rows, row{tok, a.name, res})
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "exact mode, Qwen3 reference ids, %d servers, block size %d, %d requests per API (local chains equal to the reference's: chat %d, messages %d, responses %d)\n",
		exactServers, exactBlockSize, len(reqs)/3, same["chat"], same["messages"], same["responses"])
	fmt.Fprintf(&b, "%-9s %-10s %14s %14s %12s %10s %10s\n", "tokenizer", "API", "router match", "engine cached", "cached/prompt", "TTFT p50", "TTFT p99")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-9s %-10s %13.1f%% %13.1f%% %12.1f%% %10v %10v\n", r.tok, r.api,
			pct(r.res.matched, r.res.reusable), pct(r.res.cached, r.res.reusable*exactBlockSize), pct(r.res.cached, r.res.prompt),
			quantile(r.res.ttft, 0.5), quantile(r.res.ttft, 0.99))
	}
	t.Log("\n" + b.String())
	for _, r := range rows {
		if r.tok == "local" && pct(r.res.matched, r.res.reusable) < 90 {
			t.Errorf("%s with the local tokenizer: the router matched %d of %d reusable blocks (%.1f%%), want ≥ 90%%",
				r.api, r.res.matched, r.res.reusable, pct(r.res.matched, r.res.reusable))
		}
	}
}

// TestExactRequests: for every request of the exact-mode table, the local conversion
// (Encoder.ConversationOf), rendering and encoding give the reference's text and ids — the
// Python transcription of vLLM's Messages and Responses conversions in gen-exact.py, Jinja2
// and the tokenizers library.
func TestExactRequests(t *testing.T) {
	enc := encoder(t, golden.Families[0])
	bad := 0
	for _, r := range golden.DecodeLines[exactRequest](t, "exact/qwen3.jsonl.gz") {
		c, err := enc.ConversationOf(parseExact(t, r))
		var text []byte
		if err == nil {
			text, err = enc.RenderChat(nil, c)
		}
		if err != nil {
			t.Errorf("%s conversation %d turn %d: %v", r.API, r.Conv, r.Turn, err)
			continue
		}
		if string(text) != r.Text {
			if bad++; bad <= 5 {
				t.Errorf("%s conversation %d turn %d: %s", r.API, r.Conv, r.Turn, golden.TextDiff(string(text), r.Text))
			}
			continue
		}
		if ids := enc.Encode(nil, string(text)); !equal(ids, r.IDs) {
			if bad++; bad <= 5 {
				t.Errorf("%s conversation %d turn %d: ids %s", r.API, r.Conv, r.Turn, golden.FirstDiff(ids, r.IDs))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d requests differ from the reference", bad)
	}
}

// runExact serves convs through a fresh Handler and fleet and measures them.
func runExact(t *testing.T, table simfleet.TokenTable, enc *tokenizer.Encoder, tok string, api openai.API, path string, convs [][]exactRequest) exactResult {
	t.Helper()
	fleet, backends, published := startExactFleet(t, table)
	var tk proxy.Tokenizer = enc
	if tok == "endpoint" {
		tk = &proxy.EndpointTokenizer{URLs: fleet.URLs(), BlockSize: exactBlockSize}
	}
	profile := profiles.Usher(profiles.UsherOptions{})
	profile.Learn = routing.LearnFromEvents // the index knows what the KV events told it, nothing else
	feed, err := kvfeed.New(kvfeed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{
		Backends:       backends,
		Tokenizer:      tk,
		Profile:        profile,
		BlockSize:      exactBlockSize,
		ScrapeInterval: 20 * time.Millisecond,
		Extensions:     []proxy.Extension{feed},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.Start(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = h.Listener(srv.Listener)
	srv.Start()
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
		cancel()
		<-done
	}()
	// The handler follows every publisher before the first request.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		connected := 0
		for _, src := range feed.Subscriber().Sources() {
			if src.Connected {
				connected++
			}
		}
		if connected >= exactServers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the KV-event feed connected to %d of %d publishers", connected, exactServers)
		}
	}

	ix := h.Index()
	var mu sync.Mutex
	var res exactResult
	work := make(chan []exactRequest)
	var wg sync.WaitGroup
	for range exactParallel {
		wg.Go(func() {
			for conv := range work {
				var want int64 // KV-event batches published when the previous turn ended
				for i, r := range conv {
					req := parseExact(t, r)
					matched, reusable := 0, 0
					if i > 0 {
						// The previous turn's KV events were published before its answer
						// streamed; wait (bounded) until the feed has applied them all.
						for deadline := time.Now().Add(5 * time.Second); feed.Subscriber().Stats().Batches < want && time.Now().Before(deadline); {
							time.Sleep(time.Millisecond)
						}
						// What the router sees: the Handler's own tokenizer, and its fallback
						// to bytes (Messages and Responses for the endpoint tokenizer).
						var p proxy.Prompt
						var err error
						if tok == "endpoint" && api != openai.Chat {
							err = fmt.Errorf("not tokenized by /tokenize")
						} else {
							p, err = tk.Tokenize(context.Background(), nil, req)
						}
						if err != nil {
							p, _ = proxy.BytesTokenizer{}.Tokenize(context.Background(), nil, req)
						}
						for _, m := range ix.Match(nil, p.Chain) {
							matched = max(matched, int(m))
						}
						reusable = commonPrefix(conv[i-1].IDs, r.IDs) / exactBlockSize
						matched = min(matched, reusable)
					}
					ttft, cached, err := sendExact(srv.URL+path, api, r.Body)
					if err != nil {
						t.Errorf("%s conversation %d turn %d: %v", path, r.Conv, r.Turn, err)
						return
					}
					want = published.Load()
					mu.Lock()
					res.ttft = append(res.ttft, ttft)
					if i > 0 {
						res.matched += matched
						res.reusable += reusable
						res.cached += cached
						res.prompt += len(r.IDs)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, c := range convs {
		work <- c
	}
	close(work)
	wg.Wait()
	return res
}

// countingPublisher counts the batches the servers publish.
type countingPublisher struct {
	*kvpub.Publisher
	batches *atomic.Int64
}

func (c countingPublisher) Publish(b any) (uint64, error) {
	seq, err := c.Publisher.Publish(b)
	if err == nil {
		c.batches.Add(1)
	}
	return seq, err
}

// startExactFleet starts the simulated servers in table mode, each publishing its KV events,
// and returns the count of batches they published.
func startExactFleet(t *testing.T, table simfleet.TokenTable) (*simfleet.Fleet, []proxy.Backend, *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	published := new(atomic.Int64)
	pubs := make([]*kvpub.Publisher, exactServers)
	for i := range pubs {
		pub, err := kvpub.New(kvpub.Options{
			Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: kvpub.Topic(fmt.Sprintf("sim-%d", i), exactModel),
		})
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = pub
		wg.Go(func() { _ = pub.Run(ctx) })
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers: exactServers,
		Configure: func(i int, o *simfleet.Options) {
			o.Engine.Profile = engine.Qwen3_32B_H100 // prefill costs as on H100s: a cache hit shows in TTFT
			o.Tokens = table
			o.OnKVEvents = simfleet.PublishKVEvents(countingPublisher{pubs[i], published}, nil)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fleet.Close()
		cancel()
		for _, p := range pubs {
			_ = p.Close()
		}
		wg.Wait()
	})
	var bs []proxy.Backend
	for i, u := range fleet.URLs() {
		bs = append(bs, proxy.Backend{URL: u, KVEvents: pubs[i].Endpoint(), Replay: pubs[i].ReplayEndpoint()})
	}
	return fleet, bs, published
}

// sendExact sends body, streamed, and returns the time to the first generated text and the
// prompt tokens the engine reported cached.
func sendExact(url string, api openai.API, body json.RawMessage) (time.Duration, int, error) {
	var extra string
	switch api {
	case openai.Chat:
		extra = `"max_tokens":4,"stream_options":{"include_usage":true}`
	case openai.Messages:
		extra = `"max_tokens":4`
	case openai.Responses:
		extra = `"max_output_tokens":4`
	}
	b := withFields(body, `"model":"`+exactModel+`","stream":true,`+extra)
	start := time.Now()
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		return 0, 0, fmt.Errorf("status %s: %s", resp.Status, msg.String())
	}
	var ttft time.Duration
	cached := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if ttft == 0 && firstText(api, data) {
			ttft = time.Since(start)
		}
		var v any
		if json.Unmarshal([]byte(data), &v) == nil {
			cached = max(cached, findInt(v, "cached_tokens"), findInt(v, "cache_read_input_tokens"))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if ttft == 0 {
		return 0, 0, fmt.Errorf("no generated text in the stream")
	}
	return ttft, cached, nil
}

// firstText reports whether a stream event of api carries generated text.
func firstText(api openai.API, data string) bool {
	switch api {
	case openai.Chat:
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		return json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != ""
	case openai.Messages:
		return strings.Contains(data, `"content_block_delta"`)
	default:
		return strings.Contains(data, `"response.output_text.delta"`)
	}
}

// findInt returns the largest integer value of key anywhere in v, 0 if none.
func findInt(v any, key string) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if f, ok := x.(float64); ok && k == key {
				n = max(n, int(f))
			}
			n = max(n, findInt(x, key))
		}
	case []any:
		for _, x := range v {
			n = max(n, findInt(x, key))
		}
	}
	return n
}

func parseExact(t *testing.T, r exactRequest) *openai.Request {
	extra := `"max_tokens":4`
	if r.API == "responses" {
		extra = `"max_output_tokens":4`
	}
	req, err := openai.Parse(withFields(r.Body, `"model":"`+exactModel+`",`+extra), apiNamed(t, r.API), openai.ParseLimits{})
	if err != nil {
		t.Fatalf("%s conversation %d turn %d: %v", r.API, r.Conv, r.Turn, err)
	}
	return req
}

// withFields returns the JSON object body with the members fields (`"k":v,...`) put first.
// The body's own bytes are kept: decoding and encoding it again would sort its keys, and
// the order of a tool's parameters is part of the prompt.
func withFields(body json.RawMessage, fields string) []byte {
	body = bytes.TrimSpace(body)
	out := append([]byte("{"+fields), ',')
	return append(out, body[1:]...)
}

func apiNamed(t *testing.T, name string) openai.API {
	for _, a := range exactAPIs {
		if a.name == name {
			return a.api
		}
	}
	t.Fatalf("unknown API %q", name)
	return 0
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
}
