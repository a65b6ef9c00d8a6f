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
//   - POST /v1/messages (Anthropic's Messages API, RenderMessages) and /v1/responses
//     (OpenAI's Responses API, RenderResponses), streamed in each API's own events or whole,
//     with the cached prompt tokens in each API's usage (cache_read_input_tokens,
//     input_tokens_details.cached_tokens). A stored response (store defaults to true) keeps
//     its conversation, so previous_response_id continues it — from the prefix cache — on
//     this server alone; another answers 404. POST /v1/messages/count_tokens answers
//     {"input_tokens": n}, the tokens of the prompt the body renders to.
//   - POST /v1/embeddings: a deterministic unit vector per input, as floats or (with
//     encoding_format "base64", as the OpenAI SDKs for Node and Python ask by default) as
//     base64 of little-endian float32s, and the usage.
//   - Errors in vLLM's shape, {"error":{"message","type","param","code"}} with the exception's
//     name as type ("BadRequestError", "NotFoundError", "InternalServerError") and the status
//     as code; Anthropic's on /v1/messages.
//   - GET /v1/models, GET /health.
//   - GET /metrics with vLLM's metric names and labels (vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:cache_config_info with
//     block_size and num_gpu_blocks, vllm:prefix_cache_queries_total and _hits_total, token
//     counters, latency histograms), so a router scrapes it as it scrapes vLLM.
//   - POST /tokenize as vLLM serves it: {model, prompt} or {model, messages} gives
//     {count, max_model_len, tokens}; messages are rendered by the chat template first.
//   - POST /kv_transfer/pull, the side channel of disaggregated serving (below), and the
//     simfleet:kv_transfer_* series of /metrics that count it.
//
// With Options.LoRA a Server serves LoRA adapters on its model as vLLM does with
// --enable-lora --lora-modules --max-loras: a request whose model names an adapter runs under
// it, /v1/models lists each adapter with the model as its parent, and /metrics exports
// vllm:lora_requests_info. The engine holds MaxLoRAs adapters in slots, loads a missing one
// (LoRAOptions.LoadCost, DefaultLoRALoadCost from published figures) into a free slot or in
// place of the least recently used idle one, keeps a request waiting while every slot serves
// other adapters' running requests, and hashes a prompt's blocks under its adapter, so a
// prefix cached under one adapter is a miss under another; KV events carry lora_name.
//
// Prompts are tokenized by Tokenize, a deterministic word-piece tokenizer that any client can
// call too: equal text prefixes give equal token prefixes, so requests sharing a system prompt
// or a conversation's history share KV blocks. Chat messages are rendered by RenderChat, a
// fixed ChatML template. The simulated model answers greedily: the same prompt always gets the
// same words, and an answer sent back in the next turn renders to the very tokens generated,
// so multi-turn conversations reuse the cache like they do on a real server.
//
// In table mode (Options.Tokens, a TokenTable) a server tokenizes as a real model server
// does, for a fixed set of requests: the prompt of a Chat, Messages or Responses request, and
// /tokenize's messages, are looked up by TableKey (the compact JSON of the fields that make the
// prompt) among ids computed offline by a real tokenizer and chat template, and a request not
// in the table is a 400. The engine then caches, and its KV events name, the very ids a vLLM
// server would, so a gateway's own tokenizer can be measured against them (the tokenizer
// conformance module's TestExactMode does). The answers are still the simulated model's.
//
// The answer length is chosen by a hash of the prompt between Options.MinAnswerTokens and
// MaxAnswerTokens ("stop"), cut at max_tokens ("length"); with vLLM's ignore_eos it is exactly
// max_tokens, which is what load generators want.
//
// A Fleet starts several servers on loopback ports (or serve a Server with httptest).
// Command simserver (internal/glue/simfleet/cmd/simserver) serves one Server, with its KV-event
// publisher, as a process of its own, and package simproc starts it from tests: fault tests
// can then kill -9 a real process, freeze it with SIGSTOP and restart it on the same ports,
// where Fleet.Kill can only close an in-process server.
//
// Server.SetSlowdown slows a server down mid-run as a noisy neighbour or a thermally
// throttled GPU slows a real one: every engine step begun afterwards takes the factor times its
// modelled duration (step base, prefill and decode costs alike), while its profile and
// /metrics' configuration stay as they were, so a router learns of it only from the latencies
// it measures. simserver sets it with -slow-factor 3 (with -slow-after 30s: 30 s after it
// started) or, at a time a script chooses, POST /debug/slow?factor=3.
//
// KV events, in the engine's terms, are handed to Options.OnKVEvents after every step;
// PublishKVEvents turns them into vLLM's wire format through a prefixcache/kvevents Publisher
// (ZMQ PUB, the topic and replay socket of vLLM's --kv-events-config), so a router's precise
// prefix index can follow a simulated server exactly as it follows a real one.
//
// # Disaggregated serving
//
// A Server takes either role of vLLM's disaggregated prefill and decode (the NIXL connector's
// protocol), chosen per request by the request's kv_transfer_params, so one fleet can be split
// into prefill and decode servers by a gateway alone:
//
//   - Prefill step: a request with do_remote_decode true (the gateway sends max_tokens 1,
//     not streamed) is served as usual, and its whole answer also carries, as vLLM's does,
//     "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
//     "remote_engine_id": ..., "remote_block_ids": [...], "remote_host": ..., "remote_port":
//     ..., "tp_size": 1}: this server's engine id (random, one per Server), one block id per
//     block of the prompt, and the side channel's address. The server keeps a pending
//     transfer for those blocks until a decode server pulls it or Options.TransferTimeout
//     (60 s, vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT) passes; at most 4,096 are kept, the
//     oldest dropped first. (A streamed prefill request is served as a plain one: its
//     parameters would come in a whole answer only.)
//   - Decode step: a request with do_remote_prefill true and those parameters pulls the KV
//     from the server they name, waits the transfer's time, and enters the engine with every
//     prompt token but the last already computed (engine.Request.RemotePrefill): the answer
//     comes without a prefill of its own, its usage reports the whole prompt with
//     cached_tokens counting only this server's own prefix-cache hits, and afterwards this
//     server's cache holds the prompt, so the conversation's next turn finds it here. If the
//     pull fails — the prefill server is gone or does not answer within 5 s, or keeps no such
//     transfer (unknown, expired, already pulled) — the server recomputes the prompt itself,
//     vLLM's default kv_load_failure_policy "recompute", and counts a failed pull.
//
// The parameters are checked strictly: a value of the wrong type, do_remote_decode and
// do_remote_prefill both true, or with do_remote_prefill a missing remote_engine_id or
// remote_host, no remote_block_ids (non-negative integers), a remote_port outside 1..65535 or a
// tp_size below 1, is a 400 whose message begins with the field's name, such as
// "kv_transfer_params.remote_port: ...". Other keys are ignored, since connectors add their
// own.
//
// The side channel is simfleet's stand-in for NIXL's RDMA read, served on each server's own
// HTTP listener: the decode server sends
//
//	POST http://remote_host:remote_port/kv_transfer/pull
//	{"remote_engine_id": "...", "remote_block_ids": [...], "prompt_tokens": N}
//
// and the prefill server answers 200 {"prompt_tokens": N}, releasing the transfer; 404 when it
// has no such transfer (another engine id, unknown, expired or pulled block ids); 409, keeping
// the transfer, when the transfer is of a prompt of another length, so that a decode sent a
// different prompt recomputes it. The address advertised is Options.SideChannel, by default
// the local address of the connection the prefill request came on. After a successful pull
// the decode server waits Options.TransferLatency plus Options.TransferPerToken for each
// prompt token not already in its prefix cache (NIXL reads only the blocks missing locally),
// cancelled if the client leaves. The defaults, 1 ms and 5.2 µs per token, are Qwen3-32B's:
// 64 layers × 8 KV heads × 128 head dim × 2 (K and V) × 2 bytes is 256 KiB of KV per token,
// which a 400 Gb/s (50 GB/s) RDMA NIC moves at line rate in 5.2 µs.
//
// Server.KVTransferStats counts both roles, and /metrics exports the same counters under
// simfleet's own prefix, leaving the vllm: names what vLLM exports:
// simfleet:kv_transfer_prefills_total, simfleet:kv_transfer_decodes_total,
// simfleet:kv_transfer_pulls_served_total, simfleet:kv_transfer_pulls_failed_total,
// simfleet:kv_transfer_pending (a gauge), simfleet:kv_transfer_dropped_total and
// simfleet:kv_transfer_seconds_total.
//
// The model leaves out what a gateway cannot see: the prefill server's blocks are not pinned
// while the transfer waits (its engine frees them when the one-token request finishes, as
// blocks of any finished request, and its prefix cache may keep them), and the transfer
// takes no bandwidth from other transfers.
//
// A Server and a Fleet are safe for concurrent use; Options, FleetOptions, Message and
// KVTransferStats are plain values.
package simfleet
