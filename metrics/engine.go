package metrics

import (
	"fmt"
	"math"
)

// Aggregation says how the values of several series matched by one Selector combine into one
// number: a vLLM server running data parallelism exposes one series per engine, SGLang one per
// rank, and the router wants one figure per backend.
type Aggregation uint8

const (
	// AggDefault uses the signal's own default: Sum for request counts, block counts and
	// counters, Mean for utilisations and rates, Max for block sizes.
	AggDefault Aggregation = iota
	// AggSum adds the values.
	AggSum
	// AggMean averages the values.
	AggMean
	// AggMax takes the largest value.
	AggMax
	// AggMin takes the smallest value.
	AggMin
)

// String returns the aggregation's name.
func (a Aggregation) String() string {
	switch a {
	case AggDefault:
		return "default"
	case AggSum:
		return "sum"
	case AggMean:
		return "mean"
	case AggMax:
		return "max"
	case AggMin:
		return "min"
	}
	return fmt.Sprintf("Aggregation(%d)", uint8(a))
}

// Selector picks the series that carry one signal out of an exposition.
//
// A series matches when its metric family is named Name and it carries every label in Labels
// with the given value (an empty value matches a series without that label, as in PromQL).
// The signal's value is the sample value, or, when ValueLabel is set, the number written in
// that label (vLLM and SGLang publish their cache geometry as labels of an "info" gauge whose
// value is 1). Non-finite values and values that do not parse as numbers are ignored.
//
// A Selector is plain data; it is read, never modified, by the parser.
type Selector struct {
	// Name is the metric family name as the server exposes it. Counters include the
	// "_total" suffix (in OpenMetrics the parser restores it), e.g.
	// "vllm:prefix_cache_hits_total".
	Name string
	// Labels restricts the match to series with these label values. Nil matches every series
	// of the family.
	Labels map[string]string
	// ValueLabel, when set, reads the value from this label instead of the sample value.
	ValueLabel string
	// Scale multiplies the value; zero means 1. Use 0.01 for a percentage in 0..100.
	Scale float64
	// Agg combines several matching series; AggDefault uses the signal's default.
	Agg Aggregation
}

// Engine names, for one kind of model server (an inference engine: vLLM, SGLang, ...), where
// each signal the router needs is found in its Prometheus exposition, and where its health
// endpoint is.
//
// Each signal is a list of Selectors tried in order: the first one that matches at least one
// usable series provides the value, later ones are fallbacks for older server versions (vLLM
// renamed vllm:gpu_cache_usage_perc to vllm:kv_cache_usage_perc, for example). An empty list
// means the server does not publish that signal.
//
// Some signals are derived when missing: KVUtilization from UsedBlocks/NumBlocks, NumBlocks
// from CapacityTokens/BlockSize, and the prefix hit rate prefers the rate of the PrefixHits
// and PrefixQueries counters between two scrapes over the PrefixHitRate gauge.
//
// [EngineOf] returns a copy of a built-in Engine by name; edit the copy to adapt it, or build
// one from scratch. An Engine is plain data: it must not be modified after it is handed to a
// [Scraper] or a [Parser], which read it from their goroutines.
type Engine struct {
	// Name identifies the engine in errors and documentation.
	Name string
	// MetricsPath is the path of the metrics endpoint, used when a Target gives only a base
	// URL. Empty means "/metrics".
	MetricsPath string
	// HealthPath is the path of the health endpoint on the same host and port as the
	// metrics endpoint, used when a Target does not name a HealthURL. Empty means the
	// server has no health endpoint there: the backend counts as healthy while its metrics
	// scrape succeeds.
	HealthPath string
	// RankLabel is the label that tells a data-parallel rank's series apart ("engine" for
	// vLLM, "dp_rank" for SGLang); Target.Rank restricts a target to one rank's series.
	// Empty: the server's ranks cannot be scraped apart.
	RankLabel string

	// Waiting is the number of requests queued in the server, not yet scheduled.
	Waiting []Selector
	// Running is the number of requests in the running batch.
	Running []Selector
	// KVUtilization is the fraction of KV cache in use, 0..1.
	KVUtilization []Selector
	// BlockSize is the number of tokens per KV block (page).
	BlockSize []Selector
	// NumBlocks is the number of KV blocks the server can hold.
	NumBlocks []Selector
	// UsedBlocks is the number of KV blocks in use; with NumBlocks it derives KVUtilization.
	UsedBlocks []Selector
	// CapacityTokens is the KV capacity in tokens; with BlockSize it derives NumBlocks.
	CapacityTokens []Selector
	// PrefixHits is a counter of prompt tokens (or blocks) served from the prefix cache.
	PrefixHits []Selector
	// PrefixQueries is a counter of prompt tokens (or blocks) looked up in the prefix cache,
	// in the same unit as PrefixHits.
	PrefixQueries []Selector
	// PrefixHitRate is a gauge of the prefix cache hit rate, 0..1, used when the counters
	// are absent.
	PrefixHitRate []Selector
	// Adapters is where a server with LoRA enabled lists its adapters. Zero: nowhere.
	Adapters AdapterInfo

	rank string // set by forRank: the rank whose adapter series are read
}

// forRank returns a copy of p whose selectors match only the series of one data-parallel
// rank (RankLabel = rank). The cache geometry (block size, blocks, capacity) falls back to the
// largest value of any series, for servers that publish it once rather than per rank.
func (p *Engine) forRank(rank string) *Engine {
	q := *p
	restrict := func(sels []Selector, fallback bool) []Selector {
		out := make([]Selector, 0, 2*len(sels))
		for _, s := range sels {
			r := s
			r.Labels = make(map[string]string, len(s.Labels)+1)
			for k, v := range s.Labels {
				r.Labels[k] = v
			}
			r.Labels[p.RankLabel] = rank
			out = append(out, r)
		}
		if fallback {
			for _, s := range sels {
				s.Agg = AggMax
				out = append(out, s)
			}
		}
		return out
	}
	q.Waiting, q.Running, q.KVUtilization = restrict(p.Waiting, false), restrict(p.Running, false), restrict(p.KVUtilization, false)
	q.UsedBlocks, q.PrefixHits, q.PrefixQueries = restrict(p.UsedBlocks, false), restrict(p.PrefixHits, false), restrict(p.PrefixQueries, false)
	q.PrefixHitRate = restrict(p.PrefixHitRate, false)
	q.BlockSize, q.NumBlocks, q.CapacityTokens = restrict(p.BlockSize, true), restrict(p.NumBlocks, true), restrict(p.CapacityTokens, true)
	q.rank = rank
	return &q
}

// signal indexes the signals of an Engine and the values of a Reading.
type signal uint8

const (
	sigWaiting signal = iota
	sigRunning
	sigKVUtilization
	sigBlockSize
	sigNumBlocks
	sigUsedBlocks
	sigCapacityTokens
	sigPrefixHits
	sigPrefixQueries
	sigPrefixHitRate
	numSignals
)

var signalNames = [numSignals]string{
	"Waiting", "Running", "KVUtilization", "BlockSize", "NumBlocks", "UsedBlocks",
	"CapacityTokens", "PrefixHits", "PrefixQueries", "PrefixHitRate",
}

// defaultAgg is each signal's aggregation when a Selector says AggDefault.
var defaultAgg = [numSignals]Aggregation{
	sigWaiting:        AggSum,
	sigRunning:        AggSum,
	sigKVUtilization:  AggMean,
	sigBlockSize:      AggMax,
	sigNumBlocks:      AggSum,
	sigUsedBlocks:     AggSum,
	sigCapacityTokens: AggSum,
	sigPrefixHits:     AggSum,
	sigPrefixQueries:  AggSum,
	sigPrefixHitRate:  AggMean,
}

// selectors returns the profile's signals indexed by signal. O(1).
func (p *Engine) selectors() [numSignals][]Selector {
	return [numSignals][]Selector{
		p.Waiting, p.Running, p.KVUtilization, p.BlockSize, p.NumBlocks, p.UsedBlocks,
		p.CapacityTokens, p.PrefixHits, p.PrefixQueries, p.PrefixHitRate,
	}
}

// validate reports the first malformed selector. O(selectors).
func (p *Engine) validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil profile", ErrInvalidOptions)
	}
	sels := p.selectors()
	n := 0
	for s, list := range sels {
		for i, sel := range list {
			if sel.Name == "" {
				return fmt.Errorf("%w: profile %q: %s[%d] has no metric name",
					ErrInvalidOptions, p.Name, signalNames[s], i)
			}
			if sel.Agg > AggMin {
				return fmt.Errorf("%w: profile %q: %s[%d] has unknown aggregation %d",
					ErrInvalidOptions, p.Name, signalNames[s], i, sel.Agg)
			}
			if math.IsNaN(sel.Scale) || math.IsInf(sel.Scale, 0) || sel.Scale < 0 {
				return fmt.Errorf("%w: profile %q: %s[%d] has invalid scale %v",
					ErrInvalidOptions, p.Name, signalNames[s], i, sel.Scale)
			}
			n++
		}
	}
	if err := p.Adapters.validate(p.Name); err != nil {
		return err
	}
	if n == 0 && p.Adapters.Name == "" {
		return fmt.Errorf("%w: profile %q selects no signal", ErrInvalidOptions, p.Name)
	}
	return nil
}

// The built-in engines, which EngineOf copies. Metric names are the ones the engines document (late 2026); each list
// starts with the current name and falls back to older ones.
var (
	// engineVLLM reads vLLM (V1 engine) servers. vLLM labels every series with model_name and
	// engine; with data parallelism there is one series per engine, which are summed
	// (queues, blocks, counters) or averaged (KV utilisation). The cache geometry comes from
	// the labels block_size and num_gpu_blocks of vllm:cache_config_info. The prefix hit
	// rate is the rate of vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total
	// (both in tokens) between two scrapes. Older servers publish the deprecated
	// vllm:gpu_cache_usage_perc and vllm:gpu_prefix_cache_* names, read as fallbacks. A
	// server with LoRA enabled lists its adapters in vllm:lora_requests_info (see
	// AdapterInfo).
	engineVLLM = &Engine{
		Name:       "vllm",
		HealthPath: "/health",
		RankLabel:  "engine",
		Waiting:    []Selector{{Name: "vllm:num_requests_waiting"}},
		Running:    []Selector{{Name: "vllm:num_requests_running"}},
		KVUtilization: []Selector{
			{Name: "vllm:kv_cache_usage_perc"},
			{Name: "vllm:gpu_cache_usage_perc"},
		},
		BlockSize: []Selector{{Name: "vllm:cache_config_info", ValueLabel: "block_size"}},
		NumBlocks: []Selector{{Name: "vllm:cache_config_info", ValueLabel: "num_gpu_blocks"}},
		PrefixHits: []Selector{
			{Name: "vllm:prefix_cache_hits_total"},
			{Name: "vllm:gpu_prefix_cache_hits_total"},
		},
		PrefixQueries: []Selector{
			{Name: "vllm:prefix_cache_queries_total"},
			{Name: "vllm:gpu_prefix_cache_queries_total"},
		},
		PrefixHitRate: []Selector{{Name: "vllm:gpu_prefix_cache_hit_rate"}},
		Adapters:      vllmAdapters,
	}

	// engineSGLang reads SGLang servers started with --enable-metrics. Scheduler series carry
	// model_name, engine_type, tp_rank, pp_rank, moe_ep_rank (and dp_rank with data
	// parallelism). The geometry comes from the labels page_size and num_pages of
	// sglang:cache_config_info, or sglang:max_total_num_tokens divided by the page size.
	// The prefix hit rate is the rate of sglang:cached_tokens_total (all cache sources) over
	// sglang:prompt_tokens_total, falling back to the sglang:cache_hit_rate gauge. Note
	// that SGLang refreshes its scheduler gauges only every 40 decode steps.
	engineSGLang = &Engine{
		Name:           "sglang",
		HealthPath:     "/health",
		RankLabel:      "dp_rank",
		Waiting:        []Selector{{Name: "sglang:num_queue_reqs"}},
		Running:        []Selector{{Name: "sglang:num_running_reqs"}},
		KVUtilization:  []Selector{{Name: "sglang:token_usage"}},
		BlockSize:      []Selector{{Name: "sglang:cache_config_info", ValueLabel: "page_size"}},
		NumBlocks:      []Selector{{Name: "sglang:cache_config_info", ValueLabel: "num_pages"}},
		CapacityTokens: []Selector{{Name: "sglang:max_total_num_tokens"}},
		PrefixHits:     []Selector{{Name: "sglang:cached_tokens_total"}},
		PrefixQueries:  []Selector{{Name: "sglang:prompt_tokens_total"}},
		PrefixHitRate:  []Selector{{Name: "sglang:cache_hit_rate"}},
	}

	// engineTensorRTLLM reads trtllm-serve, which serves its metrics at /prometheus/metrics with
	// the labels model_name and engine_type. The prefix hit rate is the rate of
	// trtllm_prompt_cached_tokens_total over trtllm_prompt_tokens_total, falling back to
	// the trtllm_kv_cache_hit_rate gauge; queue and batch fall back to the older
	// trtllm_server_queue_length and trtllm_num_active_requests.
	engineTensorRTLLM = &Engine{
		Name:        "trtllm",
		MetricsPath: "/prometheus/metrics",
		HealthPath:  "/health",
		Waiting: []Selector{
			{Name: "trtllm_num_requests_waiting"},
			{Name: "trtllm_server_queue_length"},
		},
		Running: []Selector{
			{Name: "trtllm_num_requests_running"},
			{Name: "trtllm_num_active_requests"},
		},
		KVUtilization: []Selector{{Name: "trtllm_kv_cache_utilization"}},
		BlockSize:     []Selector{{Name: "trtllm_kv_cache_tokens_per_block"}},
		NumBlocks:     []Selector{{Name: "trtllm_kv_cache_max_blocks"}},
		PrefixHits:    []Selector{{Name: "trtllm_prompt_cached_tokens_total"}},
		PrefixQueries: []Selector{{Name: "trtllm_prompt_tokens_total"}},
		PrefixHitRate: []Selector{{Name: "trtllm_kv_cache_hit_rate"}},
	}

	// engineTriton reads Triton Inference Server with the TensorRT-LLM backend. Its batch
	// manager statistics are gauges keyed by a type label: nv_trt_llm_request_metrics
	// {request_type="waiting"|"active"|"scheduled"|...} and nv_trt_llm_kv_cache_block_metrics
	// {kv_cache_block_type="fraction"|"tokens_per"|"max"|"used"|...}. Running is "active",
	// the requests in flight in the engine ("scheduled" counts only those scheduled in the
	// current iteration), as trtllm-serve's trtllm_num_active_requests. Builds without the
	// "waiting" and "fraction" series fall back to nv_inference_pending_request_count and
	// used/max blocks. Triton serves metrics on their own port (8002) and health at
	// /v2/health/ready on the HTTP port (8000), so HealthPath is empty: give each Target a
	// HealthURL to check health separately.
	engineTriton = &Engine{
		Name: "triton-trtllm",
		Waiting: []Selector{
			{Name: "nv_trt_llm_request_metrics", Labels: map[string]string{"request_type": "waiting"}},
			{Name: "nv_inference_pending_request_count"},
		},
		Running: []Selector{
			{Name: "nv_trt_llm_request_metrics", Labels: map[string]string{"request_type": "active"}},
		},
		KVUtilization: []Selector{
			{Name: "nv_trt_llm_kv_cache_block_metrics", Labels: map[string]string{"kv_cache_block_type": "fraction"}},
		},
		BlockSize: []Selector{
			{Name: "nv_trt_llm_kv_cache_block_metrics", Labels: map[string]string{"kv_cache_block_type": "tokens_per"}},
		},
		NumBlocks: []Selector{
			{Name: "nv_trt_llm_kv_cache_block_metrics", Labels: map[string]string{"kv_cache_block_type": "max"}},
		},
		UsedBlocks: []Selector{
			{Name: "nv_trt_llm_kv_cache_block_metrics", Labels: map[string]string{"kv_cache_block_type": "used"}},
		},
	}

	// engineTGI reads Hugging Face text-generation-inference, which publishes its queue
	// (tgi_queue_size) and batch (tgi_batch_current_size) but no KV cache geometry,
	// utilisation or prefix cache statistics.
	engineTGI = &Engine{
		Name:       "tgi",
		HealthPath: "/health",
		Waiting:    []Selector{{Name: "tgi_queue_size"}},
		Running:    []Selector{{Name: "tgi_batch_current_size"}},
	}
)

// EngineOf returns a copy of a built-in [Engine] by the engine's name in configuration:
//
//	vllm    vLLM (V1 engine): vllm:num_requests_waiting, vllm:kv_cache_usage_perc, the cache
//	        geometry in the labels of vllm:cache_config_info, the prefix hit rate from
//	        vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total, LoRA adapters
//	        from vllm:lora_requests_info; older servers' vllm:gpu_* names as fallbacks
//	sglang  SGLang started with --enable-metrics: sglang:num_queue_reqs, sglang:token_usage,
//	        sglang:cache_config_info, sglang:cached_tokens_total over sglang:prompt_tokens_total
//	trtllm  trtllm-serve, its metrics at /prometheus/metrics: trtllm_num_requests_waiting,
//	        trtllm_kv_cache_utilization, trtllm_prompt_cached_tokens_total
//	triton  Triton Inference Server with the TensorRT-LLM backend: nv_trt_llm_request_metrics
//	        and nv_trt_llm_kv_cache_block_metrics by type label; no HealthPath (give each
//	        [Target] a HealthURL on Triton's HTTP port)
//	tgi     Hugging Face text-generation-inference: tgi_queue_size and tgi_batch_current_size,
//	        no KV signals
//
// The copy is the caller's to edit. It returns false for any other name. O(selectors).
func EngineOf(name string) (*Engine, bool) {
	var e *Engine
	switch name {
	case "vllm":
		e = engineVLLM
	case "sglang":
		e = engineSGLang
	case "trtllm":
		e = engineTensorRTLLM
	case "triton":
		e = engineTriton
	case "tgi":
		e = engineTGI
	default:
		return nil, false
	}
	return e.clone(), true
}

// clone returns a deep copy of e: editing the copy's selectors leaves e as it was.
func (e *Engine) clone() *Engine {
	c := *e
	sels := func(in []Selector) []Selector {
		if in == nil {
			return nil
		}
		out := make([]Selector, len(in))
		for i, s := range in {
			out[i] = s
			if s.Labels != nil {
				out[i].Labels = make(map[string]string, len(s.Labels))
				for k, v := range s.Labels {
					out[i].Labels[k] = v
				}
			}
		}
		return out
	}
	c.Waiting, c.Running, c.KVUtilization = sels(e.Waiting), sels(e.Running), sels(e.KVUtilization)
	c.BlockSize, c.NumBlocks, c.UsedBlocks = sels(e.BlockSize), sels(e.NumBlocks), sels(e.UsedBlocks)
	c.CapacityTokens, c.PrefixHits, c.PrefixQueries = sels(e.CapacityTokens), sels(e.PrefixHits), sels(e.PrefixQueries)
	c.PrefixHitRate = sels(e.PrefixHitRate)
	return &c
}
