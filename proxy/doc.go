// Package proxy is usher's request pipeline for HTTP: the one package that composes the
// others, so a gateway can embed the whole path of a request instead of copying an example.
//
// # The pipeline
//
// For each POST to /v1/chat/completions or /v1/completions:
//
//  1. parse: the body is read (bounded by Options.MaxBodyBytes) and validated by
//     proxy/openai exactly as the backends will read it — field names are case-sensitive,
//     types strict — so a request the backend would refuse never waits for admission;
//  2. key: a FlowKeyer gives the request its Identity — tenant, session and band — from what
//     the gateway trusts, never from what the client claims;
//  3. hash: a Tokenizer turns the prompt into chained block hashes, once;
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
// # Errors
//
// Every answer the pipeline writes itself is OpenAI error JSON ({"error": {"message", "type",
// "param", "code"}}): 400 with the field at fault, 404 for an unknown model or route, 405,
// 408, 413, 429 with Retry-After when the queue is full (or, with Options.EarlyShed, when the
// estimated wait exceeds the TTL: at once, not after waiting it), 431, 499 when the client left, 502
// and 504 when the backend failed before answering, 503 when no capacity came in time. An
// error answer of the backend is passed through unchanged. A stream that breaks after it
// began ends with an error event in the same format.
//
// A message says what happened, never where or in Go's words: no backend address or port,
// no system call or Go error text; values the client sent are echoed at most in part (128
// bytes). Every request gets an id (RequestIDHeader, X-Request-Id) that its answer carries,
// that the backend receives in place of any the client sent, and under which the log line of
// a failure keeps the detail.
//
// A few malformed requests never reach a handler: net/http answers them itself in plain text
// and closes the connection — 431 for headers beyond the server's MaxHeaderBytes, 400 for a
// malformed request line or header, a bad or repeated Content-Length or a missing Host, 501
// for a Transfer-Encoding other than chunked, 505 for an unknown HTTP version. Serve from
// Listener(ln) and these go out as OpenAI error JSON too (plain HTTP only; see Listener).
//
// # Faults
//
// Every wait has a bound (Timeouts): connecting, the backend's response headers (for a whole
// answer, which comes with its headers, scaled by the output budget), the silence of an answer
// being relayed (which also bounds the time to the first token), the request as a whole, and
// reading the client's body. A request that fails before any byte of an answer reached the
// client — refused or reset connection, header timeout, 502, 503, 504, or 429 from the engine —
// is retried on a backend not yet tried (Retry), as long as retries stay within a budget of the
// requests (Envoy's rule, so a failing fleet is not hit by a retry storm). Each failed attempt
// closes its routing.Result with a routing.Failure, and the default routers' passive health
// (routing.Outlier) ejects a backend at once after a refused connection, or after five server
// failures in a row, and probes it back. A stream cut after it began ends with an OpenAI error
// event; both handles are freed either way.
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
