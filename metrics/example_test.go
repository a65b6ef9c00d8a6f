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

// A vLLM server's exposition, trimmed to the series the VLLM profile reads.
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

// Parse one exposition with an engine profile.
func ExampleParser() {
	p, err := metrics.NewParser(metrics.VLLM)
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
// router's single writer) hands the states to the router, and both the Scraper and Gateway
// are registered as Prometheus collectors.
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
	var (
		scraper *metrics.Scraper
		states  []routing.BackendState
		updated = make(chan struct{}, 1)
	)
	scraper, err = metrics.NewScraper(metrics.Options{
		Targets:  []metrics.Target{{Name: "gpu-0", URL: srv.URL, Profile: metrics.VLLM}},
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
	usher, err := metrics.NewGateway(metrics.GatewayOptions{Backends: []string{"gpu-0"}})
	if err != nil {
		panic(err)
	}
	prometheus.NewRegistry().MustRegister(scraper, usher)

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
	usher.ObservePick(pick.Backend.Name)
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

	scraper, err := metrics.NewScraper(metrics.Options{
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
	fmt.Println(st.Name(), st.Health(), "stale:", st.Stale(), "updated:", st.Updated().Format(time.TimeOnly))

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

// A custom profile for an in-house server: metric names, a label filter, a label that
// carries the value, a percentage scaled to a fraction.
func ExampleProfile() {
	inHouse := &metrics.Profile{
		Name:          "inhouse",
		HealthPath:    "/healthz",
		Waiting:       []metrics.Selector{{Name: "srv_requests", Labels: map[string]string{"state": "queued"}}},
		Running:       []metrics.Selector{{Name: "srv_requests", Labels: map[string]string{"state": "active"}}},
		KVUtilization: []metrics.Selector{{Name: "srv_kv_used_percent", Scale: 0.01}},
		BlockSize:     []metrics.Selector{{Name: "srv_build_info", ValueLabel: "page_tokens"}},
	}
	p, err := metrics.NewParser(inHouse)
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

// usher's own metrics: plain calls where things happen, bounded labels.
func ExampleGateway() {
	u, err := metrics.NewGateway(metrics.GatewayOptions{
		Bands: []int{0, 1}, Backends: []string{"gpu-0", "gpu-1"}, KVSources: []string{"gpu-0", "gpu-1"},
	})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(u)

	u.ObserveAdmission("dispatched", 0, 12*time.Millisecond)
	u.ObserveAdmission("expired", 1, 30*time.Second)
	u.ObserveAdmission("dispatched", 0, 3*time.Millisecond)
	u.SetQueue(1, 17, 64<<10)
	u.ObservePick("gpu-1")
	u.ObservePick("10.1.2.3:8000") // not a configured backend: counted as "other"
	u.SetFlows(12)
	u.SetInFlight("gpu-1", 5)
	u.SetInFlight("10.1.2.3:8000", 2) // not a configured backend: dropped, and the drop counted
	u.SetInFlightTotal(7)
	// The KV-event subscriber's cumulative counters per source, as kvevents.SourceStatus has them.
	u.SetKVSource("gpu-1", metrics.KVSource{Connected: true, Batches: 420, Lost: 3, Resets: 1, Reconnects: 2})
	u.SetIndexStats(metrics.IndexStats{Blocks: 1 << 20, Bytes: 48 << 20, QueriedBlocks: 1000, MatchedBlocks: 640})

	fams, _ := reg.Gather()
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			default:
				continue
			}
			if v == 0 {
				continue
			}
			labels := ""
			for _, lp := range m.GetLabel() {
				labels += fmt.Sprintf(" %s=%s", lp.GetName(), lp.GetValue())
			}
			fmt.Printf("%s%s %v\n", mf.GetName(), labels, v)
		}
	}
	// Output:
	// usher_admissions_total band=0 outcome=dispatched 2
	// usher_admissions_total band=1 outcome=expired 1
	// usher_backend_inflight_dropped_total 1
	// usher_backend_inflight_requests backend=gpu-1 5
	// usher_flows 12
	// usher_inflight_requests 7
	// usher_kvevents_batches_total source=gpu-1 420
	// usher_kvevents_connected source=gpu-1 1
	// usher_kvevents_lost_batches_total source=gpu-1 3
	// usher_kvevents_reconnects_total source=gpu-1 2
	// usher_kvevents_resets_total source=gpu-1 1
	// usher_picks_total backend=gpu-1 1
	// usher_picks_total backend=other 1
	// usher_prefix_index_blocks 1.048576e+06
	// usher_prefix_index_bytes 5.0331648e+07
	// usher_prefix_index_matched_blocks_total 640
	// usher_prefix_index_queried_blocks_total 1000
	// usher_queue_bytes band=1 65536
	// usher_queue_requests band=1 17
}
