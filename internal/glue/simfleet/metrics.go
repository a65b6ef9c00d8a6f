package simfleet

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets of vLLM's latency histograms.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// initMetrics registers vLLM's metric names on the server's own registry: the engine's state
// is read at scrape time by a collector, latencies are histograms observed as events arrive.
// Every series carries model_name and engine ("0", vLLM's engine index), except
// vllm:cache_config_info, which like vLLM's carries the cache configuration and engine only.
func (s *Server) initMetrics() {
	s.registry = prometheus.NewRegistry()
	labels := []string{"model_name", "engine"}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		s.registry.MustRegister(h)
		return h.WithLabelValues(s.model, "0")
	}
	s.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	s.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	s.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets)
	s.queueTime = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets)
	s.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.",
	}, append(labels, "finished_reason"))
	s.registry.MustRegister(s.success, &engineCollector{s: s}, &kvCollector{s: s})
}

// engineCollector exports the engine's state and counters, read under the server's lock at
// scrape time so that one scrape is consistent.
type engineCollector struct{ s *Server }

var (
	labelNames      = []string{"model_name", "engine"}
	descRunning     = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", labelNames, nil)
	descWaiting     = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labelNames, nil)
	descKVUsage     = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labelNames, nil)
	descQueries     = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", labelNames, nil)
	descHits        = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", labelNames, nil)
	descPrompt      = prometheus.NewDesc("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labelNames, nil)
	descGeneration  = prometheus.NewDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", labelNames, nil)
	descPreemptions = prometheus.NewDesc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labelNames, nil)
	descCacheConfig = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
		[]string{"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_cpu_blocks", "num_gpu_blocks", "engine"}, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descQueries, descHits, descPrompt,
		descGeneration, descPreemptions, descCacheConfig} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	m, e := c.s.model, "0"
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running), m, e)
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(st.Waiting), m, e)
	ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, st.KVUsage, m, e)
	ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, float64(st.PrefixQueries), m, e)
	ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(st.PrefixHits), m, e)
	ch <- prometheus.MustNewConstMetric(descPrompt, prometheus.CounterValue, float64(st.PromptTokens), m, e)
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.CounterValue, float64(st.GenerationTokens), m, e)
	ch <- prometheus.MustNewConstMetric(descPreemptions, prometheus.CounterValue, float64(st.Preemptions), m, e)
	ch <- prometheus.MustNewConstMetric(descCacheConfig, prometheus.GaugeValue, 1,
		strconv.Itoa(st.BlockSize), "auto", "True", "0.9", "0", strconv.Itoa(st.NumBlocks), e)
}

// kvCollector exports the counters of disaggregated serving (KVTransferStats) under simfleet's
// own prefix: vllm: names stay what vLLM exports.
type kvCollector struct{ s *Server }

var (
	descPrefills     = prometheus.NewDesc("simfleet:kv_transfer_prefills_total", "Requests answered as the prefill step of disaggregated serving (do_remote_decode).", nil, nil)
	descDecodes      = prometheus.NewDesc("simfleet:kv_transfer_decodes_total", "Requests served as the decode step of disaggregated serving (do_remote_prefill).", nil, nil)
	descPullsServed  = prometheus.NewDesc("simfleet:kv_transfer_pulls_served_total", "KV transfers decode servers pulled from this server.", nil, nil)
	descPullsFailed  = prometheus.NewDesc("simfleet:kv_transfer_pulls_failed_total", "KV pulls of this server's decodes that failed; the prompt was recomputed.", nil, nil)
	descPending      = prometheus.NewDesc("simfleet:kv_transfer_pending", "KV transfers kept for decode servers to pull.", nil, nil)
	descDropped      = prometheus.NewDesc("simfleet:kv_transfer_dropped_total", "KV transfers that expired or were evicted before a decode server pulled them.", nil, nil)
	descTransferTime = prometheus.NewDesc("simfleet:kv_transfer_seconds_total", "Time this server's decodes spent on successful KV pulls.", nil, nil)
)

func (c *kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPrefills, descDecodes, descPullsServed, descPullsFailed, descPending,
		descDropped, descTransferTime} {
		ch <- d
	}
}

func (c *kvCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.KVTransferStats()
	ch <- prometheus.MustNewConstMetric(descPrefills, prometheus.CounterValue, float64(st.Prefills))
	ch <- prometheus.MustNewConstMetric(descDecodes, prometheus.CounterValue, float64(st.Decodes))
	ch <- prometheus.MustNewConstMetric(descPullsServed, prometheus.CounterValue, float64(st.PullsServed))
	ch <- prometheus.MustNewConstMetric(descPullsFailed, prometheus.CounterValue, float64(st.PullsFailed))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(descTransferTime, prometheus.CounterValue, st.TransferTime.Seconds())
}
