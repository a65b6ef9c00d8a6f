// Package simfleet simulates a fleet of vLLM-compatible model servers in one process: the
// embedded default backend of usher's example gateway, and a test double for anything that
// talks to vLLM.
//
// Each Server is an http.Handler backed by the engine model of internal/engine (KV blocks with
// prefix reuse, continuous batching with chunked prefill, preemption), advanced in real time by
// the server's Run loop — one goroutine per server, started explicitly with Run or Start and
// stopped by Close. It serves:
//
//   - POST /v1/chat/completions and /v1/completions: streamed as server-sent events exactly as
//     vLLM streams them (data: {json} chunks, a usage chunk when stream_options.include_usage
//     is set, data: [DONE]) or whole; usage reports prompt_tokens_details.cached_tokens, the
//     prompt tokens the engine served from its prefix cache. A client that disconnects aborts
//     its request in the engine.
//   - GET /v1/models, GET /health.
//   - GET /metrics with vLLM's metric names and labels (vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:cache_config_info with
//     block_size and num_gpu_blocks, vllm:prefix_cache_queries_total and _hits_total, token
//     counters, latency histograms), so a router scrapes it as it scrapes vLLM.
//   - POST /tokenize as vLLM serves it: {model, prompt} or {model, messages} gives
//     {count, max_model_len, tokens}; messages are rendered by the chat template first.
//
// Prompts are tokenized by Tokenize, a deterministic word-piece tokenizer that any client can
// call too: equal text prefixes give equal token prefixes, so requests sharing a system prompt
// or a conversation's history share KV blocks. Chat messages are rendered by RenderChat, a
// fixed ChatML template. The simulated model answers greedily: the same prompt always gets the
// same words, and an answer sent back in the next turn renders to the very tokens generated,
// so multi-turn conversations reuse the cache like they do on a real server.
//
// The answer length is chosen by a hash of the prompt between Options.MinAnswerTokens and
// MaxAnswerTokens ("stop"), cut at max_tokens ("length"); with vLLM's ignore_eos it is exactly
// max_tokens, which is what load generators want.
//
// A Fleet starts several servers on loopback ports (or serve a Server with httptest).
// Command simserver (examples/simfleet/cmd/simserver) serves one Server, with its KV-event
// publisher, as a process of its own, and package simproc starts it from tests: fault tests
// can then kill -9 a real process, freeze it with SIGSTOP and restart it on the same ports,
// where Fleet.Kill can only close an in-process server.
//
// KV events, in the engine's terms, are handed to Options.OnKVEvents after every step;
// PublishKVEvents turns them into vLLM's wire format through a prefixcache/kvevents Publisher
// (ZMQ PUB, the topic and replay socket of vLLM's --kv-events-config), so a router's precise
// prefix index can follow a simulated server exactly as it follows a real one.
//
// A Server and a Fleet are safe for concurrent use; Options, FleetOptions and Message are
// plain values.
package simfleet
