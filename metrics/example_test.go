package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/routing"
)

// A vLLM server's exposition, trimmed to the series EngineOf("vllm") reads.
const vllmExposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.42
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="27153"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen"} 20000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen"} 5000.0
`

// Parse one exposition with a built-in engine's metric names.
func ExampleParser() {
	vllm, _ := metrics.EngineOf("vllm")
	p, err := metrics.NewParser(metrics.ParserOptions{Engine: vllm})
	if err != nil {
		panic(err)
	}
	r, err := p.Parse([]byte(vllmExposition), metrics.ContentTypeText)
	if err != nil {
		panic(err)
	}
	fmt.Printf("waiting %v, running %v, KV %v, %v blocks of %v tokens\n",
		r.Waiting, r.Running, r.KVUtilization, r.NumBlocks, r.BlockSize)
	fmt.Println("prefix counters:", r.Found.Has(metrics.HasPrefixHits|metrics.HasPrefixQueries), r.PrefixHits, r.PrefixQueries)
	// Output:
	// waiting 3, running 12, KV 0.42, 27153 blocks of 16 tokens
	// prefix counters: true 5000 20000
}

// A gateway's wiring: Run scrapes in the background, OnUpdate (called by Run's goroutine, the
// router's single writer) hands the states to the router, and the Scraper is registered as a
// Prometheus collector.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprint(w, vllmExposition)
		}
	}))
	defer srv.Close()

	router, err := routing.New(routing.Options{})
	if err != nil {
		panic(err)
	}
	vllm, _ := metrics.EngineOf("vllm")
	var (
		scraper *metrics.Scraper
		states  []routing.BackendState
		updated = make(chan struct{}, 1)
	)
	scraper, err = metrics.New(metrics.Options{
		Targets:  []metrics.Target{{Name: "gpu-0", URL: srv.URL, Engine: vllm}},
		Interval: 50 * time.Millisecond,
		OnUpdate: func() {
			states = scraper.BackendStates(states[:0])
			if err := router.Update(states); err != nil {
				panic(err)
			}
			select {
			case updated <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		panic(err)
	}
	defer scraper.Close()
	prometheus.NewRegistry().MustRegister(scraper)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- scraper.Run(ctx) }()
	<-updated // the first scrape reached the router
	cancel()
	fmt.Println("Run:", <-done)

	pick, err := router.Pick(&routing.Request{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("picked %s (queued %d, running %d)\n", pick.Backend.Name, pick.Backend.Queued, pick.Backend.Running)
	pick.Done(routing.DoneInfo{})
	// Output:
	// Run: context canceled
	// picked gpu-0 (queued 3, running 12)
}

// Scrape a model server and hand its state to a router. A real gateway calls Run in its own
// goroutine with OnUpdate feeding the router; ScrapeOnce does one round.
func ExampleScraper() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", metrics.ContentTypeText)
			fmt.Fprint(w, vllmExposition)
		} // /health answers 200
	}))
	defer srv.Close()

	scraper, err := metrics.New(metrics.Options{
		Targets: []metrics.Target{{Name: "gpu-0", URL: srv.URL}}, // profile: VLLM, path /metrics
		Now:     func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		panic(err)
	}
	defer scraper.Close()
	if err := scraper.ScrapeOnce(context.Background()); err != nil {
		panic(err)
	}
	st, _ := scraper.State("gpu-0")
	fmt.Println(st.Name, st.Health, "stale:", st.Stale, "updated:", st.Updated.Format(time.TimeOnly))

	router, err := routing.New(routing.Options{})
	if err != nil {
		panic(err)
	}
	if err := router.Update(scraper.BackendStates(nil)); err != nil {
		panic(err)
	}
	bs := router.Backends(nil)[0]
	fmt.Printf("router sees %s: queued %d, running %d, KV %.2f, %d blocks of %d\n",
		bs.Name, bs.Queued, bs.Running, bs.KVUtilization, bs.KVCapacityBlocks, bs.BlockSize)
	// Output:
	// gpu-0 healthy stale: false updated: 12:00:00
	// router sees gpu-0: queued 3, running 12, KV 0.42, 27153 blocks of 16
}

// A custom engine for an in-house server: metric names, a label filter, a label that
// carries the value, a percentage scaled to a fraction.
func ExampleEngine() {
	inHouse := &metrics.Engine{
		Name:          "inhouse",
		HealthPath:    "/healthz",
		Waiting:       []metrics.Selector{{Name: "srv_requests", Labels: map[string]string{"state": "queued"}}},
		Running:       []metrics.Selector{{Name: "srv_requests", Labels: map[string]string{"state": "active"}}},
		KVUtilization: []metrics.Selector{{Name: "srv_kv_used_percent", Scale: 0.01}},
		BlockSize:     []metrics.Selector{{Name: "srv_build_info", ValueLabel: "page_tokens"}},
	}
	p, err := metrics.NewParser(metrics.ParserOptions{Engine: inHouse})
	if err != nil {
		panic(err)
	}
	r, err := p.Parse([]byte(`srv_requests{state="queued"} 4
srv_requests{state="active"} 9
srv_kv_used_percent 37.5
srv_build_info{version="2.1",page_tokens="32"} 1
`), "")
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Waiting, r.Running, r.KVUtilization, r.BlockSize)
	// Output:
	// 4 9 0.375 32
}
