// Package extproc is usher as an endpoint picker (EPP) for Envoy-based gateways: an Envoy
// external-processing (ext_proc v3) gRPC server speaking the Kubernetes Gateway API
// Inference Extension's endpoint picker protocol, so that usher drops into deployments where
// an InferencePool names its endpoint picker, in place of the reference picker or llm-d's.
//
// # The model
//
// Envoy owns the connections: it receives the client's request, asks the picker over one
// ext_proc stream per request which model server should take it, sends it there itself, and
// shows the picker the answer as it relays it. The picker never talks to a model server
// except to scrape its metrics. Per stream, the Server runs the same pipeline as
// proxy.Handler, with the same library calls:
//
//  1. request headers: method, path, authority and headers are kept; the proxy's subset hint
//     is read from the filter metadata (SubsetNamespace / SubsetKey);
//  2. request body (BUFFERED): proxy/openai parses and validates it; the FlowKeyer gives the
//     Identity (it sees the headers Envoy forwarded as an *http.Request); the Tokenizer
//     hashes the prompt once; the flowcontrol.Queue admits the request, waiting at most the
//     TTL; the routing.Router picks an endpoint, inside the subset when there is one. The
//     answer to the body sets DestinationHeader to "ip:port" (then up to Options.Fallbacks
//     other endpoints, comma-separated) and the same value in the dynamic metadata,
//     {MetadataNamespace: {DestinationHeader: value}};
//  3. response headers: the status, and the endpoint that really served — the protocol's
//     ServedKey in the metadata context's MetadataNamespace, or a response header of the
//     same name. If Envoy served from a fallback, the pick's Result is closed as not served
//     (retracting what the index learnt there) and the serving endpoint is charged instead,
//     counted in Stats.ServedElsewhere: nothing is charged twice;
//  4. response body (STREAMED or BUFFERED): server-sent events are read for the first token
//     (routing.Result.FirstToken) and the usage chunk; a JSON answer for its usage object.
//     The answer is never modified;
//  5. end: at the response's end of stream (or trailers, or [DONE]) the router's Result and
//     then the queue's Ticket are closed with the usage. A stream that ends otherwise —
//     Envoy closes or resets it, the client goes away, its context ends, or it is silent
//     longer than Options.StreamIdle — closes them with ErrStreamEnded or ErrStreamIdle.
//     Each handle is closed exactly once, whatever the order of events.
//
// # Protocol cases
//
// Supported: request body BUFFERED (and BUFFERED_PARTIAL when the body fits), the headers
// being answered CONTINUE at once and the destination set in the body's answer; request
// body FULL_DUPLEX_STREAMED (or send_body_without_waiting_for_header_response), where the
// headers' answer waits for the body's end and carries the destination, and the body is
// handed back whole; requests without a body (headers with end_of_stream, or request body
// mode NONE), routed at the headers without admission; response bodies STREAMED, BUFFERED
// or FULL_DUPLEX_STREAMED (chunks handed back unchanged); trailers; the processing modes
// Envoy announces in the first message's protocol_config (older Envoys that send none are
// taken to be BUFFERED). Not supported: request body STREAMED (Envoy forwards the headers
// before the body arrives, so no destination can be set), rewriting the body (a client's
// "priority" reaches the engine, and usage is read only when the client asked for it; a
// stream without a usage chunk is charged one output token per chunk).
//
// # Answers the picker gives itself
//
// Every refusal is an ImmediateResponse with an OpenAI error JSON body, as proxy.Handler
// writes them: 429 with Retry-After when the queue is full or early shedding refuses; 503
// when no capacity came before the TTL, when no endpoint is eligible (none known, all
// filtered, or none of the subset hint's — an empty hint included; with Retry-After, and at
// once, without waiting for admission, when the pool is empty), or when the picker shuts
// down (with Retry-After); 400 naming the field for a body proxy/openai refuses (invalid JSON, a missing
// model, a max_tokens beyond the limits); 413 for a body over Options.MaxBodyBytes; 404 for
// a model outside Options.Models; 429 at once, before the queue, naming the limit, with
// Retry-After and the rate-limit headers, for a request its tenant's quota cannot fit.
//
// # Fail-open or fail-closed
//
// Envoy's ext_proc filter decides what a picker outage means (failure_mode_allow). With
// failure_mode_allow: true (fail-open), a request whose picker is down, slow past
// message_timeout, or errs is routed by Envoy alone: it reaches a server without usher's
// admission, fairness, prefix placement or accounting, and the picker's in-flight counters
// do not see it. With false (fail-closed, the Inference Extension's default), a picker
// outage is an outage: Envoy answers 500 to every request. Run several replicas behind
// the picker's Service and keep fail-closed when admission control is the point; choose
// fail-open when availability matters more than fairness. Either way set Envoy's
// message_timeout above the queue's TTL (or max_message_timeout), since a request may wait
// that long for admission before the picker answers its body.
//
// # TLS
//
// Register leaves the listener to you: serve it in plaintext, or over TLS as the Inference
// Extension's reference picker does by default (some gateways dial their picker only with
// TLS), with a *tls.Config from [TLSConfig]: grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg))).
// It serves a certificate and key from files, read again at a handshake when they
// change (a Kubernetes TLS Secret that cert-manager renews needs no restart; a bad new pair
// is logged and the last good one kept), or, given none, a self-signed ECDSA P-256
// certificate generated in process for the host's names and addresses and renewed before it
// expires. The gateway then encrypts without verifying (the reference's deployments do the
// same), or verifies against the certificate you give it. Measured over loopback, client
// included, a new connection and its first request take about 1.2 ms more over TLS (a full
// handshake) than in plaintext, and a request on an open connection about 40 µs more; Envoy
// keeps its connections to the picker open, so the handshake is paid per connection, not per
// request. Kubernetes' gRPC probes dial plaintext: probe a plaintext health port, not the TLS
// listener.
//
// # Endpoints, signals, health
//
// Endpoints come from Options.Endpoints, SetEndpoints, or a Source run by Run: FileSource
// re-reads a file on change, and an InferencePool watch is an EndpointSource of your own. Run scrapes
// each endpoint's metrics (metrics.Scraper, vLLM's names by default) into the router, and
// follows KV events, from endpoints that name a publisher and from pods connecting to
// Options.KVListen. The gRPC health service answers SERVING for "", HealthReadiness and
// HealthExtProc once the endpoints have synced (at New without a Source, at the Source's
// first set with one), even when the set is empty: a picker with no endpoints stays
// reachable and answers each request 503 with Retry-After, rather than leaving a
// fail-closed Envoy to answer 500. Close turns them NOT_SERVING; HealthLiveness is always
// SERVING.
//
// # Quotas
//
// With Options.Quota (a [quota.Limiter], as proxy.Options.Quota for the gateway) the picker
// limits tenants by requests and tokens per window. A completion request reserves its prompt
// plus max_tokens (or the learned expectation) in its tenant's quota once its body is parsed,
// keyed and hashed, before it takes a place in the queue; one that does not fit is refused
// at once. The answer's response headers gain the rate-limit headers of its API — OpenAI's
// x-ratelimit-* or, on /v1/messages, Anthropic's anthropic-ratelimit-* — written by the same
// code as the gateway's, so their names and formats are the same. At the stream's end the
// reservation settles to the usage the answer reported, else to the streamed chunks counted,
// else (the stream ended or failed after the pick) to the prompt; a request refused after
// its reservation (the queue full, no endpoint) returns it whole. With several pickers, build
// the Limiter with gateway/replicaext's Quota store so that they hold each tenant's quota
// together (examples/epp -quota with -redis).
//
// # Several pickers
//
// Options.Extensions take the same [proxy.Extension]s as a proxy.Handler: New prepares the
// default index, session table and keyer with them and attaches them to the Server (a
// [proxy.Core]), Run runs them. With gateway/replicaext's, several pickers behind one Service
// are all active and share what each learns through Redis — the prefix chains they send,
// their session placements, their in-flight load per endpoint and the fairness usage — so
// a conversation whose turns Envoy sends to different pickers still goes home, and the
// default queue's limit on requests in flight (64 per endpoint, or MaxInFlight) is the
// cluster's, each picker taking its share of it (the limit over the live pickers, rounded
// up). Redis stays off the request path: a picker goes on alone while it is down (package
// replica). The picker links no Redis client itself; only a program that imports replicaext
// does. For clusters without Redis, run one active picker with standbys (examples/epp's
// leader election).
//
// # Concurrency and cost
//
// A Server is safe for concurrent use. gRPC runs each stream's Process on its own
// goroutine; Process adds one goroutine that receives the stream's messages, so that every
// wait is bounded by the stream's context, the idle timeout and (for admission) the TTL,
// and handles the messages in order itself: the request's state has one owner and needs no
// lock. New starts nothing; Run does the background work until its context ends; Close
// stops admission. Per request the picker does O(body) parsing and hashing, O(log flows)
// admission, one Pick (plus O(endpoints) with a subset hint or a fallback list), and parses
// the answer's JSON only until the first token and then only its usage chunk.
package extproc
