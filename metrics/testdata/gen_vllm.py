# Renders a vLLM V1 /metrics exposition (prometheus_client style) in classic text or OpenMetrics.
import sys
om = len(sys.argv) > 1 and sys.argv[1] == "om"
M = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
E = 'engine="0"'
L = E + "," + M
out = []
def fam(name, typ, help_):
    if om and typ == "counter":
        name = name[:-len("_total")]
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {typ}")
def created(name, help_, labels, ts=1764425000.123, strip=True, first=True):
    base = name[:-len("_total")] if strip and name.endswith("_total") else name
    if om:
        out.append(f"{base}_created{{{labels}}} {ts}")
    else:
        if first:
            out.append(f"# HELP {base}_created {help_}")
            out.append(f"# TYPE {base}_created gauge")
        out.append(f"{base}_created{{{labels}}} {ts}")

# process / python collector families
fam("python_gc_objects_collected_total", "counter", "Objects collected during gc")
for g, v in ((0, 10432.0), (1, 2291.0), (2, 871.0)):
    out.append(f'python_gc_objects_collected_total{{generation="{g}"}} {v}')
fam("python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC")
for g in range(3):
    out.append(f'python_gc_objects_uncollectable_total{{generation="{g}"}} 0.0')
fam("python_gc_collections_total", "counter", "Number of times this generation was collected")
for g, v in ((0, 2133.0), (1, 193.0), (2, 11.0)):
    out.append(f'python_gc_collections_total{{generation="{g}"}} {v}')
fam("python_info", "gauge", "Python platform information")
out.append('python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0')
for n, t, h, v in (
    ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", "6.1872324608e+010"),
    ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", "4.194603008e+09"),
    ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", "1.76442489825e+09"),
    ("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", "1843.27"),
    ("process_open_fds", "gauge", "Number of open file descriptors.", "127.0"),
    ("process_max_fds", "gauge", "Maximum number of open file descriptors.", "1.048576e+06"),
):
    fam(n, t, h)
    out.append(f"{n} {v}")

def gauge(name, help_, v, labels=L):
    fam(name, "gauge", help_)
    out.append(f"{name}{{{labels}}} {v}")
def counter(name, help_, rows):
    fam(name, "counter", help_)
    for labels, v in rows:
        out.append(f"{name}{{{labels}}} {v}")
    for i, (labels, v) in enumerate(rows):
        created(name, help_, labels, first=(i == 0))

gauge("vllm:num_requests_running", "Number of requests in model execution batches.", "{running}")
gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "{waiting}")
gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "{kv}")
counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", [(L, "{queries}")])
counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", [(L, "{hits}")])
counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", [(L, "3.0")])
counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(L, "8.812004e+06")])
counter("vllm:generation_tokens_total", "Number of generation tokens processed.", [(L, "1.240551e+06")])
counter("vllm:request_success_total", "Count of successfully processed requests.",
        [(f'{E},finished_reason="{r}",{M}', v) for r, v in (("stop", "4120.0"), ("length", "311.0"), ("abort", "7.0"))])
cc = ('block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",'
      'enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",'
      'num_cpu_blocks="None",num_gpu_blocks="27153",num_gpu_blocks_override="None",'
      'prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"')
gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "1.0", cc)

def hist(name, help_, buckets, counts, total):
    fam(name, "histogram", help_)
    for b, c in zip(buckets, counts):
        out.append(f'{name}_bucket{{{L},le="{b}"}} {c}')
    out.append(f'{name}_bucket{{{L},le="+Inf"}} {counts[-1]}')
    out.append(f"{name}_count{{{L}}} {counts[-1]}")
    out.append(f"{name}_sum{{{L}}} {total}")
    created(name, help_, L, strip=False)

def cum(n, k):
    # cumulative counts rising to n over k buckets
    return [float(round(n * min(1.0, (i + 1) / (k - 2)) ** 1.5)) for i in range(k)]

lat = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
       "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0"]
hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lat, cum(4438, len(lat)), 912.4)
itl = ["0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5",
       "5.0", "7.5", "10.0", "20.0", "40.0", "80.0"]
hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl, cum(1236113, len(itl)), 30412.9)
req = ["0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0",
       "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0"]
hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", req, cum(4438, len(req)), 40111.7)
hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", req, cum(4438, len(req)), 1211.2)
hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", req, cum(4438, len(req)), 901.0)
tok = ["1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000", "5000", "10000", "20000"]
hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok, cum(4438, len(tok)), 8812004.0)
it = ["1", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "16384"]
hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", it, cum(310455, len(it)), 10052555.0)
out.append("")
text = "\n".join(out)
if om:
    text += "# EOF\n"
sys.stdout.write(text)
