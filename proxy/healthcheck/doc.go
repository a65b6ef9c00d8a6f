// Package healthcheck is active health checking for a [routing.Router] whose profile has an
// [outlier.Detector]: probes that are the gateway's own requests, sent on a timer, never a
// client's. The gateway (proxy.Handler's Run) and the endpoint picker (proxy/extproc's Run)
// run a [Checker] by default.
//
// # Which probe, and why
//
// Two probes, each where it is the cheapest that proves what has to be proved:
//
//   - GET /health, the engine's health endpoint (vLLM, SGLang and TGI serve one): for a
//     backend in rotation with nothing in flight and no success within Options.Interval. It
//     costs the engine nothing — no scheduling, no KV blocks, no line in its request metrics or
//     in the router's latency model — and it finds a server that died or became unreachable
//     while no traffic came, before a client's request does. It does not prove serving: a
//     server whose engine is wedged (a hung kernel, a deadlocked scheduler) still answers it.
//   - A streamed one-token completion (POST /v1/completions, max_tokens 1, "stream": true):
//     where only serving proves serving. It probes every ejected backend, since bringing one
//     back must prove that it serves, and a backend in rotation that has requests in flight
//     but no success within FirstByte (then every EjectedInterval at most): whole
//     (non-streamed) answers and prefill legs, whose first byte is their end, cannot show that
//     a server is stuck; the probe's first byte can.
//     It is judged by its first byte (the response headers, which vLLM and SGLang send as soon
//     as they accept a stream) within Options.FirstByte, 2 s by default, and by its end within
//     Options.Timeout. /v1/completions is the endpoint every generative model serves (chat
//     needs a chat template). The model is Host.Model, or the first base model the server
//     lists on GET /v1/models. A server that answers the completion with a 4xx (no such
//     endpoint, an embedding model, an API key the checker does not send) is judged by
//     /health alone from then on.
//
// # Timing
//
// An ejected backend is probed every Options.EjectedInterval (1 s), each interval drawn at
// random within ±20% so that gateways and backends do not fall into step; the Detector
// restores it at the first successful probe once its back-off is over (1 s after a first
// ejection), so a server that recovers is back within about two seconds. A backend in rotation
// is probed when it has had no success (a request's or a probe's) for Options.Interval (5 s,
// ±20%), or, with requests in flight, for FirstByte: a busy backend whose requests keep
// succeeding is never probed. At most
// Options.Concurrency probes run at once, and at most one per backend: a probe ends within
// Timeout, so a stalled probe cannot mask a later one's success, and the Detector restores only
// on a success sent after the backend's last failure.
//
// # Outcomes
//
// Each probe's outcome goes to the Detector ([outlier.Detector.Probed]) as a request's would: a
// refused or reset connection and a probe without a first byte within FirstByte are
// [routing.FailureConnect] (a stalled server ejects at once, as a refused one does), a 5xx
// [routing.FailureServer], a health check past Timeout [routing.FailureTimeout], 429 (or 503
// with Retry-After) overload, which counts nowhere. Options.OnProbe hears every outcome
// ([ErrStalled] for a stall), for metrics and for a gateway that moves the requests waiting
// on a stalled backend.
//
// # Fault runs
//
// Real processes (simulated vLLM-compatible servers) behind a gateway (proxy.Handler) with its
// defaults — a 30 s header timeout — and a 50 ms scrape, loaded by streamed chat clients
// (proxy/e2e TestFaultRuns, USHER_FAULT_RUNS=1; one run each on a shared 2-core machine, so
// the times are rough). "User requests as probes" counts the clients' requests sent to the
// faulty server while passive health held it out of rotation; "back after" is from the
// server's recovery to its first successful client request (idle: to its return to
// rotation). Before: passive health alone, stalls judged by the backend's silence over half
// the header timeout (15 s); after: these health checks and per-request stall moves (2 s).
//
//	scenario                                      longest wait      failed    user probes    back after
//	                                              before   after    bef. aft. bef. aft.     before        after
//	stuck server (holds headers, metrics good)    15.04 s  2.01 s   0    0    2    0        1.94 s        0.22 s
//	mid-stream breaker (RST after 1,500 bytes)    0.10 s   0.06 s   5    7    5    0        0.33 s        2.09 s
//	kill -9 under load, restarted after 5 s       0.18 s   0.42 s   5    5    1    0        0.05 s        0.18 s
//	SIGSTOP under load, SIGCONT after 5 s         5.00 s   5.03 s   0    0    0    0        0.14 s        0.12 s
//	kill -9 while idle, restarted after 2 s       0 s      0.01 s   0    0    0    0        > 20 s        0.58 s
//
// The breaker's fault is one the one-token probe cannot see (its answer is shorter than 1,500
// bytes): the probe's success restores it after each back-off (1, 2, 4, 8 s...), and the
// client streams on it when it breaks again fail — 7 against 5, where passive health alone
// spent one client request per cycle as its probe; for the same reason the healed breaker
// returns only when its back-off ends. The longest waits under SIGSTOP are streams that were
// already answering when the server froze: their first byte had come, so they wait out the
// freeze (or Timeouts.StreamIdle); the requests killed with their server fail in both.
//
// # Alternatives not taken
//
//   - User requests as probes (the Detector's half-open state alone): each probe of a server
//     that still fails is a client's failed request, and a server ejected while traffic is
//     idle is not brought back until a client's request finds it.
//   - /health alone: it would bring back a server whose engine is wedged.
//   - A completion for every backend on every interval: the engine's request counters, prefix
//     cache and the router's latency model would see the probes; /health costs nothing where
//     it suffices.
//
// # Concurrency
//
// A Checker is safe for concurrent use: SetHosts may be called from any goroutine while Run
// runs. Run is the only background work (no goroutine is started by New); it returns when its
// context ends, after the probes in flight ended.
package healthcheck
