package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"

	"github.com/usher-llm/usher/proxy"
)

// TestStreamIdleCountsFromLastBytes: the stream-idle timeout counts from the backend's last
// bytes, not from the start of the answer. A stream whose gaps are each shorter than the
// timeout, but which lasts several timeouts, is relayed whole; one that then falls silent
// for longer is cut with an OpenAI error event.
func TestStreamIdleCountsFromLastBytes(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		stall time.Duration // silence after the tokens, before usage and [DONE]
		cut   bool
	}{{"steady", 0, false}, {"stalled", 3 * idle, true}} {
		t.Run(tc.name, func(t *testing.T) {
			backend := fakeBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fl := w.(http.Flusher)
				for i := range 8 { // 8 gaps of idle/2: the stream lasts well past the timeout
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
					fl.Flush()
					time.Sleep(idle / 2)
				}
				select {
				case <-time.After(tc.stall):
				case <-r.Context().Done():
					return
				}
				fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n")
			})
			opts := testOptions([]proxy.Backend{{URL: backend.URL}})
			opts.Timeouts = proxy.Timeouts{StreamIdle: idle}
			h, base := startHandler(t, opts)
			c := client(base)
			stream := c.Chat.Completions.NewStreaming(context.Background(), oa.ChatCompletionNewParams{
				Model: "m", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Stream slowly.")},
			})
			var text strings.Builder
			for stream.Next() {
				if ch := stream.Current(); len(ch.Choices) > 0 {
					text.WriteString(ch.Choices[0].Delta.Content)
				}
			}
			err := stream.Err()
			if got, want := text.String(), "t0 t1 t2 t3 t4 t5 t6 t7 "; got != want {
				t.Errorf("text = %q, want %q", got, want)
			}
			switch {
			case tc.cut && (err == nil || !strings.Contains(err.Error(), "sent nothing")):
				t.Errorf("stalled stream: err = %v, want the stream_idle_timeout error event", err)
			case !tc.cut && err != nil:
				t.Errorf("steady stream: err = %v, want none", err)
			}
			closedExactlyOnce(t, h)
		})
	}
}
