package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		{"-decider", "sometimes"},
		{"-decider-params", "{"},
		{"-config", bad},
		{"-config", filepath.Join(dir, "missing.json")},
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
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, &out, ready) }()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
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
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if !strings.Contains(out.String(), "usher gateway listening on") {
		t.Errorf("output %q lacks the listening line", out.String())
	}
}
