// Package metrics reads model servers into the router's [routing.BackendState], and serves
// usher's own series to Prometheus ([Exporter]).
//
// # The model
//
// A [Scraper] scrapes the Prometheus endpoints and health endpoints of vLLM, SGLang,
// TensorRT-LLM, Triton and TGI servers (or any server described by a custom [Engine]) and
// publishes, per backend, a [State] snapshot that converts to [routing.BackendState]. The
// Scraper is itself a Prometheus collector for its scrape errors, backend staleness and
// health.
//
// # From exposition to router
//
// An Engine names, for one kind of server, where each signal lives. A signal is a list of
// Selectors tried in order, so that an engine's description survives renames: vLLM's KV utilisation is
// vllm:kv_cache_usage_perc, and vllm:gpu_cache_usage_perc on older servers. A Selector picks
// series by family name and label values, reads the sample value or a number written in a
// label (vLLM and SGLang publish their cache geometry as labels of an info gauge:
// vllm:cache_config_info{block_size="16",num_gpu_blocks="27153"}), scales it, and aggregates
// the series it matched (a data-parallel vLLM has one series per engine: queues and blocks
// add up, utilisations average). What a server does not publish stays absent: a Reading
// records which signals it found, and a State converts to a routing.BackendState whose Known
// bits say the same. Missing is never written as zero, which would make a backend look idle.
//
//	signal       vLLM                           SGLang                         trtllm-serve                       Triton TRT-LLM                         TGI
//	waiting      vllm:num_requests_waiting      sglang:num_queue_reqs          trtllm_num_requests_waiting        nv_trt_llm_request_metrics{waiting}    tgi_queue_size
//	running      vllm:num_requests_running      sglang:num_running_reqs        trtllm_num_requests_running        nv_trt_llm_request_metrics{active}     tgi_batch_current_size
//	KV use       vllm:kv_cache_usage_perc       sglang:token_usage             trtllm_kv_cache_utilization        ..._kv_cache_block_metrics{fraction}   -
//	block size   cache_config_info block_size   cache_config_info page_size    trtllm_kv_cache_tokens_per_block   ..._kv_cache_block_metrics{tokens_per} -
//	blocks       cache_config_info num_gpu_...  cache_config_info num_pages    trtllm_kv_cache_max_blocks         ..._kv_cache_block_metrics{max}        -
//	prefix hits  prefix_cache_hits/queries      cached_tokens/prompt_tokens    prompt_cached_tokens/prompt_tokens -                                      -
//	LoRA         lora_requests_info (labels)    -                              -                                  -                                      -
//
// vLLM lists the LoRA adapters of its running and waiting requests and its adapter slots in the
// labels of vllm:lora_requests_info, one series per label set it ever wrote, valued with the
// time it wrote it: the newest series is the current state (AdapterInfo).
//
// The prefix cache hit rate is taken from counters as a rate between two good scrapes,
// Δhits/Δqueries, rather than as the lifetime ratio (which stops moving after an hour) or the
// engines' own gauges (SGLang refreshes its gauges only every 40 decode steps); a counter that
// went down means the server restarted, and everything it counts then is new. Servers
// without counters (vLLM V0, older trtllm-serve) fall back to their hit-rate gauge.
//
// # Scraping
//
// Scraper.Run scrapes every backend once per Interval until its context ends. Each backend
// has its own schedule in a heap of due times: the first scrape falls at a random moment in
// the first Interval and each next one Interval plus a random jitter after the previous one
// started, so a fleet is not scraped in lockstep and a slow backend delays only itself. At
// most Concurrency scrapes run at once; each request has its own Timeout. Run's goroutine owns
// the heap; the scrapes are the only other goroutines, and all have finished when Run
// returns. ScrapeOnce scrapes every backend once and returns, for tests and for callers with
// their own loop. A Scraper starts nothing by itself.
//
// One scrape GETs the metrics endpoint, parses it, and GETs the health endpoint (vLLM, SGLang,
// trtllm-serve and TGI serve /health; Triton serves metrics and health on different ports,
// so its targets name a HealthURL). The result is published as a new State through an
// atomic.Pointer and never modified again: readers (Snapshot and State, which copy it,
// BackendStates, Collect) never lock and never see a half-written state. A failed scrape keeps the values and the time of the last good one, so
// the router can judge their age itself (routing.Options.StaleAfter); State.Stale gives the
// scraper's own verdict against Options.StaleAfter. Health is unknown until the server first
// answers, healthy after a 2xx from its health endpoint, unhealthy at once on an error status
// and after Options.UnhealthyAfter attempts in a row without any answer. Options.OnUpdate is
// called from Run's goroutine after scrapes complete, which makes it the single writer that
// routing.Router.Update wants.
//
// # Parsing
//
// Every value the package uses is parsed by prometheus/common's expfmt; the package itself only
// finds line boundaries and metric names. The Scraper asks for the classic text
// format first (all the engines above serve it on request) and reads whatever comes back by
// its Content-Type: classic text, OpenMetrics 1.0, or delimited protobuf.
//
// Most of a model server's exposition is histograms no router reads, and expfmt allocates
// several times per series. So the Parser first scans the exposition's lines and hands expfmt
// only the TYPE lines and samples of the families its profile selects, plus any line that does
// not have the shape of a sample, so that an HTML error page or a truncated body still fails to
// parse. FuzzParse checks that the filtered parse reads exactly what a parse of the whole
// exposition reads; BenchmarkScrapeParse measures it (current figures in bench/BENCHMARKS.md).
//
// OpenMetrics from model servers (Python's prometheus_client: counters with _total and
// _created samples, "# UNIT", "# EOF") is read by the same classic parser, with the TYPE of
// OpenMetrics-only families (info, stateset, gaugehistogram, unknown) read as untyped; a body
// that says it is OpenMetrics must end with "# EOF", which is how the format tells a complete
// exposition from a cut one. Exemplars and fractional timestamps in a selected family are
// rejected.
//
// # The Scraper's own series
//
// The Scraper is a Prometheus collector for its scrape errors, backend staleness and health,
// every name prefixed usher_ and every label value from a set fixed by its targets (backend)
// or by the package (the scrape error reason), so the number of series is bounded whatever
// the traffic. The gateway's own series (admission, queue, picks, in-flight requests, the
// prefix index) are recorded by package proxy where those things happen, and served beside
// the Scraper's on its GET /metrics.
//
// # Serving usher's metrics
//
// An [Exporter] serves a Prometheus gatherer (a gateway's or endpoint picker's registry) on a
// listener of the program's own, behind optional bearer-token authentication: the tokens of a
// file, read again when the file changes, and a judge of the program's own
// (ExporterOptions.Authenticate, where a Kubernetes TokenReview fits). The file is looked at on
// each request that brings a token rather than watched or reloaded on SIGHUP: a scrape every
// few seconds makes a stat per request free, nothing runs in the background, and a rotated
// Secret counts from the next scrape without a signal that a container runtime may not
// deliver. Tokens are compared as SHA-256 digests in constant time, every token every time.
//
// # Complexity
//
// One scrape is O(exposition bytes) to find lines and names, plus expfmt's parse of the
// selected families, plus O(selectors × matching series) to extract the signals. The heap of
// due times costs O(log backends) per scrape.
//
// # Alternatives not taken
//
//   - expfmt's OpenMetrics decoder (prometheus/common v0.73.1): it matches every line against
//     the OpenMetrics ABNF grammar, at a cost per line far above a scrape's budget and
//     super-linear in line length, so a server could stall its own scrape indefinitely. The
//     Scraper never calls it; the one thing given up is that exemplars and fractional
//     timestamps in a selected OpenMetrics family are errors rather than read.
//   - Rounds in lockstep (scrape everyone, wait for all, sleep). One hanging backend would
//     hold every other backend's data back to its timeout. Per-backend due times in one heap
//     cost O(log n) per scrape and keep slow backends to themselves.
//   - Publishing each scrape to the router from the scrape goroutines. routing.Router.Update
//     expects one writer; OnUpdate runs on Run's goroutine and coalesces completions.
//   - Deciding staleness only in the scraper. A published State never changes, so its Stale
//     is as of the last attempt; the router judges age at pick time from BackendState.UpdatedAt instead,
//     which is exact.
//   - Trusting the protobuf length prefixes. expfmt's protobuf decoder allocates what the
//     prefix claims; the Parser checks every prefix against the body first.
//
// # Concurrency
//
// A Scraper is safe for concurrent use. A Parser is not: give each goroutine its own.
// Options, Target, Engine, Selector, Found, Reading and State are plain values: copy them freely, and do not modify one (in particular an Engine handed to a
// Scraper or Parser) while another goroutine reads it.
package metrics
