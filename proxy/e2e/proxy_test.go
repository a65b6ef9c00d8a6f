package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/internal/kvpub"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/prefixcache/kvevents"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/kvfeed"
	"github.com/usher-llm/usher/proxy/openai"
)

const model = "usher/demo"

// startFleet starts n simulated vLLM servers on loopback.
func startFleet(t testing.TB, n int) *simfleet.Fleet {
	t.Helper()
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return fleet
}

func backendsOf(f *simfleet.Fleet) []proxy.Backend {
	var bs []proxy.Backend
	for _, u := range f.URLs() {
		bs = append(bs, proxy.Backend{URL: u})
	}
	return bs
}

// testOptions are the Handler's defaults with the simulated fleet's tokenizer and a fast
// scrape.
func testOptions(backends []proxy.Backend) proxy.Options {
	return proxy.Options{
		Backends:       backends,
		Tokenizer:      simfleet.Tokenizer{},
		ScrapeInterval: 20 * time.Millisecond,
	}
}

// feeds holds the kvfeed of each Handler startHandler made with one.
var feeds sync.Map // *proxy.Handler → *kvfeed.Follower

// withKV adds a KV-event feed to opts when a backend publishes KV events or listen is set
// (binding it), and returns it; nil when none is needed.
func withKV(opts *proxy.Options, listen string) *kvfeed.Follower {
	need := listen != ""
	for _, b := range opts.Backends {
		need = need || b.KVEvents != "" || b.KVPod != ""
	}
	for _, e := range opts.Extensions {
		if f, ok := e.(*kvfeed.Follower); ok {
			return f // one already
		}
	}
	if !need {
		return nil
	}
	feed, err := kvfeed.New(kvfeed.Options{Listen: listen})
	if err != nil {
		panic(err) // the tests' listen endpoints are well formed
	}
	opts.Extensions = append(opts.Extensions, feed)
	return feed
}

// kvOf returns the KV-event subscriber of a Handler startHandler made (nil without one).
func kvOf(h *proxy.Handler) *kvevents.Subscriber {
	f, ok := feeds.Load(h)
	if !ok {
		return nil
	}
	return f.(*kvfeed.Follower).Subscriber()
}

// startHandler serves a Handler on a loopback port, with its background work running.
func startHandler(t testing.TB, opts proxy.Options) (*proxy.Handler, string) {
	t.Helper()
	feed := withKV(&opts, "")
	h, err := proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if feed != nil {
		feeds.Store(h, feed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.Start(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = h.Listener(srv.Listener)
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		h.Close()
		cancel()
		<-done
	})
	return h, srv.URL
}

func client(base string, opts ...option.RequestOption) oa.Client {
	opts = append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
	}, opts...)
	return oa.NewClient(opts...)
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled reports whether the handler holds nothing: no ticket in flight, nothing queued, no
// router in-flight request or prefill tokens on any backend.
func settled(h *proxy.Handler) bool {
	st := h.Queue().Stats()
	if st.InFlight != 0 || st.Queued != 0 {
		return false
	}
	for _, b := range h.Router().Backends(nil) {
		if in, ok := h.Router().InFlight(b.Name); ok && (in.Requests != 0 || in.PrefillTokens != 0) {
			return false
		}
	}
	return true
}

// closedExactlyOnce checks that every dispatched request's ticket was done once and that
// the router's books are closed: the queue's and the router's counters back to zero.
func closedExactlyOnce(t testing.TB, h *proxy.Handler) {
	t.Helper()
	eventually(t, "the handler to settle", func() bool { return settled(h) })
	st := h.Queue().Stats()
	if st.Completed != st.Dispatched {
		t.Errorf("queue: %d dispatched, %d completed; want equal", st.Dispatched, st.Completed)
	}
	rs := h.Router().Stats()
	if rs.Done != rs.Picks {
		t.Errorf("router: %d picks, %d done; want equal", rs.Picks, rs.Done)
	}
}

func TestOpenAIClientChat(t *testing.T) {
	fleet := startFleet(t, 2)
	h, base := startHandler(t, testOptions(backendsOf(fleet)))
	c := client(base)
	ctx := context.Background()

	resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oa.ChatCompletionMessageParamUnion{oa.SystemMessage("You are terse."), oa.UserMessage("Say hello.")},
		MaxTokens: oa.Int(12),
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

	// Streamed, without asking for usage: the proxy asks for it upstream and must not leak
	// the extra chunk.
	stream := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Stream, please.")},
		MaxTokens: oa.Int(10),
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
	params := oa.ChatCompletionNewParams{
		Model:         model,
		Messages:      []oa.ChatCompletionMessageParamUnion{oa.UserMessage(strings.Repeat("a long shared opening instruction ", 20))},
		MaxTokens:     oa.Int(4),
		StreamOptions: oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)},
	}
	var last oa.ChatCompletionChunk
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

	// Completions, whole.
	comp, err := c.Completions.New(ctx, oa.CompletionNewParams{
		Model: oa.CompletionNewParamsModel(model), Prompt: oa.CompletionNewParamsPromptUnion{OfString: oa.String("Once upon a time")},
		MaxTokens: oa.Int(5),
	})
	if err != nil {
		t.Fatalf("completions: %v", err)
	}
	if len(comp.Choices) != 1 || comp.Usage.CompletionTokens == 0 {
		t.Errorf("completions: %+v, want one choice and usage", comp)
	}

	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) == 0 || models.Data[0].ID != model {
		t.Errorf("models: %+v, %v; want %s", models, err, model)
	}
	closedExactlyOnce(t, h)
	if st := h.Queue().Stats(); st.Dispatched != 5 {
		t.Errorf("queue stats = %+v, want 5 dispatched", st)
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

// Later turns of a session go to the server holding its history. First turns of new sessions
// that share a long opening prompt follow the opening while the server holding it has room (the
// router learns at pick and weighs the prefill each server would do), and spread over the fleet
// once that server is busy instead of piling onto it.
func TestSessionsStayWarmAndNewSessionsSpread(t *testing.T) {
	fleet := startFleet(t, 2)
	_, base := startHandler(t, testOptions(backendsOf(fleet)))
	c := client(base)
	ctx := context.Background()
	system := strings.Repeat("You are a coding agent. Follow the repository conventions. ", 30)

	for s := range 8 {
		session := fmt.Sprintf("session-%d", s)
		history := []oa.ChatCompletionMessageParamUnion{oa.SystemMessage(system)}
		home := -1
		for turn := range 3 {
			history = append(history, oa.UserMessage(fmt.Sprintf("turn %d of %s: change file %d", turn, session, turn)))
			before := submitted(fleet)
			resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{
				Model: model, Messages: history, MaxTokens: oa.Int(8),
			}, option.WithHeader("X-Session-Id", session))
			if err != nil {
				t.Fatalf("%s turn %d: %v", session, turn, err)
			}
			at := served(t, fleet, before)
			if turn == 0 {
				home = at
			} else if at != home {
				t.Errorf("%s turn %d went to server %d, want its home %d", session, turn, at, home)
			}
			history = append(history, oa.AssistantMessage(resp.Choices[0].Message.Content))
		}
	}

	// New sessions opening at once, each answer long enough to keep its server busy: they
	// must not all land on the server that holds the opening.
	sys, _ := json.Marshal(system)
	var streams []*http.Response
	for s := range 6 {
		body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":2000,"ignore_eos":true,"messages":[{"role":"system","content":%s},{"role":"user","content":"new session %d"}]}`, model, sys, s)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", fmt.Sprintf("burst-%d", s))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // in flight now
			t.Fatal(err)
		}
		streams = append(streams, resp)
	}
	busy := 0
	for _, sv := range fleet.Servers() {
		if sv.Stats().Running+sv.Stats().Waiting > 0 {
			busy++
		}
	}
	for _, r := range streams {
		r.Body.Close()
	}
	if busy < 2 {
		t.Errorf("six concurrent new sessions ran on %d server(s), want both used", busy)
	}
}

// A client that disconnects mid-stream frees its ticket, the router's in-flight counters and
// the server's request.
func TestClientDisconnectFreesEverything(t *testing.T) {
	fleet := startFleet(t, 1)
	h, base := startHandler(t, testOptions(backendsOf(fleet)))
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
	if st := h.Queue().Stats(); st.InFlight != 1 {
		t.Fatalf("in flight mid-stream = %d, want 1", st.InFlight)
	}
	cancel()
	resp.Body.Close()
	closedExactlyOnce(t, h)
	eventually(t, "the server to abort the request", func() bool {
		st := fleet.Servers()[0].Stats()
		return st.Running == 0 && st.Waiting == 0 && st.Aborted == 1
	})
}

// fakeBackend is a vLLM-like server (metrics, health, models) whose chat answers come from
// chat.
func fakeBackend(t testing.TB, chat http.HandlerFunc) *httptest.Server {
	return fakeBackendWith(t, chat, nil)
}

// fakeBackendWith is fakeBackend with its server configured before it starts.
func fakeBackendWith(t testing.TB, chat http.HandlerFunc, configure func(*http.Server)) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0\n")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	if chat != nil {
		mux.HandleFunc("POST /v1/chat/completions", chat)
	}
	srv := httptest.NewUnstartedServer(mux)
	if configure != nil {
		configure(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// startPublishingFleet starts n simulated servers that publish their KV events over ZMQ
// (vLLM's wire format, with replay endpoints), and returns them as Backends that name the
// endpoints.
func startPublishingFleet(t testing.TB, n int) (*simfleet.Fleet, []proxy.Backend) {
	t.Helper()
	return startPublishingFleetWith(t, n, nil)
}

// startPublishingFleetWith is startPublishingFleet with each server's options adjusted by
// configure (when not nil) before its KV events are wired.
func startPublishingFleetWith(t testing.TB, n int, configure func(i int, o *simfleet.Options)) (*simfleet.Fleet, []proxy.Backend) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	pubs := make([]*kvpub.Publisher, n)
	for i := range pubs {
		pub, err := kvpub.New(kvpub.Options{
			Endpoint: "tcp://127.0.0.1:0",
			Topic:    kvpub.Topic(fmt.Sprintf("sim-%d", i), model), ReplayEndpoint: "tcp://127.0.0.1:0",
		})
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = pub
		wg.Go(func() { _ = pub.Run(ctx) })
	}
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{
		Servers: n,
		Configure: func(i int, o *simfleet.Options) {
			if configure != nil {
				configure(i, o)
			}
			o.OnKVEvents = simfleet.PublishKVEvents(pubs[i], nil)
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
	return fleet, bs
}

// brokenStream writes two chunks, then the server dies mid-stream.
func brokenStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 2 {
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

// A backend that dies mid-stream gives the client a clean error event and frees everything.
func TestBackendKilledMidStream(t *testing.T) {
	backend := fakeBackend(t, brokenStream)
	h, base := startHandler(t, testOptions([]proxy.Backend{{URL: backend.URL}}))
	c := client(base)
	stream := c.Chat.Completions.NewStreaming(context.Background(), oa.ChatCompletionNewParams{
		Model: "m", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")},
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
		t.Fatalf("stream error = %v, want the proxy's upstream error", err)
	}
	closedExactlyOnce(t, h)
	if rs := h.Router().Stats(); rs.Failed != 1 {
		t.Errorf("router failures = %d, want 1 (the broken stream)", rs.Failed)
	}
}

// When the queue is full the proxy answers 429 with Retry-After, in OpenAI's error shape.
func TestAdmissionRejected429(t *testing.T) {
	fleet := startFleet(t, 1)
	opts := testOptions(backendsOf(fleet))
	opts.MaxInFlight, opts.QueueCapacity = 1, flowcontrol.Limits{Requests: 1}
	h, base := startHandler(t, opts)
	release := holdQueue(t, h, base, 2) // one in flight, one waiting
	resp, e := post(t, base+"/v1/chat/completions", `{"model":"usher/demo","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d (%+v), want 429", resp.StatusCode, e)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if e.Type != openai.TypeRateLimit || e.Code != "rate_limit_exceeded" {
		t.Errorf("error = %+v, want an OpenAI rate_limit_error", e)
	}
	release()
	closedExactlyOnce(t, h)
}

// holdQueue sends n long streamed requests, one after another once the previous one is admitted
// or queued, and returns a function that cancels them and waits until they have ended.
func holdQueue(t testing.TB, h *proxy.Handler, base string, n int) (release func()) {
	t.Helper()
	long := `{"model":"usher/demo","stream":true,"max_tokens":4000,"ignore_eos":true,"messages":[{"role":"user","content":"long"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(long))
			req.Header.Set("X-Session-Id", fmt.Sprint("holder-", i))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		eventually(t, "the holder to be admitted or queued", func() bool {
			st := h.Queue().Stats()
			return st.InFlight+st.Queued == i+1
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() { cancel(); wg.Wait() }
}

// apiError is an OpenAI error as a client decodes it.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
	Param   *string `json:"param"`
}

// post sends body and decodes an OpenAI error answer (zero for a success).
func post(t testing.TB, url, body string, header http.Header) (*http.Response, openai.Error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, decodeError(t, resp, data)
}

func decodeError(t testing.TB, resp *http.Response, data []byte) openai.Error {
	t.Helper()
	if resp.StatusCode == http.StatusOK {
		return openai.Error{}
	}
	var out struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Error == nil {
		t.Fatalf("status %d, body %q: not an OpenAI error object", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	e := openai.Error{Status: resp.StatusCode, Message: out.Error.Message, Type: out.Error.Type}
	if out.Error.Code != nil {
		e.Code = *out.Error.Code
	}
	if out.Error.Param != nil {
		e.Param = *out.Error.Param
	}
	if e.Message == "" || e.Type == "" {
		t.Errorf("error %s: want a message and a type", data)
	}
	for _, leak := range []string{"openai.", "proxy.", "simfleet", "struct", "json: cannot", "Go value", "chatRequest"} {
		if strings.Contains(e.Message, leak) {
			t.Errorf("error message %q shows an implementation detail (%q)", e.Message, leak)
		}
	}
	if leak := leakedDetail.FindString(e.Message); leak != "" {
		t.Errorf("error message %q shows an address or a Go error (%q)", e.Message, leak)
	}
	return e
}

// leakedDetail matches what a client-facing message must not show: an address and port, a
// Go package's error prefix or a system call's words.
var leakedDetail = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F]*:[0-9a-fA-F:]*\]|localhost:\d+|:\d{2,5}\b|` +
	`\b(read|write|dial) (tcp|udp|unix)|connection (reset|refused)|broken pipe|EOF|use of closed|` +
	`context (canceled|deadline)|i/o timeout|\b(http|net|proxy|routing|flowcontrol|prefixcache|io|syscall): `)

// With the simulated servers publishing KV events, the prefix index learns what the engine
// really cached — including the blocks of the answer, which the router's own bookkeeping cannot
// know — so the next turn of a conversation matches beyond the previous prompt.
func TestSimKVEventsKeepIndexExact(t *testing.T) {
	_, backends := startPublishingFleet(t, 2)
	h, base := startHandler(t, testOptions(backends))
	if kvOf(h) == nil {
		t.Fatal("handler is not following KV events")
	}
	c := client(base)
	history := []oa.ChatCompletionMessageParamUnion{
		oa.SystemMessage(strings.Repeat("You review pull requests carefully. ", 12)),
		oa.UserMessage("Review change 1."),
	}
	resp, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{
		Model: model, Messages: history, MaxTokens: oa.Int(40),
	}, option.WithHeader("X-Session-Id", "kv"))
	if err != nil {
		t.Fatal(err)
	}
	history = append(history, oa.AssistantMessage(resp.Choices[0].Message.Content), oa.UserMessage("And change 2?"))

	chainOf := func(msgs []oa.ChatCompletionMessageParamUnion) []prefixcache.BlockHash {
		body, _ := json.Marshal(oa.ChatCompletionNewParams{Model: model, Messages: msgs})
		req, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := simfleet.Tokenizer{}.Tokenize(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		return p.Chain
	}
	first, next := chainOf(history[:2]), chainOf(history)
	eventually(t, "KV events to reach the index", func() bool { return kvOf(h).Stats().Events > 0 })
	eventually(t, "the answer's blocks to be matched", func() bool {
		best := int32(0)
		for _, m := range h.Index().Match(nil, next) {
			best = max(best, m)
		}
		return int(best) > len(first)
	})
	if st := kvOf(h).Stats(); st.ApplyErrors != 0 || st.Unregistered != 0 || st.DecodeErrors != 0 {
		t.Errorf("subscriber stats = %+v, want no errors", st)
	}
}

// Streamed answers leave the backend connection reusable: the proxy reads each body to its
// end, so ten streams in a row dial the backend once (plus the scraper's own connection).
func TestStreamsReuseBackendConnections(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	backend := fakeBackendWith(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		// The end of the body (the chunked terminator) arrives after [DONE], as from a
		// server that finishes its handler a moment after the last event.
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
	}, func(s *http.Server) {
		s.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				mu.Lock()
				conns++
				mu.Unlock()
			}
		}
	})
	opts := testOptions([]proxy.Backend{{URL: backend.URL}})
	opts.ScrapeInterval = time.Hour // only the initial scrape
	_, base := startHandler(t, opts)
	mu.Lock()
	before := conns
	mu.Unlock()
	c := client(base)
	for range 10 {
		s := c.Chat.Completions.NewStreaming(context.Background(), oa.ChatCompletionNewParams{
			Model: "m", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")},
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
