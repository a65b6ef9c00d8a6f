//go:build unix

package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
)

// wire records the completions requests the Handler sends — host, request id, body — and the
// whole answers of prefill steps, as the servers saw them.
type wire struct {
	base http.RoundTripper
	mu   sync.Mutex
	sent []sent
}

type sent struct {
	host, rid string
	body      map[string]json.RawMessage
	answer    []byte // a prefill step's whole answer
	err       error  // the attempt's transport error
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/completions") || r.Body == nil {
		return w.base.RoundTrip(r)
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	s := sent{host: r.URL.Host, rid: r.Header.Get(proxy.RequestIDHeader)}
	_ = json.Unmarshal(raw, &s.body)
	resp, err := w.base.RoundTrip(r)
	s.err = err
	if err == nil && s.prefill() && resp.StatusCode == http.StatusOK {
		s.answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(s.answer))
	}
	w.mu.Lock()
	w.sent = append(w.sent, s)
	w.mu.Unlock()
	return resp, err
}

// params returns the body's kv_transfer_params.
func (s sent) params() map[string]json.RawMessage {
	var p map[string]json.RawMessage
	_ = json.Unmarshal(s.body["kv_transfer_params"], &p)
	return p
}

func (s sent) prefill() bool { return string(s.params()["do_remote_decode"]) == "true" }

func (s sent) decode() bool { return string(s.params()["do_remote_prefill"]) == "true" }

// of returns what was sent for the request with id rid, in order.
func (w *wire) of(rid string) []sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sent
	for _, s := range w.sent {
		if s.rid == rid {
			out = append(out, s)
		}
	}
	return out
}

// pdFleet starts prefill and decode simserver processes, with the extra flags given.
func pdFleet(t *testing.T, prefill, decode int, prefillArgs, decodeArgs []string) (p, d []*simproc.Proc) {
	t.Helper()
	for range prefill {
		p = append(p, simproc.Start(t, simproc.Options{Args: prefillArgs}))
	}
	for range decode {
		d = append(d, simproc.Start(t, simproc.Options{Args: decodeArgs}))
	}
	return p, d
}

// pdHandler serves a Handler over a disaggregated fleet, recording the wire.
func pdHandler(t *testing.T, prefill, decode []*simproc.Proc, rec *wire, tune func(*proxy.Options)) (*proxy.Handler, string) {
	t.Helper()
	var backends []proxy.Backend
	for _, p := range prefill {
		backends = append(backends, proxy.Backend{URL: p.URL, Role: routing.RolePrefill})
	}
	for _, p := range decode {
		backends = append(backends, proxy.Backend{URL: p.URL, Role: routing.RoleDecode})
	}
	opts := testOptions(backends)
	opts.ScrapeInterval = 50 * time.Millisecond
	opts.Timeouts = proxy.Timeouts{ResponseHeader: 2 * time.Second, StreamIdle: 5 * time.Second, Dial: time.Second}
	rec.base = proxyseam.DefaultTransport()
	opts.Transport = rec
	if tune != nil {
		tune(&opts)
	}
	return startHandler(t, opts)
}

// document is a user message long enough (about 1,500 tokens) that the default decider sends
// its prefill away.
func document(topic string) string {
	var b strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&b, "%s%d ", topic, i%97)
	}
	return b.String()
}

// metric returns the value of the series (name and labels as exposed) on base's /metrics.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// ridOf returns the request id of the Handler's answer.
func ridOf(h http.Header) string { return h.Get(proxy.RequestIDHeader) }

// TestDisaggregated runs whole and streamed requests through two prefill and two decode
// server processes with an OpenAI client: each long first turn is prefilled on a prefill
// server (max_tokens 1, not streamed, do_remote_decode) and decoded on a decode server that
// carries exactly the prefill's answer as its kv_transfer_params; the warm second turn of a
// conversation skips the prefill step; every pick is closed exactly once.
func TestDisaggregated(t *testing.T) {
	prefill, decode := pdFleet(t, 2, 2, nil, nil)
	rec := &wire{}
	h, base := pdHandler(t, prefill, decode, rec, nil)
	c := client(base)
	ctx := context.Background()
	roleOf := map[string]string{}
	for _, p := range prefill {
		roleOf[hostOf(p.URL)] = "prefill"
	}
	for _, p := range decode {
		roleOf[hostOf(p.URL)] = "decode"
	}

	checkTwoSteps := func(t *testing.T, rid string, stream bool) []sent {
		t.Helper()
		steps := rec.of(rid)
		if len(steps) != 2 || !steps[0].prefill() || !steps[1].decode() {
			t.Fatalf("request %s sent %d steps, want a prefill then a decode: %+v", rid, len(steps), steps)
		}
		p, d := steps[0], steps[1]
		if roleOf[p.host] != "prefill" || roleOf[d.host] != "decode" {
			t.Errorf("prefill went to a %s server, decode to a %s server", roleOf[p.host], roleOf[d.host])
		}
		if string(p.body["max_tokens"]) != "1" || string(p.body["stream"]) != "false" || p.body["stream_options"] != nil {
			t.Errorf("prefill step: max_tokens %s, stream %s, stream_options %s; want 1, false, none",
				p.body["max_tokens"], p.body["stream"], p.body["stream_options"])
		}
		var answer struct {
			Params json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal(p.answer, &answer); err != nil || len(answer.Params) == 0 {
			t.Fatalf("prefill answer without kv_transfer_params: %s", p.answer)
		}
		if !bytes.Equal(d.body["kv_transfer_params"], answer.Params) {
			t.Errorf("decode carries %s, want the prefill's answer %s", d.body["kv_transfer_params"], answer.Params)
		}
		if got := string(d.body["stream"]); (got == "true") != stream {
			t.Errorf("decode step stream = %q, want %v", got, stream)
		}
		if d.body["max_tokens"] == nil || string(d.body["max_tokens"]) == "1" {
			t.Errorf("decode step max_tokens %s: want the client's", d.body["max_tokens"])
		}
		return steps
	}

	// Whole.
	var hdr http.Header
	msgs := []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document("report"))}
	resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model, Messages: msgs, MaxTokens: oa.Int(24)},
		withSession("pd-whole"), captureHeaders(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokens < 1000 || resp.Usage.CompletionTokens == 0 {
		t.Errorf("usage %+v: want the decode's, with the whole prompt", resp.Usage)
	}
	steps := checkTwoSteps(t, ridOf(hdr), false)

	// Streamed, with usage.
	stream := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{
		Model: model, Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document("memo"))}, MaxTokens: oa.Int(24),
		StreamOptions: oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)},
	}, withSession("pd-stream"), captureHeaders(&hdr))
	var chunks int
	var usage oa.CompletionUsage
	for stream.Next() {
		chunks++
		if u := stream.Current().Usage; u.PromptTokens > 0 {
			usage = u
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 2 || usage.PromptTokens < 1000 {
		t.Errorf("stream: %d chunks, usage %+v", chunks, usage)
	}
	checkTwoSteps(t, ridOf(hdr), true)

	// The conversation's second turn: its decode server holds the first turn (the KV it
	// pulled), so only a short suffix is uncached and the decider keeps it there whole.
	msgs = append(msgs, oa.AssistantMessage(resp.Choices[0].Message.Content), oa.UserMessage("Shorter, please."))
	resp2, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model, Messages: msgs, MaxTokens: oa.Int(8)},
		withSession("pd-whole"), captureHeaders(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	turn2 := rec.of(ridOf(hdr))
	if len(turn2) != 1 || turn2[0].body["kv_transfer_params"] != nil || turn2[0].host != steps[1].host {
		t.Errorf("warm turn 2: %d steps to %v (turn 1 decoded on %s); want one whole request to its decode server", len(turn2), turn2, steps[1].host)
	}
	if cached := resp2.Usage.PromptTokensDetails.CachedTokens; cached < 1000 {
		t.Errorf("warm turn 2 cached %d tokens, want the first turn's ≥ 1000", cached)
	}
	if got := metric(t, base, `usher_pd_requests_total{decision="disaggregated"}`); got != 2 {
		t.Errorf("disaggregated requests = %v, want 2", got)
	}
	// The decode servers pulled both prompts' KV from the prefill servers with the parameters
	// they were given: a pull succeeds only for the transfer the prefill server announced.
	var served, failed float64
	for _, p := range prefill {
		served += metric(t, p.URL, "simfleet:kv_transfer_pulls_served_total")
	}
	for _, p := range decode {
		failed += metric(t, p.URL, "simfleet:kv_transfer_pulls_failed_total")
	}
	if served != 2 || failed != 0 {
		t.Errorf("KV pulls served by the prefill servers %v, failed on the decode servers %v; want 2 and 0", served, failed)
	}
	if got := metric(t, base, `usher_pd_decode_first_token_seconds_count`); got != 1 {
		t.Errorf("decode first tokens observed = %v, want 1 (the streamed request)", got)
	}
	if got := metric(t, base, `usher_pd_requests_total{decision="aggregated"}`); got != 1 {
		t.Errorf("aggregated requests = %v, want 1", got)
	}
	closedExactlyOnce(t, h)
}

// withSession sets the session header of one request.
func withSession(s string) option.RequestOption { return option.WithHeader("X-Session-Id", s) }

// captureHeaders stores the answer's headers in *h.
func captureHeaders(h *http.Header) option.RequestOption {
	return option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil {
			*h = resp.Header
		}
		return resp, err
	})
}

// TestDisaggregatedPrefillKilled: kill -9 of a prefill server sends the prefill step to the
// other one; with both dead, the decode servers serve requests whole (a counted fallback).
// No client sees an error.
func TestDisaggregatedPrefillKilled(t *testing.T) {
	prefill, decode := pdFleet(t, 2, 2, nil, nil)
	rec := &wire{}
	h, base := pdHandler(t, prefill, decode, rec, nil)
	c := client(base)
	ctx := context.Background()
	ask := func(i int) []sent {
		t.Helper()
		var hdr http.Header
		_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model,
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document(fmt.Sprintf("k%d-", i)))}, MaxTokens: oa.Int(4)},
			withSession(fmt.Sprintf("kill-%d", i)), captureHeaders(&hdr))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		return rec.of(ridOf(hdr))
	}
	ask(0)
	prefill[0].Kill()
	dead := hostOf(prefill[0].URL)
	for i := 1; i <= 6; i++ {
		steps := ask(i)
		last := steps[len(steps)-1]
		if !last.decode() {
			t.Errorf("request %d with one prefill server alive was served whole: %+v", i, steps)
		}
		for _, s := range steps[:len(steps)-1] {
			if s.prefill() && s.host != dead && s.err != nil {
				t.Errorf("request %d: prefill on the live server failed: %v", i, s.err)
			}
		}
	}
	if got := metric(t, base, `usher_pd_requests_total{decision="fallback"}`); got != 0 {
		t.Errorf("fallbacks with a prefill server alive = %v, want 0", got)
	}
	prefill[1].Kill()
	for i := 7; i <= 9; i++ {
		steps := ask(i)
		if last := steps[len(steps)-1]; last.body["kv_transfer_params"] != nil {
			t.Errorf("request %d with no prefill server: its decode step carries %s, want a whole request", i, last.body["kv_transfer_params"])
		}
	}
	if got := metric(t, base, `usher_pd_requests_total{decision="fallback"}`); got < 3 {
		t.Errorf("fallbacks with no prefill server = %v, want ≥ 3", got)
	}
	closedExactlyOnce(t, h)
}

// TestDisaggregatedDecodeRetry: a decode server that accepts and never answers is abandoned
// at the response-header timeout and the decode step retried on the other decode server with
// the same transfer parameters — the prefill runs once.
func TestDisaggregatedDecodeRetry(t *testing.T) {
	prefill, decode := pdFleet(t, 1, 1, nil, nil)
	stuck := simproc.Start(t, simproc.Options{Args: []string{"-fault-hold-headers", "60s"}})
	decode = append(decode, stuck)
	rec := &wire{}
	h, base := pdHandler(t, prefill, decode, rec, func(o *proxy.Options) {
		o.Timeouts.ResponseHeader = 500 * time.Millisecond
		o.Timeouts.Stall = -1
		o.PassiveHealth.ConsecutiveFailures = -1 // keep offering the stuck server
	})
	c := client(base)
	retried := 0
	for i := 0; i < 8 && retried == 0; i++ {
		var hdr http.Header
		_, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{Model: model,
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document(fmt.Sprintf("r%d-", i)))}, MaxTokens: oa.Int(4)},
			withSession(fmt.Sprintf("retry-%d", i)), captureHeaders(&hdr))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		steps := rec.of(ridOf(hdr))
		var prefills, decodes []sent
		for _, s := range steps {
			switch {
			case s.prefill():
				prefills = append(prefills, s)
			case s.decode():
				decodes = append(decodes, s)
			}
		}
		if len(prefills) != 1 {
			t.Errorf("request %d ran %d prefill steps, want 1", i, len(prefills))
		}
		if len(decodes) == 2 {
			retried++
			if decodes[0].host != hostOf(stuck.URL) || decodes[1].host == hostOf(stuck.URL) {
				t.Errorf("decode attempts went to %s then %s; want the stuck server then the other", decodes[0].host, decodes[1].host)
			}
			if !bytes.Equal(decodes[0].body["kv_transfer_params"], decodes[1].body["kv_transfer_params"]) {
				t.Errorf("the retry carries other transfer parameters: %s vs %s", decodes[0].body["kv_transfer_params"], decodes[1].body["kv_transfer_params"])
			}
		}
	}
	if retried == 0 {
		t.Fatal("no request was sent to the stuck decode server in 8 tries")
	}
	closedExactlyOnce(t, h)
}

// TestDisaggregatedCancel: a client that leaves during the prefill step cancels it (no decode
// step is sent); one that leaves during the decode step's stream cancels that; every pick is
// closed exactly once either way.
func TestDisaggregatedCancel(t *testing.T) {
	t.Run("during prefill", func(t *testing.T) {
		prefill, decode := pdFleet(t, 1, 1, []string{"-fault-hold-headers", "30s"}, nil)
		rec := &wire{}
		h, base := pdHandler(t, prefill, decode, rec, func(o *proxy.Options) { o.Timeouts.ResponseHeader = 20 * time.Second })
		c := client(base)
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model,
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document("c"))}, MaxTokens: oa.Int(4)})
		if err == nil {
			t.Fatal("the request succeeded; want it cancelled during its prefill")
		}
		closedExactlyOnce(t, h)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, s := range rec.sent {
			if !s.prefill() {
				t.Errorf("a %s step was sent after the client left during the prefill", s.host)
			}
		}
		if got := metric(t, base, `usher_pd_prefill_attempts_total{result="cancelled"}`); got != 1 {
			t.Errorf("cancelled prefill attempts = %v, want 1", got)
		}
	})
	t.Run("during decode", func(t *testing.T) {
		prefill, decode := pdFleet(t, 1, 1, nil, nil)
		rec := &wire{}
		h, base := pdHandler(t, prefill, decode, rec, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := client(base)
		stream := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{Model: model,
			Messages:  []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document("d"))},
			MaxTokens: oa.Int(4000)}, option.WithJSONSet("ignore_eos", true))
		if !stream.Next() {
			t.Fatalf("no first chunk: %v", stream.Err())
		}
		cancel()
		for stream.Next() {
		}
		stream.Close()
		closedExactlyOnce(t, h)
		if got := metric(t, base, `usher_pd_requests_total{decision="disaggregated"}`); got != 1 {
			t.Errorf("disaggregated = %v, want 1", got)
		}
	})
}

// TestDisaggregatedPrefillFollowsPrefix: a document asked about twice, each time with its
// prefill on a prefill server (the always decider), is prefilled the second time on the
// server that prefilled it the first time, from its prefix cache: the prefill pick follows
// the prompt's prefix as the decode pick does, and the second prefill computes only the
// uncached tail. With the router learning from its picks, and from the servers' KV events.
func TestDisaggregatedPrefillFollowsPrefix(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(map[bool]string{false: "picks", true: "kv-events"}[events], func(t *testing.T) {
			var prefill, decode []*simproc.Proc
			o := simproc.Options{}
			if events {
				o.KVEvents = "tcp://127.0.0.1:0"
			}
			var backends []proxy.Backend
			for i := range 4 {
				p := simproc.Start(t, o)
				role := routing.RolePrefill
				if i < 2 {
					prefill = append(prefill, p)
				} else {
					decode, role = append(decode, p), routing.RoleDecode
				}
				backends = append(backends, proxy.Backend{URL: p.URL, Role: role, KVEvents: p.KVEvents})
			}
			rec := &wire{base: proxyseam.DefaultTransport()}
			opts := testOptions(backends)
			opts.Transport, opts.Decider = rec, disagg.Always
			h, base := startHandler(t, opts)
			c := client(base)
			ctx := context.Background()
			// Four documents, each asked about twice, the second round after the first: each
			// second prefill must find its document on the server that prefilled it first.
			docs := []string{"contract", "ledger", "minutes", "patent"}
			type prefillUsage struct {
				Usage struct {
					Prompt  int `json:"prompt_tokens"`
					Details struct {
						Cached int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			first := map[string]sent{}
			servers := map[string]bool{}
			for round, q := range []string{"Summarise it.", "List the parties."} {
				if round == 1 && events {
					// The first round's blocks reach the router as KV events: wait for them.
					deadline := time.Now().Add(10 * time.Second)
					for metricSum(t, base, "usher_kvevents_events_total") < float64(len(docs)) && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
				}
				for _, d := range docs {
					var hdr http.Header
					_, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: model, MaxTokens: oa.Int(8),
						Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(document(d) + "\n" + q)}}, captureHeaders(&hdr))
					if err != nil {
						t.Fatal(err)
					}
					steps := rec.of(ridOf(hdr))
					if len(steps) != 2 || !steps[0].prefill() {
						t.Fatalf("%s, round %d: %d steps, want a prefill then a decode", d, round, len(steps))
					}
					p := steps[0]
					var u prefillUsage
					if err := json.Unmarshal(p.answer, &u); err != nil {
						t.Fatalf("%s, round %d: the prefill's answer: %v", d, round, err)
					}
					if round == 0 {
						first[d] = p
						servers[p.host] = true
						if u.Usage.Details.Cached != 0 {
							t.Errorf("%s: first prefill cached %d tokens, want 0", d, u.Usage.Details.Cached)
						}
						continue
					}
					if p.host != first[d].host {
						t.Errorf("%s: second prefill on %s, first on %s: want the server that holds the document", d, p.host, first[d].host)
					}
					if c, n := u.Usage.Details.Cached, u.Usage.Prompt; c < 1000 || n-c > 64 {
						t.Errorf("%s: second prefill cached %d of %d tokens: want all but the tail (≥ 1000, ≤ 64 computed)", d, c, n)
					}
				}
			}
			// The first prefills are sent one at a time, so no prefill server has load when
			// the next is picked: where they land is the pickers' tie-break, not asserted.
			t.Logf("first prefills on %d of 2 servers", len(servers))
			var hits float64
			for _, p := range prefill {
				hits += metricSum(t, p.URL, "vllm:prefix_cache_hits_total")
			}
			if hits < float64(len(docs))*1000 {
				t.Errorf("prefill servers' prefix-cache hits %v tokens, want the documents' ≥ %d", hits, len(docs)*1000)
			}
			closedExactlyOnce(t, h)
		})
	}
}

// metricSum returns the sum of the series of the metric name, whatever their labels, on
// base's /metrics.
func metricSum(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	sum := 0.0
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || (line[0] != ' ' && line[0] != '{') {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sum += f
	}
	return sum
}
