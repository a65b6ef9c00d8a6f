package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	oa "github.com/openai/openai-go/v3"

	"github.com/usher-llm/usher/proxy"
)

// A stock httputil.ReverseProxy with usher's three hooks, driven by the official OpenAI
// client: whole and streamed answers, a client that cancels mid-stream, a backend that
// resets the connection before answering and one that dies mid-stream. After each, the
// queue's and the router's books are closed exactly once.
func TestReverseProxyExample(t *testing.T) {
	fleet := startFleet(t, 2)
	h, err := proxy.New(testOptions(backendsOf(fleet)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Start(context.Background())
	rp := &httputil.ReverseProxy{Rewrite: h.Rewrite, ModifyResponse: h.ModifyResponse, ErrorHandler: h.ErrorHandler}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	c := client(srv.URL)
	ctx := context.Background()
	params := oa.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Say hello.")},
		MaxTokens: oa.Int(8),
	}

	t.Run("whole", func(t *testing.T) {
		resp, err := c.Chat.Completions.New(ctx, params)
		if err != nil || len(resp.Choices) != 1 || resp.Usage.CompletionTokens == 0 {
			t.Fatalf("chat: %+v, %v", resp, err)
		}
		closedExactlyOnce(t, h)
	})
	t.Run("streamed", func(t *testing.T) {
		s := c.Chat.Completions.NewStreaming(ctx, params)
		n := 0
		for s.Next() {
			if len(s.Current().Choices) == 0 {
				t.Error("usage-only chunk the client did not ask for")
			}
			n++
		}
		if err := s.Err(); err != nil || n < 2 {
			t.Fatalf("stream: %d chunks, %v", n, err)
		}
		closedExactlyOnce(t, h)
		if st := h.Queue().Stats(); st.Dispatched != 2 {
			t.Errorf("dispatched %d, want 2", st.Dispatched)
		}
	})
	t.Run("client cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		long := params
		long.MaxTokens = oa.Int(4000)
		s := c.Chat.Completions.NewStreaming(cctx, long)
		if !s.Next() {
			t.Fatalf("no first chunk: %v", s.Err())
		}
		cancel()
		for s.Next() {
		}
		s.Close()
		closedExactlyOnce(t, h)
	})

	t.Run("other paths pass through", func(t *testing.T) {
		before := h.Queue().Stats().Dispatched
		models, err := c.Models.List(ctx)
		if err != nil || len(models.Data) != 1 || models.Data[0].ID != model {
			t.Fatalf("models through the proxy: %+v, %v", models, err)
		}
		closedExactlyOnce(t, h)
		if st := h.Queue().Stats(); st.Dispatched != before {
			t.Errorf("a models request went through admission")
		}
	})

	// A backend that resets the connection before answering, and one that dies mid-stream.
	reset := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	broken := fakeBackend(t, brokenStream)
	for _, tt := range []struct {
		name, url string
		stream    bool
		want      string
	}{
		{"backend reset", reset.URL, false, "502"},
		{"backend dies mid-stream", broken.URL, true, "stream broke"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h2, err := proxy.New(testOptions([]proxy.Backend{{URL: tt.url}}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h2.Close)
			h2.Start(ctx)
			srv2 := httptest.NewServer(&httputil.ReverseProxy{Rewrite: h2.Rewrite, ModifyResponse: h2.ModifyResponse, ErrorHandler: h2.ErrorHandler})
			t.Cleanup(srv2.Close)
			c2 := client(srv2.URL)
			p := oa.ChatCompletionNewParams{Model: "m", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")}}
			if tt.stream {
				s := c2.Chat.Completions.NewStreaming(ctx, p)
				for s.Next() {
				}
				err = s.Err()
			} else {
				_, err = c2.Chat.Completions.New(ctx, p)
			}
			var apiErr *oa.Error
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one mentioning %q", err, tt.want)
			}
			if !tt.stream && (!errors.As(err, &apiErr) || apiErr.Type != "upstream_error") {
				t.Errorf("error = %v, want an OpenAI upstream_error", err)
			}
			closedExactlyOnce(t, h2)
			if rs := h2.Router().Stats(); rs.Failed != 1 {
				t.Errorf("router failures = %d, want 1", rs.Failed)
			}
		})
	}
}
