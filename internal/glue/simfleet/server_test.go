package simfleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/usher-llm/usher/internal/engine"
)

// fast is the demo profile with a 0.1 ms step, so tests finish quickly.
func fast() engine.Profile {
	p := engine.Demo
	p.StepBase = 100 * time.Microsecond
	p.PrefillPerToken = 100 * time.Nanosecond
	p.DecodePerSeq = time.Microsecond
	return p
}

func startFleet(t *testing.T, n int, mod func(i int, o *Options)) *Fleet {
	t.Helper()
	f, err := StartFleet(FleetOptions{Servers: n, Options: Options{Engine: engine.Options{Profile: fast()}}, Configure: mod})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func decode[T any](t *testing.T, resp *http.Response, wantStatus int) T {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, wantStatus, body)
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return v
}

func chatBody(model string, maxTokens int, stream bool, msgs ...string) map[string]any {
	var m []map[string]string
	for i, text := range msgs {
		role := "assistant"
		switch {
		case i == 0:
			role = "system"
		case i%2 == 1:
			role = "user"
		}
		m = append(m, map[string]string{"role": role, "content": text})
	}
	b := map[string]any{"model": model, "messages": m, "max_tokens": maxTokens, "stream": stream}
	if stream {
		b["stream_options"] = map[string]bool{"include_usage": true}
	}
	return b
}

// readSSE returns the data payloads of an event stream.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank {
			t.Fatalf("event without a blank line before it: %q", line)
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		out = append(out, payload)
		blank = false
	}
	return out
}

const system = "You are a careful assistant. Follow the house rules: answer briefly, cite sources, and never invent facts. "

func TestChatStreamAndWhole(t *testing.T) {
	f := startFleet(t, 1, nil)
	url := f.URLs()[0] + "/v1/chat/completions"
	model := f.Servers()[0].Model()

	whole := decode[chatResponse](t, post(t, url, chatBody(model, 12, false, system, "What is a KV cache?")), 200)
	if whole.Object != "chat.completion" || len(whole.Choices) != 1 || whole.Choices[0].Message.Role != "assistant" {
		t.Fatalf("response %+v", whole)
	}
	answer := whole.Choices[0].Message.Content
	if whole.Usage == nil || whole.Usage.CompletionTokens != TokenCount(answer) ||
		whole.Usage.TotalTokens != whole.Usage.PromptTokens+whole.Usage.CompletionTokens {
		t.Fatalf("usage %+v for answer %q", whole.Usage, answer)
	}

	resp := post(t, url, chatBody(model, 12, true, system, "What is a KV cache?"))
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	events := readSSE(t, resp.Body)
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var text strings.Builder
	var finish string
	for i, ev := range events[:len(events)-2] {
		var c chatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || c.Usage != nil || c.ID == "" {
			t.Fatalf("chunk %d: %s", i, ev)
		}
		d := c.Choices[0].Delta
		if i == 0 && (d.Role != "assistant" || d.Content == nil || *d.Content != "") {
			t.Fatalf("first chunk %s, want the role", ev)
		}
		if d.Content != nil {
			text.WriteString(*d.Content)
		}
		if fr := c.Choices[0].FinishReason; fr != nil {
			finish = *fr
		}
	}
	if text.String() != answer {
		t.Errorf("streamed %q, whole %q", text.String(), answer)
	}
	if finish != *whole.Choices[0].FinishReason {
		t.Errorf("finish reason streamed %q, whole %q", finish, *whole.Choices[0].FinishReason)
	}
	var last chatResponse
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil {
		t.Fatal(err)
	}
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != whole.Usage.CompletionTokens {
		t.Fatalf("usage chunk %s", events[len(events)-2])
	}
	// The second request repeats the first prompt: all but its last block is cached.
	if c := last.Usage.PromptTokensDetails.CachedTokens; c == 0 || c >= last.Usage.PromptTokens {
		t.Errorf("cached_tokens %d of %d prompt tokens", c, last.Usage.PromptTokens)
	}
}

func TestCachedTokensAcrossTurns(t *testing.T) {
	f := startFleet(t, 1, nil)
	url := f.URLs()[0] + "/v1/chat/completions"
	model := f.Servers()[0].Model()
	bs := f.Servers()[0].Profile().BlockSize

	first := decode[chatResponse](t, post(t, url, chatBody(model, 40, false, system+system, "Tell me about prefix caching.")), 200)
	if first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request has %d cached tokens", first.Usage.PromptTokensDetails.CachedTokens)
	}
	// Another user sharing the system prompt reuses its blocks.
	other := decode[chatResponse](t, post(t, url, chatBody(model, 8, false, system+system, "Something else entirely.")), 200)
	sysTokens := TokenCount("<|im_start|>system\n" + system + system + "<|im_end|>\n")
	if got, want := other.Usage.PromptTokensDetails.CachedTokens, sysTokens/bs*bs; got != want {
		t.Errorf("shared system prompt: cached %d, want %d", got, want)
	}
	// The next turn sends the history back, including the answer: prompt and answer are cached
	// except the last answer token (never computed) and the partial block around it.
	answer := first.Choices[0].Message.Content
	next := decode[chatResponse](t, post(t, url, chatBody(model, 8, false, system+system, "Tell me about prefix caching.", answer, "And eviction?")), 200)
	covered := first.Usage.PromptTokens + first.Usage.CompletionTokens - 1
	if got, want := next.Usage.PromptTokensDetails.CachedTokens, covered/bs*bs; got != want {
		t.Errorf("next turn: cached %d, want %d (prompt %d + answer %d)", got, want, first.Usage.PromptTokens, first.Usage.CompletionTokens)
	}
}

func TestCompletions(t *testing.T) {
	f := startFleet(t, 1, nil)
	url := f.URLs()[0] + "/v1/completions"
	for _, prompt := range []any{"Once upon a time", []string{"Once upon a time"}, Tokenize("Once upon a time")} {
		got := decode[chatResponse](t, post(t, url, map[string]any{"prompt": prompt, "max_tokens": 5, "ignore_eos": true}), 200)
		if len(got.Choices) != 1 || *got.Choices[0].FinishReason != "length" || TokenCount(got.Choices[0].Text) != 5 ||
			got.Usage.CompletionTokens != 5 || got.Usage.PromptTokens != 4 {
			t.Errorf("prompt %v: %+v %+v", prompt, got.Choices, got.Usage)
		}
	}
	resp := post(t, url, map[string]any{"prompt": "Once upon a time", "max_tokens": 3, "stream": true, "ignore_eos": true})
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var text string
	for _, ev := range events[:len(events)-1] {
		var c chatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" {
			t.Fatalf("chunk %s", ev)
		}
		text += c.Choices[0].Text
	}
	if len(events) != 4 || events[3] != "[DONE]" || TokenCount(text) != 3 {
		t.Errorf("stream %q", events)
	}
}

func TestTokenizeEndpoint(t *testing.T) {
	f := startFleet(t, 1, nil)
	url := f.URLs()[0] + "/tokenize"
	type tok struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}
	got := decode[tok](t, post(t, url, map[string]any{"model": f.Servers()[0].Model(), "prompt": "Hello there, world"}), 200)
	want := Tokenize("Hello there, world")
	if got.Count != len(want) || fmt.Sprint(got.Tokens) != fmt.Sprint(want) || got.MaxModelLen != engine.Demo.MaxModelLen {
		t.Errorf("prompt: %+v, want tokens %v", got, want)
	}
	msgs := []Message{TextMessage("system", "Be brief."), TextMessage("user", "Hi")}
	got = decode[tok](t, post(t, url, map[string]any{"messages": msgs}), 200)
	text, _ := RenderChat(msgs, true)
	if fmt.Sprint(got.Tokens) != fmt.Sprint(Tokenize(text)) {
		t.Errorf("messages: %v, want %v", got.Tokens, Tokenize(text))
	}
	// The chat endpoint reports the same prompt length /tokenize gives.
	chat := decode[chatResponse](t, post(t, f.URLs()[0]+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}), 200)
	if chat.Usage.PromptTokens != got.Count {
		t.Errorf("chat prompt_tokens %d, /tokenize count %d", chat.Usage.PromptTokens, got.Count)
	}
}

func TestErrors(t *testing.T) {
	f := startFleet(t, 1, func(_ int, o *Options) { o.MaxBodyBytes = 4096 })
	base := f.URLs()[0]
	model := f.Servers()[0].Model()
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"bad JSON", "POST", "/v1/chat/completions", `{"messages": [`, 400},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"` + model + `"}`, 400},
		{"bad content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":42}]}`, 400},
		{"n=2", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400},
		{"max_tokens 0", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400},
		{"too long", "POST", "/v1/completions", `{"prompt":"hi","max_tokens":100000}`, 400},
		{"no prompt", "POST", "/v1/completions", `{"max_tokens":3}`, 400},
		{"two prompts", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400},
		{"body too large", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("x ", 4096) + `"}`, 413},
		{"GET chat", "GET", "/v1/chat/completions", ``, 405},
		{"tokenize nothing", "POST", "/tokenize", `{}`, 400},
		{"unknown path", "GET", "/v2/whatever", ``, 404},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e apiError
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || json.Unmarshal(body, &e) != nil || e.Error.Message == "" || e.Error.Code != tt.status {
			t.Errorf("%s: status %d body %s, want %d with an error object", tt.name, resp.StatusCode, body, tt.status)
		}
	}
}

func TestModelsAndHealth(t *testing.T) {
	f := startFleet(t, 2, func(i int, o *Options) { o.Model = fmt.Sprintf("sim-%d", i) })
	for i, u := range f.URLs() {
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}
		resp, err := http.Get(u + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		list = decode[struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}](t, resp, 200)
		if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != fmt.Sprintf("sim-%d", i) {
			t.Errorf("server %d models %+v", i, list)
		}
		resp, err = http.Get(u + "/health")
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("health: %v %v", resp, err)
		}
		resp.Body.Close()
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestMetrics(t *testing.T) {
	f := startFleet(t, 1, nil)
	s := f.Servers()[0]
	url := f.URLs()[0]
	for range 3 {
		decode[chatResponse](t, post(t, url+"/v1/chat/completions", chatBody(s.Model(), 4, false, system, "hi")), 200)
	}
	fams := scrape(t, url)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
		"vllm:generation_tokens_total", "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:request_success_total", "vllm:num_preemptions_total"} {
		fam, ok := fams[name]
		if !ok || len(fam.Metric) == 0 {
			t.Errorf("%s missing", name)
			continue
		}
		l := labels(fam.Metric[0])
		if l["model_name"] != s.Model() || l["engine"] != "0" {
			t.Errorf("%s labels %v", name, l)
		}
	}
	cfg := fams["vllm:cache_config_info"]
	if cfg == nil || len(cfg.Metric) != 1 {
		t.Fatal("vllm:cache_config_info missing")
	}
	if l := labels(cfg.Metric[0]); l["block_size"] != "16" || l["num_gpu_blocks"] != fmt.Sprint(engine.Demo.NumBlocks) || l["engine"] != "0" {
		t.Errorf("cache_config_info labels %v", l)
	}
	if got := fams["vllm:time_to_first_token_seconds"].Metric[0].GetHistogram().GetSampleCount(); got != 3 {
		t.Errorf("TTFT histogram count %d, want 3", got)
	}
	st := s.Stats()
	if q, h := fams["vllm:prefix_cache_queries_total"].Metric[0].GetCounter().GetValue(), fams["vllm:prefix_cache_hits_total"].Metric[0].GetCounter().GetValue(); q != float64(st.PrefixQueries) || h != float64(st.PrefixHits) || h == 0 {
		t.Errorf("prefix cache queries/hits %v/%v, engine %d/%d", q, h, st.PrefixQueries, st.PrefixHits)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline. It is a wait for the
// server's goroutine, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	f := startFleet(t, 1, func(_ int, o *Options) { o.Engine.Profile = engine.Demo })
	s := f.Servers()[0]
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"messages": []Message{TextMessage("user", "write a lot")}, "max_tokens": 5000,
		"ignore_eos": true, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", f.URLs()[0]+"/v1/chat/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first chunk: the request is running
		t.Fatal(err)
	}
	if st := s.Stats(); st.Running != 1 {
		t.Fatalf("running %d, want 1", st.Running)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the abort", func() bool { st := s.Stats(); return st.Aborted == 1 && st.Running == 0 && st.UsedBlocks == 0 })
	fams := scrape(t, f.URLs()[0])
	for _, m := range fams["vllm:request_success_total"].GetMetric() {
		if labels(m)["finished_reason"] == "abort" && m.GetCounter().GetValue() != 1 {
			t.Errorf("abort counter %v", m.GetCounter().GetValue())
		}
	}
}

func TestCloseEndsStreams(t *testing.T) {
	f, err := StartFleet(FleetOptions{Servers: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"prompt": "go on", "max_tokens": 5000, "ignore_eos": true, "stream": true})
	resp, err := http.Post(f.URLs()[0]+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var rest []byte
	go func() {
		defer wg.Done()
		rest, _ = io.ReadAll(br)
	}()
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	resp.Body.Close()
	if !bytes.Contains(rest, []byte(`"ServiceUnavailableError"`)) || !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		t.Errorf("stream after Close ends with %q", rest[max(0, len(rest)-200):])
	}
	if st := f.Servers()[0].Stats(); st.Running+st.Waiting != 0 || st.UsedBlocks != 0 {
		t.Errorf("after Close: %+v", st)
	}
}

func TestKVEventsHook(t *testing.T) {
	var mu sync.Mutex
	var stored, tokens int
	f := startFleet(t, 1, func(_ int, o *Options) {
		o.OnKVEvents = func(evs []engine.KVEvent) {
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range evs {
				if ev.Kind == engine.KVBlockStored {
					stored += len(ev.Hashes)
					tokens += len(ev.Tokens)
				}
			}
		}
	})
	got := decode[chatResponse](t, post(t, f.URLs()[0]+"/v1/chat/completions", chatBody("", 3, false, system, "hi")), 200)
	mu.Lock()
	defer mu.Unlock()
	if want := got.Usage.PromptTokens / 16; stored < want || tokens != stored*16 {
		t.Errorf("hook saw %d stored blocks with %d tokens, want at least %d blocks of 16 tokens", stored, tokens, want)
	}
}

func TestConcurrentClients(t *testing.T) {
	f := startFleet(t, 2, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := f.URLs()[i%2] + "/v1/chat/completions"
			b, _ := json.Marshal(chatBody("", 20, i%3 == 0, system, fmt.Sprintf("question %d", i)))
			resp, err := http.Post(url, "application/json", bytes.NewReader(b))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
				errs <- fmt.Errorf("status %d, %v", resp.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, s := range f.Servers() {
		if st := s.Stats(); st.Finished != 20 || st.UsedBlocks != 0 {
			t.Errorf("server stats %+v", st)
		}
	}
}

func TestKillMidStream(t *testing.T) {
	f := startFleet(t, 2, func(_ int, o *Options) { o.Engine.Profile = engine.Demo })
	b, _ := json.Marshal(map[string]any{"prompt": "go on", "max_tokens": 5000, "ignore_eos": true, "stream": true})
	resp, err := http.Post(f.URLs()[0]+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := f.Kill(0); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err == nil || bytes.Contains(rest, []byte("[DONE]")) {
		t.Errorf("killed stream ended cleanly (err %v, tail %q)", err, rest[max(0, len(rest)-100):])
	}
	if _, err := http.Get(f.URLs()[0] + "/health"); err == nil {
		t.Error("killed server still answers")
	}
	// The other server is unaffected.
	decode[chatResponse](t, post(t, f.URLs()[1]+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 2}), 200)
	if err := f.Kill(5); err == nil {
		t.Error("Kill(5) succeeded on a 2-server fleet")
	}
}
