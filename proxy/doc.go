// Package proxy is usher's request pipeline for HTTP: the one package that composes the
// others, so a gateway can embed the whole path of a request instead of copying an example.
//
// # The pipeline
//
// For each POST to /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings
// (OpenAI's APIs) or /v1/messages (Anthropic's):
//
//  1. parse: the body is read (bounded by Options.MaxBodyBytes; a Content-Encoding of gzip
//     or deflate is decoded, and the limit bounds the decoded bytes too, so a gzip bomb gets
//     413; other codings get 415) and validated by proxy/openai exactly as the backends will
//     read it — field names are case-sensitive, types strict — so a request the backend
//     would refuse never waits for admission. The fields passed on unread (sampling
//     parameters, content parts) are checked for what no engine takes: a wrong JSON type, a
//     number that is not a finite float64 or an int64, a negative temperature, top_p
//     outside (0, 1], top_k below -1, top_logprobs above the limit. vLLM's wider ranges and
//     own parameters pass. The backend gets the decoded body, without Content-Encoding;
//  2. key: a FlowKeyer gives the request its Identity — tenant, session and band — from what
//     the gateway trusts, never from what the client claims;
//  3. hash: a Tokenizer turns the prompt into chained block hashes, once; with
//     Options.Quota, the request then reserves its expected tokens in its tenant's quota, or
//     is refused at once (see "Quotas");
//  4. admit: the flowcontrol.Queue orders the request among the others by its Policy and
//     holds it until the gate opens, its time limit passes or the client leaves;
//  5. pick: the routing.Router chooses a backend from the prefix index and the fleet's load;
//  6. relay: the request goes to the backend with the client's "priority" removed (the band
//     decides order; a client must not reorder the engine's queue) and, when streamed, with
//     usage requested; the answer streams back through a tap that sees the first token and
//     the usage, and drops the usage chunk the client did not ask for;
//  7. done: the router's Result and then the queue's Ticket are closed exactly once — when
//     the answer ends, when it breaks, or when the client goes away — with the usage the
//     backend reported, which feeds the fairness accounting, the router's in-flight counters
//     and the prefix index.
//
// Closing both handles exactly once, in that order, with FirstToken taken from the stream, is
// the part an embedder would most likely get wrong; it lives here once.
//
// # Two ways in
//
// Handler is a complete OpenAI-compatible gateway: an http.Handler that also serves
// /v1/models, /health and /metrics. For a proxy that already runs an httputil.ReverseProxy,
// the same pipeline is three hooks — Handler.Rewrite, Handler.ModifyResponse and
// Handler.ErrorHandler — and Handler itself is nothing more than a ReverseProxy using them.
//
// # usher's own metrics
//
// GET /metrics serves [Handler.Registry]: the Go runtime's and the process's series, the
// backends' scrape state (metrics.Scraper's usher_scrape_*, usher_backend_stale, ...), and the
// series the Handler records where things happen, every name prefixed usher_: admissions and
// their waits by band and outcome, the queue by band, flows, picks and requests in flight per
// backend and per role, passive health (usher_backend_ejections_total, usher_backend_ejected,
// usher_backend_restorations_total), the active health checks' probes by result
// (usher_health_probes_total{backend,result}), requests moved off stalled backends
// (usher_stall_moves_total), the prefix index, disaggregated serving
// (usher_pd_*), latency targets (usher_slo_requests_total,
// usher_latency_prediction_error_seconds), retries before the first byte
// (usher_retries_total{reason,outcome}: reason connect, header_timeout, stalled, overloaded or
// server_error; outcome retried, attempts_exhausted, budget_exhausted, no_backend or
// client_gone), the router's clamped scores (usher_clamped_scores_total{scorer}, one per
// scorer of its profile: a scorer of your own whose scores fall outside [0, 1] shows there)
// and the LoRA adapters each backend's metrics list as running or waiting
// (usher_backend_lora_adapters{backend,adapter,state}: its configured Adapters and then the
// names it reports, up to 32 a backend, the rest as adapter="other"). Every label value comes
// from a set fixed by configuration (bands, admission outcomes, backends, the profile's
// scorers, adapters) plus "other", so the number of series is bounded whatever the traffic.
// Extensions register their own (proxy/kvfeed's usher_kvevents_*, among them
// usher_kvevents_delivered_batches_total{source,via="live"|"replay"}; replica's
// usher_replica_sync_*).
//
// A backend's label value is its name: Backend.Name where given, else its URL, which then
// shows the fleet's addresses to whoever reads /metrics. The API's clients are one such
// reader: with Options.MetricsElsewhere the Handler's port answers /metrics 404, and the
// program serves Registry on a port of its own through metrics.Exporter, which can ask for a
// bearer token from a file (examples/gateway's -metrics-listen and -metrics-token-file; the
// endpoint picker, examples/epp, has the same two flags over the same Exporter).
//
// # Anthropic's Messages, OpenAI's Responses and embeddings
//
// These take the same pipeline as chat. Their prompts are rendered so that a conversation's
// next turn begins with the last one's (openai.Request.AppendPrompt); embeddings are not
// hashed, and go where the load is lowest. The session is the session header, else the
// API's own field (Anthropic's metadata.user_id, the Responses API's conversation or
// prompt_cache_key). Their streams are read in their own events (usage, cached tokens and
// the first token; the last event stands for [DONE]) and relayed unchanged, but for how they
// end in failure (see Errors). A Responses
// request naming previous_response_id must reach the server that stored that response: the
// Handler remembers, for the responses it relayed (Options.ResponseHomes of them, least
// recently used forgotten first), which backend answered, per tenant, and pins a continuation there
// (and its retries: no other backend could serve it); when that backend has left the fleet
// it answers 404 naming previous_response_id. A continuation of a response it did not see
// is routed like any other request, and the backend answers for it.
//
// GET /v1/models/{id} answers the model's object as GET /v1/models lists it (the backend's
// own, vLLM's root and parent included; for a configured name OpenAI's id, object, created
// and owned_by "usher" with vLLM's root and parent), or 404 model_not_found naming "model";
// the id may hold '/' ("org/model"). Anthropic's POST /v1/messages/count_tokens is
// validated as a Messages request's input (without max_tokens) and its model resolved, with
// Anthropic's errors; it is then forwarded, byte for byte and without admission, to a backend
// that serves the model and the endpoint (vLLM does), chosen by the router; a backend that
// answers 404, 405 or 501 there is not asked again for a minute. Where no backend counts, the
// count is the Tokenizer's (Prompt.Tokens, {"input_tokens": n}): exact with a Tokenizer that
// renders and tokenizes a Messages prompt as the engine does (an in-process one such as the
// simulator's), an estimate — four bytes of the rendered prompt per token — with
// BytesTokenizer and with EndpointTokenizer, whose servers' /tokenize takes no Messages input.
//
// # Errors
//
// Every answer the pipeline writes itself is OpenAI error JSON ({"error": {"message", "type",
// "param", "code"}}) — Anthropic's ({"type": "error", "error": {"type", "message"}}, the
// message naming the field) for a request to /v1/messages, mid-stream errors included: 400 with the field at fault, 404 for an unknown model or route, 405,
// 408, 413, 415 for a Content-Encoding it cannot decode, 429 with Retry-After when the queue is full (or, with Options.EarlyShed, when the
// estimated wait exceeds the TTL: at once, not after waiting it), 431, 499 when the client left, 502
// and 504 when the backend failed before answering, 503 when no capacity came in time. A
// stream that breaks after it began ends with an error event in the same format.
//
// A backend's error answer (status 400 or more) is handed on in the endpoint's shape, not the
// backend's: its first 64 KiB are read as OpenAI's or vLLM's {"error": {...}} (vLLM's
// numeric code dropped), vLLM's and SGLang's older top-level error, Anthropic's, FastAPI's
// "detail" (its loc as the param) or TGI's; the status (400–599) and message are kept, and the
// param — for /v1/messages, whose errors have none, put before a message that does not name
// it; the type is the API's own for the status: OpenAI's invalid_request_error (4xx),
// rate_limit_error (429), service_unavailable (503), timeout_error (504), server_error (other
// 5xx) — vLLM's "BadRequestError" and "InternalServerError" become the first and the last, an
// OpenAI type the backend wrote is kept — or Anthropic's (400 invalid_request_error, 401
// authentication_error, 402 billing_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error,
// other 5xx api_error). A body that is none of these (HTML, text, empty, compressed, cut)
// gets a generic message for its status. Of the backend's headers only Retry-After,
// Retry-After-Ms and the rate-limit headers go with it. The last attempt's answer is the one
// handed on, also when retries are spent or no other backend is left (see Retry). Each such
// answer, and each error a backend reports inside a stream, is logged with the request id,
// the attempts and the start of the backend's body, at most one line per backend and status
// every 10 s (the others counted in the next).
//
// Inside streams: a chat or completions chunk {"error": ...} is relayed with OpenAI's types;
// on /v1/messages an error event stays Anthropic's "event: error", and an OpenAI-shaped
// chunk becomes one. A Responses stream that fails ends as OpenAI's do: an "error" event
// ({"type": "error", "code", "message", "param", "sequence_number"}) and then
// "response.failed", whose response is the one the stream's response.created carried with
// "status": "failed" and "error": {"code", "message"} (server_error, or rate_limit_exceeded);
// their sequence_number goes on from the highest the backend sent (or the events counted).
// The backend's own "error" event is followed by that response.failed. An event cut by the
// break is not relayed.
//
// A message says what happened, never where or in Go's words: no backend address or port
// (in a backend's message, each URL, IP address and name of the backend's host is replaced
// by the word address in square brackets),
// no system call or Go error text; values the client sent are echoed at most in part (128
// bytes). Every request gets an id (RequestIDHeader, X-Request-Id) that each of its answers
// carries — the 100 Continue a client that sent Expect: 100-continue waits for (one, sent
// when the Handler starts reading the body, never forwarded from the backend) and the final
// answer alike — that the backend receives in place of any the client sent, and under which
// the log line of a failure keeps the detail. On Anthropic's endpoints (/v1/messages and the
// paths below it) the answers carry the same id in request-id too, where Anthropic's SDKs
// read it.
//
// A few requests never reach a handler: net/http answers them itself in plain text (or not at
// all) and closes the connection — 431 for headers beyond the server's MaxHeaderBytes, 400
// for a malformed request line or header, a bad or repeated Content-Length or a missing Host,
// 501 for a Transfer-Encoding other than chunked, 505 for an unknown HTTP version, 417 with
// an empty body for an Expect other than 100-continue, and a 400 (or silence) when the
// headers stop midway and the server's ReadHeaderTimeout passes. Serve from
// [Handler.Listener] and each goes out as JSON with Content-Type application/json and an id
// of the Handler's sequence, Anthropic's shape (and request-id) when the request line names
// /v1/messages, and 408 for headers that stop midway; each is logged with its id,
// rate-limited. On plain HTTP: on a TLS connection net/http's refusals are out of reach (see
// [Handler.Listener]; terminate TLS in front, or accept them there as net/http writes them).
//
// # Faults
//
// Every wait has a bound (Timeouts): connecting, the backend's response headers (for a whole
// answer, which comes with its headers, scaled by the output budget), the silence of an answer
// being relayed (which also bounds the time to the first token), the request as a whole, and
// reading the client's body. The http.Server that serves the Handler needs only bounds on
// slow clients that do not cut long streams: a ReadHeaderTimeout (10 s, say), an IdleTimeout
// for keep-alive connections (2 min) and MaxHeaderBytes (1 MiB), and no ReadTimeout or
// WriteTimeout, which would end a streamed answer mid-way. A request that fails before any byte of an answer reached the
// client — refused or reset connection, header timeout, 502, 503, 504, or 429 from the engine —
// is retried on a backend not yet tried (Retry), as long as retries stay within a budget of the
// requests (Envoy's rule, so a failing fleet is not hit by a retry storm). Each failed attempt
// closes its routing.Result with a routing.Failure, and the default routers' passive health
// (outlier.Detector) ejects a backend at once after a refused connection, or after five server
// failures in a row. A stream cut after it began ends with an OpenAI error event; both handles
// are freed either way.
//
// Stalls are judged per request, not by a timeout: a streamed request whose backend sends no
// first byte (the response headers, which model servers send as soon as they accept a stream)
// within Timeouts.Stall — 2 s, or 3 × the latency model's predicted time to first token where
// that is longer — marks its backend stalled, whatever ResponseHeader says: the backend is
// ejected (no new picks), and every request waiting there for its first byte, streamed or not,
// prefill legs included, is moved — cancelled there and retried elsewhere before any byte
// reached the client. One request's progress never hides another's stall. Moves are bounded
// by Retry.Attempts but not charged to the retry budget (see Retry). Whole answers and prefill
// legs, whose first byte is their end, are judged by the health checks' streamed probes.
//
// Ejected backends come back through active health checks (Options.HealthChecks, package
// proxy/healthcheck), run by Run: the Handler's own probes, never a client's request — GET
// /health for idle backends, a streamed one-token completion for ejected ones and for busy
// ones without a success, every second (±20%) for an ejected backend — so a server that
// recovers is back within about two seconds, even when no traffic comes, and a server that
// still fails is probed without spending a client's request. The fault runs, before and after,
// are in the healthcheck package's documentation. With Options.NoHealthChecks (or a Router
// without an outlier.Detector) the Detector's half-open state probes with client requests, one
// at a time.
//
// # Models, adapters and pools
//
// One Handler may front several models and the LoRA adapters served on them. Each Backend
// says what it serves (Models, and Adapters on its first model), or else the Handler reads
// its GET /v1/models (vLLM lists an adapter with its base model as "parent"), at Start and
// every 30 s. GET /v1/models answers the union; a request naming a model no backend serves is
// a 404 naming "model"; the router picks only among the backends that serve the model the
// request names (routing.Request.Model; a backend that lists nothing serves anything). A
// request naming an adapter carries it (routing.Request.Adapter) to adapter-aware scorers,
// and its prompt is hashed under the base model and the adapter (SeedOf), the key the engine
// caches it under and its KV events name (lora_name, and the cache_salt in extra_keys), so a
// prefix cached under one adapter never counts for another.
//
// When the configured backends do not all serve the same models, each base model's backends
// are a pool with a queue of its own — the default queue's policy, time limit and capacities,
// with the pool's MaxInFlight and Saturation (Options.Pools; 64 per backend by default) — so a
// flood of one model waits in its own queue and never holds another's requests (the queue
// dispatches in order and stops at a closed gate, so one shared queue would). Fairness is
// accounted per pool.
//
// # Disaggregated serving
//
// A fleet with prefill servers (Backend.Role routing.RolePrefill) and decode servers
// (RoleDecode; RoleBoth serves either) is served in two steps, in vLLM's KV-transfer protocol
// as its NIXL connector speaks it (vLLM's disaggregated proxy and llm-d's routing sidecar send
// the same). Servers whose connector works both ways (Backend.KVBoth, vLLM's kv_both) need no
// fixed role: the decider then defaults to disagg.Planner, ticked after every scrape, which
// moves them between prefill and both as the load changes (usher_pd_planned_role,
// usher_pd_role_changes_total).
//
//  1. the decode pick: the router chooses a decode server as for any request (prefix, load,
//     session), and the Decider (Options.Decider; by default disagg.NewPrefix, llm-d's
//     rule: at least 512 prompt tokens the decode server is not believed to hold) decides
//     whether the prompt is worth prefilling elsewhere. If not, the decode server serves the
//     request whole, as in an aggregated fleet.
//  2. the prefill step: a second pick, among prefill servers (by prefix and prefill load;
//     without the session, whose home stays its decode server),
//     gets the client's request with max_tokens (and max_completion_tokens) 1, min_tokens at
//     most 1, no streaming, no stream_options and kv_transfer_params {"do_remote_decode":
//     true, ...}. Its whole answer carries kv_transfer_params (remote_engine_id,
//     remote_block_ids, remote_host, remote_port, tp_size, ... — opaque to usher).
//  3. the decode step: the client's request, byte for byte as in the aggregated case, with
//     those kv_transfer_params added, goes to the decode server, which pulls the KV and
//     streams the answer. The client sees one answer, its usage the decode server's.
//
// Each pick is a routing.Result of its own, charged from its pick and closed exactly once:
// the prefill pick when its answer comes (or fails), the decode pick as any request's. The
// router's prefix index learns the prompt on both servers. A prefill step that fails (refused,
// reset, timed out, an error status, an answer without kv_transfer_params) is retried on
// another prefill server under Retry's attempts and budget; when none answers, the decode
// server serves the request whole — a fallback, counted in usher_pd_requests_total. A decode
// step that fails before its first byte is retried like any request, with the same
// kv_transfer_params: the prefill server keeps the KV until a decode server pulls it, and a
// decode server whose pull fails recomputes the prompt (vLLM's default), so the prefill never
// runs twice. A client that leaves cancels whichever step is running. A client may not send
// kv_transfer_params itself (400 naming the field): it would aim a decode server's KV pull at
// a host of its choosing.
//
// Metrics: usher_pd_requests_total{decision="aggregated|disaggregated|fallback"},
// usher_pd_prefill_attempts_total{result="ok|failed|cancelled"}, usher_pd_prefill_seconds,
// usher_pd_decode_first_token_seconds (a stream's time from the prefill's answer to the decode's
// first token: the KV transfer, the decode server's queue and first step) and
// usher_role_inflight_requests{role}. For Envoy, proxy/extproc picks both and hands the
// prefill endpoint to the decode pod's sidecar in the x-prefiller-host-port header.
//
// # Service-level objectives
//
// A request may have latency targets (routing.Latency): a time to first token (TTFT, counted
// from its arrival at the gateway) and a time per output token (TPOT). They come from
// configuration, per band (Options.SLO), and — only when the operator trusts them
// (Options.TrustSLOHeaders), as it trusts a tenant header — from the x-slo-ttft-ms and
// x-slo-tpot-ms headers a proxy in front sets. A client never buys priority with them:
// untrusted, they are ignored; trusted, a header may only loosen its band's target (the
// larger of the two counts) and sets nothing where the band has no target, because a tighter
// target is an earlier place in the queue under the slo policy (ordered by arrival + target)
// and under edf (ordered by the deadline below). A trusted header that is not one whole
// number of milliseconds from 1 to 3600000 is a 400 naming it. With targets, a request is:
//
//   - routed by SLO: its targets go to the router (routing.Request.Targets, with its
//     expected length from max_tokens, max_completion_tokens or max_output_tokens as
//     routing.Request.OutputTokens), and a PredictedLatency scorer in the profile (the
//     registry's predicted-latency, or the usher-latency profile) sends it to the backend
//     predicted to meet them with the most headroom, or the fastest when none is;
//   - admitted in time: when the router predicts latency (Router.Predict: the best TTFT p̂
//     among the eligible backends), a request with a TTFT target T must be dispatched by
//     arrival + T − p̂, its flowcontrol.Request.Deadline, but never sooner than 50 ms from
//     now and never later than the TTL (a deadline at or beyond the TTL is left to the TTL).
//     So early shedding (Options.EarlyShed) refuses at once, 429 with Retry-After, a request
//     whose estimated wait exceeds that budget — one that no backend can serve in time
//     behind the queue — while one that can be dispatched at once is never shed; a request
//     that waits past its deadline expires, 503 as any expiry. Without a latency model the
//     deadline stays the TTL. With a Queue of your own, whose TTL the Handler does not know,
//     the deadline is arrival + T − p̂ (at least 50 ms from now) even when the TTL is sooner;
//   - ordered by its own target under the slo policy: the Handler's queue requests carry the
//     targets in their Value, which the policy reads.
//
// The endpoint picker (proxy/extproc, examples/epp's -slo, -trust-slo-headers and
// -slo-shed-above) reads and applies targets the same way (package internal/slo serves both),
// for Envoy deployments, with the same metrics.
//
// The router learns its latency model from streamed requests only (their first token is
// seen); a whole answer teaches it nothing. Metrics: usher_slo_requests_total{band,result}
// counts requests with targets as met or missed (streamed requests: TTFT from arrival, TPOT
// after the first token; a failure misses), shed (429 on arrival) or expired, and
// usher_latency_prediction_error_seconds{target="ttft|tpot"} the model's absolute error on
// the chosen backend.
//
// # Quotas
//
// Options.Quota (package proxy/quota) limits tenants by requests and tokens per window —
// weighted tokens, input and output tokens, per tenant, model and band set, several windows
// at once — on one gateway or across its replicas. A request reserves, before it waits in the
// queue, one request and its prompt plus max_tokens (or the learned mean answer when it gives
// none) in the window it arrives in; when it ends it settles there to what it used: the usage
// the backend reported, the stream's chunks when it reported none, what a cancelled or failed
// request used so far (its prompt, once a backend was tried). A request that does not fit is
// refused at once: 429 rate_limit_error (Anthropic's shape on /v1/messages) whose message
// names the tenant and the limit, with Retry-After the time until the window refills. Every
// answer of the pipeline, 429s included, carries the tightest limits' headers: OpenAI's
//
//	x-ratelimit-limit-requests: 600          x-ratelimit-limit-tokens: 2000000
//	x-ratelimit-remaining-requests: 599      x-ratelimit-remaining-tokens: 1998720
//	x-ratelimit-reset-requests: 42s          x-ratelimit-reset-tokens: 42s
//
// and on /v1/messages Anthropic's anthropic-ratelimit-requests-limit, -requests-remaining,
// -requests-reset, the -tokens-, -input-tokens- and -output-tokens- triples, resets as
// RFC 3339 times (2026-12-07T05:51:15Z). Metrics: usher_quota_requests_total{tenant,outcome},
// usher_quota_tokens_total{tenant}, usher_quota_utilization{tenant} (20 tenants at most and
// "other"), usher_quota_tenants and usher_quota_syncs_total{result}.
//
// # Trust
//
// The tenant is a header set by a trusted proxy (KeyerOptions.TenantHeader) or a keyed
// HMAC-SHA256 digest of the API key, so no one can construct a key that lands on a tenant
// of their choice; bands come only from configuration; unknown tenants beyond a bound share
// one anonymous flow, so minting keys does not escape per-flow limits.
//
// # Concurrency and cost
//
// New starts no goroutine; Run does the background work (scraping, KV events, model lists)
// and Close releases it. Handler and its hooks are safe for concurrent use. Per request the
// pipeline does O(body) parsing and hashing, O(log flows) admission and one Pick; the relay
// parses JSON only until the first token and then only the usage chunk.
package proxy
