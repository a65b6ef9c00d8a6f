package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/usher-llm/usher/internal/glue/simfleet"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/proxy/openai"
)

// TestLoRAAdapters: servers that serve LoRA adapters and publish KV events. The gateway learns
// the adapters from the servers' /v1/models (their parent is the base model), serves a
// conversation under one, and keys its prompt as the engine does: the second turn is cached,
// the index matches it under the adapter's seed — the one the servers' KV events carry — and
// not under the base model's, and /v1/models lists the adapters with their parent.
func TestLoRAAdapters(t *testing.T) {
	_, backends := startPublishingFleetWith(t, 3, func(_ int, o *simfleet.Options) {
		o.LoRA = simfleet.LoRAOptions{Adapters: []string{"sql-lora", "chat-lora"}, MaxLoRAs: 1}
	})
	h, base := startHandler(t, testOptions(backends))
	c := client(base)
	ctx := context.Background()

	list, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	for _, m := range list.Data {
		var raw struct {
			Parent *string `json:"parent"`
		}
		_ = json.Unmarshal([]byte(m.RawJSON()), &raw)
		parents[m.ID] = ""
		if raw.Parent != nil {
			parents[m.ID] = *raw.Parent
		}
	}
	if parents["sql-lora"] != model || parents["chat-lora"] != model {
		t.Errorf("GET /v1/models: %v, want both adapters with parent %s", parents, model)
	}

	history := []oa.ChatCompletionMessageParamUnion{
		oa.SystemMessage(strings.Repeat("You translate questions into SQL for the warehouse. ", 12)),
		oa.UserMessage("Orders per region last month?"),
	}
	resp, err := c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: "sql-lora", Messages: history, MaxTokens: oa.Int(24)},
		option.WithHeader("X-Session-Id", "lora"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "sql-lora" {
		t.Errorf("answered by %q, want the adapter", resp.Model)
	}
	history = append(history, oa.AssistantMessage(resp.Choices[0].Message.Content), oa.UserMessage("And per product?"))

	chainOf := func(modelName string, msgs []oa.ChatCompletionMessageParamUnion, adapter bool) []prefixcache.BlockHash {
		body, _ := json.Marshal(oa.ChatCompletionNewParams{Model: modelName, Messages: msgs})
		req, err := openai.Parse(body, openai.Chat, openai.ParseLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if adapter {
			req.BaseModel, req.Adapter = model, modelName
		}
		p, err := simfleet.Tokenizer{}.Tokenize(ctx, nil, req)
		if err != nil {
			t.Fatal(err)
		}
		return p.Chain
	}
	best := func(chain []prefixcache.BlockHash) int {
		b := int32(0)
		for _, m := range h.Index().Match(nil, chain) {
			b = max(b, m)
		}
		return int(b)
	}
	first, next := chainOf("sql-lora", history[:2], true), chainOf("sql-lora", history, true)
	eventually(t, "the adapter's blocks to be matched", func() bool { return best(next) > len(first) })
	if n := best(chainOf(model, history, false)); n != 0 {
		t.Errorf("the same prompt under the base model matches %d blocks, want 0: the engine keys it apart", n)
	}

	resp, err = c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: "sql-lora", Messages: history, MaxTokens: oa.Int(8)},
		option.WithHeader("X-Session-Id", "lora"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Error("turn 2 under the adapter: no cached tokens")
	}
	if st := kvOf(h).Stats(); st.ApplyErrors != 0 || st.DecodeErrors != 0 {
		t.Errorf("subscriber stats = %+v, want no errors", st)
	}
	closedExactlyOnce(t, h)
}

// TestLoRAAdaptersGauge: the adapters a server runs, read from its vllm:lora_requests_info,
// are on the gateway's /metrics while a request under one streams, labelled with the backend
// and the adapter; the configured adapters of every backend are series from the start.
func TestLoRAAdaptersGauge(t *testing.T) {
	fleet, err := simfleet.StartFleet(simfleet.FleetOptions{Servers: 2, Options: simfleet.Options{
		LoRA: simfleet.LoRAOptions{Adapters: []string{"sql-lora", "chat-lora"}, MaxLoRAs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	backends := backendsOf(fleet)
	for i := range backends {
		backends[i].Models, backends[i].Adapters = []string{model}, []string{"sql-lora", "chat-lora"}
	}
	_, base := startHandler(t, testOptions(backends))
	scrape := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	series := func(backend, adapter, state string) string {
		return `usher_backend_lora_adapters{adapter="` + adapter + `",backend="` + backend + `",state="` + state + `"}`
	}
	for _, u := range fleet.URLs() {
		if got := scrape(); !strings.Contains(got, series(u, "sql-lora", "running")+" 0") {
			t.Fatalf("before any request /metrics lacks %s 0", series(u, "sql-lora", "running"))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := client(base)
	stream := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{Model: "chat-lora", MaxTokens: oa.Int(2000),
		Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Write a long story.")}})
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	eventually(t, "the running adapter on /metrics", func() bool {
		got := scrape()
		for _, u := range fleet.URLs() {
			if strings.Contains(got, series(u, "chat-lora", "running")+" 1") {
				return true
			}
		}
		return false
	})
}
