// Package glue is the floor of internal/ that builds on the library: the parts the request
// pipeline's packages share (proxy, proxy/extproc, gateway) and that the simulator, the
// applications and the Kubernetes integration reuse, each of which imports library packages.
//
//   - backendspec: the one backend syntax (a URL, then key=value options).
//   - builtin: the built-in names of filters, scorers, pickers, profiles and policies.
//   - gatewaymetrics: the gateway's own Prometheus series, recorded through typed methods.
//   - slo: admission and observation by latency target, shared by the gateway, the endpoint
//     picker and the simulator.
//   - openaiwire: what the pipeline reads and writes on the wire beside a parsed
//     openai.Request (answers, stream events, errors in each API's shape, the upstream body
//     and disaggregated serving's), kept off package openai's API.
//   - prefixpeer: prefixcache's replication seam, kept off its API: the bounded buffer a
//     replica's Feed fills, and the inserts of peers' chains that are not fed back.
//   - proxyseam: what the module's own extensions, proxy/extproc and tests read of a
//     proxy.Handler (KV-event publishers, pool queues, retry counters) and the mapping of
//     admission outcomes to HTTP statuses, kept off proxy's API.
//   - simfleet: the simulated vLLM-compatible fleet the library's tests, the examples and the
//     simulator start.
//
// The rest of internal/ is the ground floor: helpers that import no package of the library
// (heaps, timers, hashing mixes, the engine model). The split is enforced by
// internal/apicheck's TestHouse. The glue lives here, not under proxy/internal, because Go
// admits an internal package only to the tree above its internal directory, and these are used
// by gateway, bench, examples and kube as well as by proxy; a subtree of the module's own
// internal/ is the narrowest place all of them can see.
package glue
