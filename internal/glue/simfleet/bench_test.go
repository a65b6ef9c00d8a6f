package simfleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
)

// BenchmarkChat measures one chat completion over loopback against a server whose engine
// steps take (almost) no modelled time, so the figure is the HTTP, JSON, tokenizer and engine
// overhead of the simulator itself: whole answers of 1 token, and streams of 16 tokens.
func BenchmarkChat(b *testing.B) {
	p := engine.Demo
	p.StepBase, p.PrefillPerToken, p.PrefillAttnPerTokenPair, p.DecodePerSeq, p.DecodePerContextToken = time.Nanosecond, 0, 0, 0, 0
	f, err := StartFleet(FleetOptions{Options: Options{Engine: engine.Options{Profile: p}}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	url := f.URLs()[0] + "/v1/chat/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for _, tc := range []struct {
		name   string
		tokens int
		stream bool
	}{{"whole/1", 1, false}, {"stream/16", 16, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				body, _ := json.Marshal(map[string]any{"max_tokens": tc.tokens, "ignore_eos": true, "stream": tc.stream,
					"messages": []Message{TextMessage("system", system), TextMessage("user", fmt.Sprintf("question %d", i))}})
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
					b.Fatalf("status %d, %v", resp.StatusCode, err)
				}
				resp.Body.Close()
			}
		})
	}
}
