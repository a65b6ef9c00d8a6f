package tokenizer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/proxy/openai"
)

// TestHandler runs an Encoder as a Handler's Tokenizer over a simulated fleet, through real
// HTTP: the request is served, and the prefix index holds the chain Tokenize computes for it
// under the backend it went to — the Handler routes on the Encoder's chain.
func TestHandler(t *testing.T) {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	var backends []proxy.Backend
	for _, u := range fleet.URLs() {
		backends = append(backends, proxy.Backend{URL: u})
	}
	e := testEncoder(t, 4)
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.New(proxy.Options{Backends: backends, Tokenizer: e, Index: ix, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Start(ctx)
	go h.Run(ctx)
	srv := httptest.NewServer(h)
	defer srv.Close()

	body := `{"model":"usher/demo","max_tokens":2,"messages":[{"role":"system","content":"the world the world"},{"role":"user","content":"the hello world, the hello world, the hello world"}]}`
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	req, err := openai.Parse([]byte(body), openai.Chat, openai.ParseLimits{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Tokenize(ctx, nil, req)
	if err != nil || len(p.Chain) < 4 {
		t.Fatalf("Tokenize: %d blocks, %v", len(p.Chain), err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if slices.Contains(ix.Match(nil, p.Chain), int32(len(p.Chain))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend holds the %d blocks of the Encoder's chain after 10s: %v", len(p.Chain), ix.Match(nil, p.Chain))
		}
	}
}
