package simfleet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/prefixcache/kvevents"
)

func loraFleet(t *testing.T, lora LoRAOptions) (*Server, string) {
	t.Helper()
	f := startFleet(t, 1, func(_ int, o *Options) { o.LoRA = lora })
	return f.Servers()[0], f.URLs()[0]
}

func TestLoRAModelsAndAnswers(t *testing.T) {
	s, url := loraFleet(t, LoRAOptions{Adapters: []string{"sql-lora", "chat-lora"}, MaxLoRAs: 2, LoadCost: -1})
	type list struct {
		Data []struct {
			ID     string  `json:"id"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	models := decode[list](t, resp, 200)
	if len(models.Data) != 3 || models.Data[0].ID != s.Model() || models.Data[0].Parent != nil {
		t.Fatalf("models %+v, want the base model first without a parent", models)
	}
	for i, a := range []string{"sql-lora", "chat-lora"} {
		if m := models.Data[i+1]; m.ID != a || m.Parent == nil || *m.Parent != s.Model() {
			t.Errorf("model %d = %+v, want %s with parent %s", i+1, m, a, s.Model())
		}
	}
	got := decode[chatResponse](t, post(t, url+"/v1/chat/completions", chatBody("sql-lora", 4, false, "sys", "hi")), 200)
	if got.Model != "sql-lora" {
		t.Errorf("answer names model %q, want sql-lora", got.Model)
	}
	resp = post(t, url+"/v1/chat/completions", chatBody("tax-lora", 4, false, "sys", "hi"))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown adapter: status %d, want 404", resp.StatusCode)
	}
	if st := s.LoRAStats(); st.Loads != 1 || !slices.Equal(st.Resident, []string{"sql-lora"}) || st.MaxLoRAs != 2 {
		t.Errorf("LoRA stats %+v, want one load of sql-lora", st)
	}
}

// A prefix cached under one adapter is a miss under another and under the base model.
func TestLoRACachedTokensPerAdapter(t *testing.T) {
	s, url := loraFleet(t, LoRAOptions{Adapters: []string{"x", "y"}, MaxLoRAs: 2, LoadCost: -1})
	long := system + system
	var cached []int
	for _, m := range []string{"x", "x", "y", s.Model()} {
		r := decode[chatResponse](t, post(t, url+"/v1/chat/completions", chatBody(m, 4, false, long, "same question")), 200)
		cached = append(cached, r.Usage.PromptTokensDetails.CachedTokens)
	}
	if cached[0] != 0 || cached[1] == 0 || cached[2] != 0 || cached[3] != 0 {
		t.Errorf("cached tokens per request %v, want [0 >0 0 0]", cached)
	}
	prompt, err := RenderChat([]Message{TextMessage("system", long), TextMessage("user", "same question")}, true)
	if err != nil {
		t.Fatal(err)
	}
	toks := Tokenize(prompt)
	if s.CachedPrefixFor("x", toks) == 0 || s.CachedPrefixFor("y", toks) == 0 || s.CachedPrefixFor("z", toks) != 0 {
		t.Errorf("CachedPrefixFor: x %d, y %d, z %d blocks", s.CachedPrefixFor("x", toks), s.CachedPrefixFor("y", toks), s.CachedPrefixFor("z", toks))
	}
}

// The exported vllm:lora_requests_info is what metrics.EngineOf("vllm") reads.
func TestLoRAMetricScraped(t *testing.T) {
	_, url := loraFleet(t, LoRAOptions{Adapters: []string{"x", "y"}, MaxLoRAs: 3, LoadCost: -1})
	decode[chatResponse](t, post(t, url+"/v1/chat/completions", chatBody("y", 2, false, "sys", "hi")), 200)
	s := scraper(t, url)
	for range 2 { // the second scrape sees the history of label sets
		r := s.read(t)
		if !r.Found.Has(metrics.HasAdapters) || r.MaxAdapters != 3 || len(r.RunningAdapters) != 0 {
			t.Fatalf("reading %+v, want 3 slots and nothing running (the request finished)", r)
		}
	}
	// A server without adapters exports no such series (vLLM exports it only with LoRA).
	_, plain := loraFleet(t, LoRAOptions{})
	if r := scraper(t, plain).read(t); r.Found.Has(metrics.HasAdapters) {
		t.Error("a server without LoRA exports vllm:lora_requests_info")
	}
}

// metricsScraper reads one simulated server's /metrics as a gateway does: a metrics.Scraper
// with vLLM's metric names, one scrape per read (its parser keeps the label sets it has seen).
type metricsScraper struct{ s *metrics.Scraper }

func scraper(t *testing.T, url string) metricsScraper {
	t.Helper()
	vllm, _ := metrics.EngineOf("vllm")
	s, err := metrics.New(metrics.Options{Engine: vllm, Targets: []metrics.Target{{Name: "sim", URL: url + "/metrics"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return metricsScraper{s}
}

func (m metricsScraper) read(t *testing.T) metrics.Reading {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.s.ScrapeOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st, ok := m.s.State("sim")
	if !ok || st.Err != nil {
		t.Fatalf("state %+v, %v", st, ok)
	}
	return st.Reading
}

func TestLoRAOptionsValidated(t *testing.T) {
	for _, l := range []LoRAOptions{
		{Adapters: []string{""}},
		{Adapters: []string{"a,b"}},
		{Adapters: []string{"a", "a"}},
		{Adapters: []string{"a"}, MaxLoRAs: -2},
		{MaxLoRAs: 2},
	} {
		if _, err := New(Options{LoRA: l}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("LoRA %+v: error %v, want ErrInvalidOptions", l, err)
		}
	}
	if _, err := New(Options{Model: "m", LoRA: LoRAOptions{Adapters: []string{"m"}}}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("adapter named as the model: %v", err)
	}
}

func TestKVBatchCarriesLoRAName(t *testing.T) {
	var b kvevents.Batch
	AppendKVBatch(&b, []engine.KVEvent{{Kind: engine.KVBlockStored, Hashes: []engine.BlockHash{1}, BlockSize: 16, LoRA: "sql-lora"}})
	if len(b.Events) != 1 || b.Events[0].LoRAName != "sql-lora" {
		t.Errorf("events %+v, want lora_name sql-lora", b.Events)
	}
}
