package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/proxy"
)

// BenchmarkHandler is one streamed chat request through the Handler — parse, tokenize and
// hash a 2,600-token conversation (17 KB), admit, pick, relay 40 events — against a backend
// that answers at once, so what it measures is the pipeline's own work per request (client
// and backend included). Every answer's status is checked: instant errors are no speedup.
func BenchmarkHandler(b *testing.B) {
	var events strings.Builder
	events.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for range 40 {
		events.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}\n\n")
	}
	events.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2600,\"completion_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":2400}}}\n\ndata: [DONE]\n\n")
	backend := fakeBackend(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, events.String())
	})
	h, err := proxy.New(proxy.Options{Backends: []proxy.Backend{{URL: backend.URL}}, Tokenizer: simfleet.Tokenizer{}})
	if err != nil {
		b.Fatal(err)
	}
	h.Start(context.Background())
	srv := httptest.NewServer(h)
	b.Cleanup(func() { srv.Close(); h.Close() })

	var msgs []map[string]string
	msgs = append(msgs, map[string]string{"role": "system", "content": strings.Repeat("You are a coding agent; follow the repository conventions. ", 200)})
	for i := range 6 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("turn %d: %s", i, strings.Repeat("please change this function ", 20))},
			map[string]string{"role": "assistant", "content": strings.Repeat("done ", 40)})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": "and now the tests"})
	body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": msgs})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("X-Session-Id", "bench")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n < 40*100 {
			b.Fatalf("status %d, %d bytes: want 200 and the whole stream", resp.StatusCode, n)
		}
	}
}
