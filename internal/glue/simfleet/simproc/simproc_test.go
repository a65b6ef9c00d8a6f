//go:build unix

package simproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

// get and chat send one request on a fresh connection, so that no pooled connection to an
// earlier process hides what the current one does.
func get(url string, timeout time.Duration) (*http.Response, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	return c.Get(url)
}

func chat(t *testing.T, url, content string, stream bool) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"model":      engine.Demo.Model,
		"messages":   []simfleet.Message{simfleet.TextMessage("user", content)},
		"max_tokens": 8,
		"stream":     stream,
	})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion (stream %v): %d %s, %v", stream, resp.StatusCode, b, err)
	}
	return string(b)
}

// answers checks that GET /v1/models lists the demo model.
func answers(t *testing.T, p *Proc) {
	t.Helper()
	resp, err := get(p.URL+"/v1/models", 5*time.Second)
	if err != nil {
		t.Fatalf("GET /v1/models: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), engine.Demo.Model) {
		t.Fatalf("GET /v1/models: %d %s, want 200 listing %s", resp.StatusCode, b, engine.Demo.Model)
	}
}

// A process through its faults: answering, frozen, thawed, killed and restarted on the same
// address; and nothing left running in the test process afterwards.
func TestLifecycle(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Run("faults", func(t *testing.T) {
		p := Start(t, Options{})
		if !strings.HasPrefix(p.URL, "http://127.0.0.1:") || strings.HasSuffix(p.URL, ":0") || p.KVEvents != "" || p.Replay != "" {
			t.Fatalf("URL %q KVEvents %q Replay %q: want a bound loopback URL and no KV endpoints", p.URL, p.KVEvents, p.Replay)
		}
		answers(t, p)
		if got := chat(t, p.URL, "Hello there!", false); !strings.Contains(got, `"finish_reason"`) {
			t.Errorf("chat completion: %s", got)
		}
		if got := chat(t, p.URL, "Hello there!", true); !strings.HasSuffix(strings.TrimSpace(got), "data: [DONE]") {
			t.Errorf("streamed chat completion does not end with [DONE]: %s", got)
		}

		p.Stop()
		start := time.Now()
		_, err := get(p.URL+"/v1/models", 300*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("stopped: GET /v1/models: %v, want a timeout", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("stopped: timed out after %v, want 300ms", d)
		}
		if !p.Alive() {
			t.Fatal("stopped: not alive")
		}
		p.Cont()
		answers(t, p)

		pid := p.PID()
		p.Kill()
		if p.Alive() {
			t.Fatal("killed: still alive")
		}
		if _, err := get(p.URL+"/v1/models", time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("killed: GET /v1/models: %v, want connection refused", err)
		}

		url := p.URL
		start = time.Now()
		p.Restart(t)
		t.Logf("restarted on the same port in %v", time.Since(start))
		if p.URL != url || p.PID() == pid || !p.Alive() {
			t.Fatalf("restarted: URL %s pid %d alive %v, want %s, a new pid (not %d), alive", p.URL, p.PID(), p.Alive(), url, pid)
		}
		answers(t, p)
		chat(t, p.URL, "Hello again!", true)

		p.Stop() // Restart and cleanup kill a stopped process too
		p.Restart(t)
		answers(t, p)
		p.Stop()
	})
	// The subtest's cleanup killed the process: its waiter and os/exec's copiers are gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after cleanup, %d before", n, before)
	}
}

// Restart retries while the port is taken, and starts the server once it is free.
func TestRestartRetriesBind(t *testing.T) {
	p := Start(t, Options{})
	p.Kill()
	ln, err := net.Listen("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatalf("taking the killed server's port: %v", err)
	}
	const held = 300 * time.Millisecond
	release := time.AfterFunc(held, func() { ln.Close() })
	defer release.Stop()
	start := time.Now()
	p.Restart(t)
	if d := time.Since(start); d < held {
		t.Errorf("restarted after %v, while the port was held for %v", d, held)
	}
	answers(t, p)
}

// With -kv-events, a Subscriber following the process keeps a prefix index exact, under the
// pod name the topic carries by default (the listen address), and follows the process through
// a kill -9 and a restart on the same ports.
func TestKVEvents(t *testing.T) {
	p := Start(t, Options{KVEvents: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0"})
	for _, ep := range []string{p.KVEvents, p.Replay} {
		if !strings.HasPrefix(ep, "tcp://127.0.0.1:") || strings.HasSuffix(ep, ":0") {
			t.Fatalf("KVEvents %q Replay %q: want bound loopback endpoints", p.KVEvents, p.Replay)
		}
	}
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ix.AddBackend(strings.TrimPrefix(p.URL, "http://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := kvevents.New(kvevents.Options{
		Index:      ix,
		Sources:    []kvevents.Source{{Endpoint: p.KVEvents, ReplayEndpoint: p.Replay}},
		MaxBackoff: 100 * time.Millisecond, ProbeInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	go sub.Run(t.Context())
	t.Cleanup(func() { sub.Close() })

	// held returns the number of leading blocks of the rendered prompt the index holds.
	held := func(content string) int32 {
		text, _ := simfleet.RenderChat([]simfleet.Message{simfleet.TextMessage("user", content)}, true)
		chain := prefixcache.HashTokens(nil, prefixcache.Seed(engine.Demo.Model, "", ""), simfleet.Tokenize(text), engine.Demo.BlockSize)
		return ix.Match(nil, chain)[id]
	}
	cached := func(content string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); held(content) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s the index holds no block of %q; subscriber %+v", content, sub.Stats())
			}
		}
	}
	// The PUB socket drops what it sends before the subscription reaches it, and the
	// subscriber learns the pod from the first topic it receives: chat until a batch got
	// through, under the pod name of the listen address.
	for i := 0; sub.Stats().Batches == 0; i++ {
		if i == 500 {
			t.Fatalf("no KV-event batch received after %d chat completions; subscriber %+v", i, sub.Stats())
		}
		chat(t, p.URL, fmt.Sprintf("Warm-up %d: is anyone listening?", i), false)
		time.Sleep(10 * time.Millisecond)
	}
	if got, want := sub.Sources()[0].Backend, strings.TrimPrefix(p.URL, "http://"); got != want {
		t.Errorf("pod from the topic %q, want the listen address %q", got, want)
	}
	// Prompts that share no block, so that each one's blocks come from its own batches.
	before := "Before the crash: what is a prefix cache, and why would a router care about it at all?"
	after := "After the restart: the cache is empty again, and the sequence numbers start from zero."
	chat(t, p.URL, before, false)
	cached(before)

	p.Kill()
	p.Restart(t)
	chat(t, p.URL, after, false)
	cached(after)
	// The subscriber told the new process from the old one and cleared what the old one held.
	if s := sub.Stats(); s.Resets == 0 {
		t.Errorf("subscriber stats %+v: want the restart detected", s)
	}
	if n := held(before); n != 0 {
		t.Errorf("after the restart the index holds %d blocks of the killed process", n)
	}
}

// The engine flags configure the process as the bench simulator's servers are: its metrics
// report the KV cache it was given, and a prompt longer than its token budget still runs (in
// chunks); a negative value is refused.
func TestEngineFlags(t *testing.T) {
	p := Start(t, Options{Args: []string{"-kv-blocks", "64", "-block-size", "32", "-max-num-seqs", "2", "-max-batched-tokens", "256"}})
	resp, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `block_size="32"`) || !strings.Contains(string(body), `num_gpu_blocks="64"`) {
		t.Errorf("cache config not the flags':\n%s", body)
	}
	req := `{"model":"usher/demo","max_tokens":4,"ignore_eos":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 600) + `"}]}`
	r2, err := http.Post(p.URL+"/v1/chat/completions", "application/json", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK {
		t.Errorf("a 600-word prompt over a 256-token step budget: %d", r2.StatusCode)
	}
	out, err := exec.Command(Build(t), "-kv-blocks", "-1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "must not be negative") {
		t.Errorf("-kv-blocks -1: %v %s", err, out)
	}
}

// metric returns the value of an unlabelled series on a process's /metrics.
func metric(t *testing.T, p *Proc, name string) float64 {
	t.Helper()
	resp, err := get(p.URL+"/metrics", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s on %s/metrics", name, p.URL)
	return 0
}

// Disaggregated serving between two processes: the decode process pulls the prefill
// process's KV over the side channel its answer advertised (with the transfer flags); once
// the prefill process is killed, a decode with the same parameters recomputes and counts a
// failed pull.
func TestDisaggregated(t *testing.T) {
	pre := Start(t, Options{Args: []string{"-kv-transfer-timeout", "30s"}})
	dec := Start(t, Options{Args: []string{"-kv-transfer-per-token", "1us", "-kv-transfer-latency", "2ms"}})
	prompt := strings.Repeat("Summarise the quarterly ledger line by line. ", 40)
	complete := func(url string, maxTokens int, params json.RawMessage) (usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}, answered json.RawMessage) {
		body, _ := json.Marshal(map[string]any{"model": engine.Demo.Model, "prompt": prompt, "max_tokens": maxTokens, "kv_transfer_params": params})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Usage            json.RawMessage `json:"usage"`
			KVTransferParams json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("completion: %d, %v", resp.StatusCode, err)
		}
		_ = json.Unmarshal(a.Usage, &usage)
		return usage, a.KVTransferParams
	}
	_, params := complete(pre.URL, 1, json.RawMessage(`{"do_remote_decode": true}`))
	if !strings.Contains(string(params), `"remote_port":`+pre.URL[strings.LastIndex(pre.URL, ":")+1:]) {
		t.Fatalf("prefill answer's kv_transfer_params %s do not name %s", params, pre.URL)
	}
	u, _ := complete(dec.URL, 4, params)
	if u.PromptTokens < 400 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("decode usage %+v", u)
	}
	for _, c := range []struct {
		p    *Proc
		name string
		want float64
	}{
		{pre, "simfleet:kv_transfer_prefills_total", 1},
		{pre, "simfleet:kv_transfer_pulls_served_total", 1},
		{pre, "simfleet:kv_transfer_pending", 0},
		{dec, "simfleet:kv_transfer_decodes_total", 1},
		{dec, "simfleet:kv_transfer_pulls_failed_total", 0},
	} {
		if got := metric(t, c.p, c.name); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.p.URL, c.name, got, c.want)
		}
	}
	if got := metric(t, dec, "simfleet:kv_transfer_seconds_total"); got < 0.002 {
		t.Errorf("simfleet:kv_transfer_seconds_total = %v, want at least the 2ms latency", got)
	}

	pre.Kill()
	complete(dec.URL, 4, params)
	if got := metric(t, dec, "simfleet:kv_transfer_pulls_failed_total"); got != 1 {
		t.Errorf("a pull from a killed prefill process: %v failed pulls, want 1", got)
	}
}
