package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/proxy/tokenizer"
)

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"-backend", "http://10.0.0.7:8000,engine=sglang,kv-events=tcp://10.0.0.7:5557", "-policy", "vtc", "-router", "llm-d"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Backends) != 1 || c.Backends[0].Engine != "sglang" || c.Backends[0].KVEvents != "tcp://10.0.0.7:5557" {
		t.Errorf("backends = %+v", c.Backends)
	}
	if c.Tokenizer != "bytes" {
		t.Errorf("tokenizer with real backends = %q, want bytes", c.Tokenizer)
	}
	if c, err := parseConfig(nil); err != nil || c.Tokenizer != "local" {
		t.Errorf("defaults: tokenizer %q, %v; want local with the simulated fleet", c.Tokenizer, err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.json")
	if err := os.WriteFile(file, []byte(`{"policy":"las","ttl":"30s","bounded_wait":"5s","tenant_bands":{"vip":0}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = parseConfig([]string{"-config", file, "-router", "dynamo"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != "las" || c.TTL != 30*time.Second || c.BoundedWait != 5*time.Second || c.Router.Extends != "dynamo" || c.TenantBands["vip"] != 0 {
		t.Errorf("config file + flags = %+v", c.Config)
	}

	// -tokenizer local:DIR loads the model's tokenizer (package proxy/tokenizer); a directory
	// without one is a start-up error naming it and the file.
	c, err = parseConfig([]string{"-backend", "http://10.0.0.7:8000", "-tokenizer", "local:../../proxy/tokenizer/testdata/bytelevel"})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := c.options(); err != nil {
		t.Error(err)
	} else if _, ok := o.Tokenizer.(*tokenizer.Encoder); !ok {
		t.Errorf("-tokenizer local:DIR: Tokenizer is %T, want *tokenizer.Encoder", o.Tokenizer)
	}
	missing := filepath.Join(dir, "no-model")
	if _, err := parseConfig([]string{"-backend", "http://10.0.0.7:8000", "-tokenizer", "local:" + missing}); err == nil ||
		!strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("-tokenizer local:%s: %v, want an error naming the directory and tokenizer.json", missing, err)
	}

	// The Gittins policies: gittins-bounded-wait takes -bounded-wait, and the learning flags
	// build the policy here; they need a Gittins policy, and a W below the TTL.
	for _, args := range [][]string{
		{"-policy", "gittins"},
		{"-policy", "gittins-bounded-wait", "-bounded-wait", "10s"},
		{"-policy", "gittins", "-gittins-idle", "10s", "-gittins-min-sessions", "30"},
		{"-policy", "gittins-bounded-wait", "-bounded-wait", "10s", "-gittins-idle", "10s"},
		{"-policy", "gittins", "-gittins-rebuild-every", "8"},
	} {
		c, err := parseConfig(args)
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		if o, err := c.options(); err != nil || o.Policy == nil {
			t.Errorf("%q: policy %v, %v", args, o.Policy, err)
		}
	}
	for _, args := range [][]string{
		{"-policy", "fcfs", "-gittins-idle", "10s"},
		{"-policy", "gittins", "-gittins-min-sessions", "-1"},
		{"-policy", "gittins", "-gittins-rebuild-every", "-1"},
		{"-policy", "gittins-bounded-wait", "-bounded-wait", "90s"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}

	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"polcy":"las"}`), 0o600)
	for _, args := range [][]string{
		{"-policy", "nope"},
		{"-router", "nope"},
		{"-backend", "ftp://x"},
		{"-backend", "http://x:1,colour=red"},
		{"-backend", "http://x:1,engine=cobol"},
		{"-ttl", "10s", "-bounded-wait", "20s"},
		{"-max-queue", "0"},
		{"-tokenizer", "sentencepiece"},
		{"-sim-servers", "0"},
		{"-sim-servers", "4", "-sim-prefill", "4"},
		{"-sim-prefill", "-1"},
		{"-sim-servers", "4", "-sim-prefill", "2", "-sim-kv-both"},
		{"-decider", "sometimes"},
		{"-decider-params", "{"},
		{"-config", bad},
		{"-config", filepath.Join(dir, "missing.json")},
		{"-metrics-token-file", file},
		{"-backend", "http://x:1,name=x:1"},
		{"-backend", "http://x:1,name=a", "-backend", "http://x:2,name=a"},
		{"stray"},
	} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", args)
		}
	}
}

// The main job as the README runs it: the gateway on its embedded simulated fleet (with KV
// events), one request, a graceful shutdown.
func TestRun(t *testing.T) {
	runOnce(t, []string{"-listen", "127.0.0.1:0", "-sim-servers", "2"}, "usher_admissions_total", "usher_backend_inflight_requests", "usher_kvevents_connected")
}

// The embedded fleet disaggregated: two prefill and two decode servers, every request's
// prefill sent to a prefill server.
func TestRunDisaggregated(t *testing.T) {
	runOnce(t, []string{"-listen", "127.0.0.1:0", "-sim-servers", "4", "-sim-prefill", "2", "-decider", "always"},
		`usher_pd_requests_total{decision="disaggregated"} 1`, `usher_pd_prefill_attempts_total{result="ok"} 1`)
}

// TestRunLoRA: the simulated fleet serves adapters; the gateway learns them from the servers'
// /v1/models, serves a request naming one, and the servers export their adapters.
func TestRunLoRA(t *testing.T) {
	runWith(t, []string{"-listen", "127.0.0.1:0", "-sim-servers", "2", "-sim-lora", "sql-lora,chat-lora", "-sim-max-loras", "1"},
		`{"model":"sql-lora","max_tokens":5,"messages":[{"role":"user","content":"Hello!"}]}`,
		`usher_picks_total`)
}

// runOnce runs the gateway with args, sends one request, checks /metrics holds each of want,
// and shuts it down.
func runOnce(t *testing.T, args []string, want ...string) {
	t.Helper()
	runWith(t, args, `{"model":"usher/demo","max_tokens":5,"messages":[{"role":"user","content":"Hello!"}]}`, want...)
}

// runWith is runOnce with the request's body.
func runWith(t *testing.T, args []string, body string, want ...string) {
	t.Helper()
	c, err := parseConfig(args)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	addrs, stop := start(t, c, &out, 1)
	base := addrs[0]
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Choices []json.RawMessage `json:"choices"`
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &answer) != nil || len(answer.Choices) != 1 {
		t.Fatalf("answer %d %s", resp.StatusCode, data)
	}
	m, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(m.Body)
	m.Body.Close()
	for _, want := range want {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	stop()
	if !strings.Contains(out.String(), "usher gateway listening on") {
		t.Errorf("output %q lacks the listening line", out.String())
	}
}

// start runs the gateway of c, its output to out, and returns the first n addresses it
// announces (the API's first, then the metrics port's) and stop, which shuts it down and
// reports an error from the shutdown. It fails the test if run returns before announcing them.
func start(t *testing.T, c config, out io.Writer, n int) (addrs []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, n)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, out, ready) }()
	for range n {
		select {
		case a := <-ready:
			addrs = append(addrs, a)
		case err := <-done:
			cancel()
			t.Fatalf("run: %v", err)
		}
	}
	return addrs, func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}
}

// get GETs url over loopback with a bearer token ("" for none): status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// -metrics-listen with -metrics-token-file: /metrics leaves the API's port (404 there) for a
// listener of its own that wants a token from the file, re-read when it is replaced; the
// simulated fleet's backends are known by name, so no address is listed; the retry and
// clamped-score series are there.
func TestRunMetricsListen(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "metrics-tokens")
	if err := os.WriteFile(tokens, []byte("# scrapers\nfirst-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-sim-servers", "2", "-metrics-listen", "127.0.0.1:0", "-metrics-token-file", tokens})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	addrs, stop := start(t, c, &out, 2)
	base, mbase := addrs[0], addrs[1]
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"usher/demo","max_tokens":5,"messages":[{"role":"user","content":"Hello!"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	if status, _ := get(t, base+"/metrics", "first-token"); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API's port: %d, want 404", status)
	}
	for _, tc := range []struct {
		token  string
		status int
	}{{"", 401}, {"second-token", 401}, {"first-token", 200}} {
		if status, _ := get(t, mbase+"/metrics", tc.token); status != tc.status {
			t.Errorf("token %q: %d, want %d", tc.token, status, tc.status)
		}
	}
	_, body := get(t, mbase+"/metrics", "first-token")
	for _, want := range []string{`usher_picks_total{backend="sim-0"}`, `usher_retries_total{outcome="retried",reason="connect"} 0`, `usher_clamped_scores_total{scorer=`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if strings.Contains(body, `backend="http`) {
		t.Error("/metrics lists a backend by its URL")
	}
	// Rotated the way a Secret volume is: a new file renamed over the old.
	if err := os.WriteFile(tokens+".new", []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokens+".new", tokens); err != nil {
		t.Fatal(err)
	}
	if status, _ := get(t, mbase+"/metrics", "first-token"); status != http.StatusUnauthorized {
		t.Errorf("the rotated-out token: %d, want 401", status)
	}
	if status, _ := get(t, mbase+"/metrics", "second-token"); status != http.StatusOK {
		t.Errorf("the new token: %d, want 200", status)
	}
	stop()
	if !strings.Contains(out.String(), "metrics on http://") || strings.Contains(out.String(), "first-token") {
		t.Errorf("output %q: want the metrics line, and no token", out.String())
	}
}

// TestRunQuota: -quota reads the configuration's quota object; the request is weighed
// against it (usher_quota_*), and a file that is not that object is refused.
func TestRunQuota(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "quota.json")
	if err := os.WriteFile(file, []byte(`{"quota": {"limits": [{"window": "1h", "requests": 10, "tokens": 100000}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	runOnce(t, []string{"-listen", "127.0.0.1:0", "-sim-servers", "1", "-quota", file}, `usher_quota_requests_total{outcome="admitted"`)
	bare := filepath.Join(dir, "bare.json")
	if err := os.WriteFile(bare, []byte(`{"limits": [{"window": "1h", "requests": 10}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parseConfig([]string{"-quota", bare}); err == nil || !strings.Contains(err.Error(), `want {"quota"`) {
		t.Errorf("-quota with a bare object: %v, want an error", err)
	}
}

// TestRunKVBoth: the embedded fleet in kv_both mode under the role planner (named here only to
// fit its prefill rate to the demo profile's servers and shorten its demand's window; with
// kv_both servers and no -decider it is the decider by default). Answers running on every server and a long document (prefilled where it is decoded
// while no server is in prefill) make the planner move a server into prefill; the next
// document is prefilled there and its decode server pulls the KV over the side channel.
func TestRunKVBoth(t *testing.T) {
	c, err := parseConfig([]string{"-listen", "127.0.0.1:0", "-sim-servers", "3", "-sim-kv-both", "-scrape-interval", "50ms",
		"-decider", "planner", "-decider-params", `{"prefill_rate":2000,"window":"200ms"}`})
	if err != nil {
		t.Fatal(err)
	}
	addrs, stop := start(t, c, io.Discard, 1)
	defer stop()
	base := addrs[0]
	series := func(name string) float64 {
		t.Helper()
		_, body := get(t, base+"/metrics", "")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	for i := range 3 {
		if got := series(fmt.Sprintf(`usher_pd_planned_role{backend="sim-%d",role="both"}`, i)); got != 1 {
			t.Fatalf("sim-%d: planned role both = %v, want 1 (every kv_both server starts in both)", i, got)
		}
	}
	chat := func(content string, maxTokens int) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "usher/demo", "max_tokens": maxTokens, "ignore_eos": true,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("answer %d %s", resp.StatusCode, data)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 6 {
		wg.Go(func() { chat(fmt.Sprintf("talk %d", i), 1200) })
	}
	waitFor("the answers to run", func() bool { return series(`usher_role_inflight_requests{role="both"}`) >= 6 })
	document := func(topic string) string {
		var b strings.Builder
		for i := range 1500 {
			fmt.Fprintf(&b, "%s%d ", topic, i%97)
		}
		return b.String()
	}
	chat(document("ledger"), 8)
	waitFor("a server in prefill", func() bool {
		for i := range 3 {
			if series(fmt.Sprintf(`usher_pd_planned_role{backend="sim-%d",role="prefill"}`, i)) == 1 {
				return true
			}
		}
		return false
	})
	chat(document("survey"), 8)
	if got := series(`usher_pd_requests_total{decision="disaggregated"}`); got < 1 {
		t.Errorf("disaggregated requests = %v, want ≥ 1", got)
	}
	if got := series(`usher_pd_prefill_attempts_total{result="ok"}`); got < 1 {
		t.Errorf("prefill attempts ok = %v, want ≥ 1", got)
	}
	if got := series(`usher_pd_role_changes_total`); got < 1 {
		t.Errorf("role changes = %v, want ≥ 1", got)
	}
}
