package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The example serves the OpenAI API through a stock ReverseProxy with usher's hooks, to the
// official client, whole and streamed, and /metrics and /health beside it.
func TestReverseProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return")
		}
	})
	base := "http://" + ln.Addr().String()
	c := oa.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := oa.ChatCompletionNewParams{
		Model:     "usher/demo",
		Messages:  []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Say hello.")},
		MaxTokens: oa.Int(8),
	}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil || len(resp.Choices) != 1 || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("chat: %+v, %v", resp, err)
	}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	n := 0
	for s.Next() {
		n++
	}
	if err := s.Err(); err != nil || n < 2 {
		t.Fatalf("stream: %d chunks, %v", n, err)
	}
	for path, want := range map[string]string{"/metrics": "usher_picks_total", "/health": "", "/v1/models": "usher/demo"} {
		if path == "/metrics" {
			for _, series := range []string{"go_goroutines", "process_resident_memory_bytes", "process_open_fds"} {
				if body := get(t, base+path); !strings.Contains(body, series) {
					t.Errorf("/metrics has no %s", series)
				}
			}
		}
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, %.200s; want 200 with %q", path, r.StatusCode, body, want)
		}
	}
	r, err := http.Get(base + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"error"`) {
		t.Errorf("unknown path: %d %s, want an OpenAI 404", r.StatusCode, body)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return string(body)
}
