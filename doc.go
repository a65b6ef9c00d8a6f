// Package usher is a library of scheduling primitives for LLM inference gateways.
//
// A model server that already holds a conversation's KV cache serves the next turn of that
// conversation cheaply. Schedulers therefore favour established conversations, and can starve
// the person still waiting to start. Routing has the same tension: affinity to the cache-warm
// server saves prefill and piles load onto it. usher gives a gateway author the pieces to make
// both trade-offs explicitly and cheaply; bench/README.md compares the choices on a cluster
// simulator, and bench/BENCHMARKS.md holds the hot paths' current figures.
//
// The root package holds only this documentation. The work is done by its packages, each usable
// on its own; none starts a goroutine or touches the network unless the caller asks it to:
//
//   - prefixcache: chained block hashing of prompts and a lock-striped index from prefix block
//     to the backends that hold it, bounded in bytes.
//   - prefixcache/kvevents: exact index updates from vLLM and SGLang KV events over ZMQ.
//   - flowcontrol: the admission queue: flows, priority bands, a pluggable Policy, capacity,
//     deadlines, cancellation, a saturation gate and exactly one outcome per request.
//   - fairness: Policy implementations: FCFS, priority, round-robin, LAS, turn-priority, EDF,
//     VTC, and a bounded wait that guarantees newcomers a turn.
//   - routing: the core a router is built from and extended against: a Router of filters,
//     weighted scorers and a picker over BackendState, Request and Result, and the interfaces
//     a part implements. Its capabilities are packages beside it, as grpc/balancer keeps
//     roundrobin and pickfirst apart from its interfaces: routing/prefix and routing/session
//     (placement by cached prefix and by conversation), routing/load (load scorers),
//     routing/pick (pickers), routing/outlier (passive health), routing/saturation,
//     routing/disagg (prefill/decode disaggregation), the latency models and LoRA affinity,
//     and routing/profiles (usher's default and the peers' algorithms — llm-d, SGLang, Dynamo,
//     AIBrix — as configurations).
//   - metrics: scraping model servers (each engine's metric names) into BackendState,
//     staleness and health.
//   - proxy: the request pipeline for HTTP, composing the packages above: an OpenAI-compatible
//     Handler, or the same as httputil.ReverseProxy hooks; its Registry names every part a
//     configuration may use. It links no Redis, ZMQ or gRPC client: those come as
//     Extensions from proxy/kvfeed (KV events) and gateway/replicaext (package replica);
//     gateway configures a whole gateway from flags or JSON, and links them only as the
//     program registers them; proxy/extproc is the same pipeline as Envoy's endpoint picker.
//   - replica: several gateway replicas sharing prefix, load, session and fairness state
//     through Redis, off the request path (the only package that talks to Redis).
//
// The applications (examples/...), the Kubernetes integration (kube/...), the simulator
// (bench/...), the tests that drive the gateway with the official client SDKs (proxy/e2e) and the
// tokenizer's reference data and conformance tests (proxy/tokenizer/conformance) are modules of
// their own in the same repository, so that this module's go.mod — a floor for every program that
// imports it — requires only what these packages link, at the oldest versions that work, and its
// zip holds no test data (README.md, "Modules").
//
// The packages share one set of conventions: hashing, prefix matching and picking neither block
// nor allocate in steady state, a call that waits takes a context and returns its error, a
// completion handle (a flowcontrol Ticket, a routing Result) is finished exactly once,
// errors are sentinels prefixed with the package name and wrapped with %w, and each package's
// documentation states what is safe for concurrent use.
//
// The API follows one set of rules, each checked by a test of internal/apicheck:
//
//   - The surface is committed and budgeted. Each package's exported API is written in
//     internal/apicheck/testdata (TestAPI fails on any change not written there), and counted —
//     exported funcs, exported types, methods of exported types and methods of exported
//     interfaces — against internal/apicheck/budget.txt, a line per package and one for the
//     library (TestBudget fails on a package or a library over its line): growth is a reviewed
//     edit with a reason.
//   - One way to build each thing (TestConstructors). The main type of a package, with state a
//     caller drives, is made by New(Options) (*T, error); another such type by
//     NewT(TOptions) (*T, error). A part that plugs into an interface (a flowcontrol.Policy,
//     a routing Scorer, Filter or Picker) is made by NewX(XOptions) (I, error) when it has
//     options, X() or X(n) when it takes at most a number or two and cannot fail. A type with
//     nothing to configure has a useful zero value and no constructor. The zero value of every
//     Options field is its documented default; an invalid one is an error wrapping the
//     package's ErrInvalidOptions.
//   - One name, one meaning (TestNames): an exported name declared in two packages of the
//     library means the same thing in both, and is listed with the reason in
//     internal/apicheck/names.txt (at most ten), or it is renamed.
//   - A capability is a package: routing keeps the core; a new scorer, filter, picker or
//     profile family goes in a package beside it that imports routing, never the reverse
//     (TestHouse).
//   - Docs resolve (TestDocLinks): doc comments link to what they name with Go's doc-link
//     syntax (a name in square brackets, qualified by its package when it is another's), every
//     link resolves, and no doc comment of an exported identifier names an unexported one.
//   - One registry of names: proxy.Registry names the built-in filters, scorers, pickers,
//     profiles and policies and takes a program's own by explicit calls; flags, the JSON
//     configuration (package gateway) and the endpoint picker all resolve names through it. No
//     registry is filled from init; the only init-time assignments are the internal seams a
//     package installs for its own capability packages (routing/internal/hook, internal/peer).
//   - One backend syntax, for flags, JSON and endpoint lists: a URL then key=value options
//     (gateway.ParseBackend).
//   - No exported internals: what only the module's own packages need lives under internal/:
//     its ground floor imports no package of the library; internal/glue holds the parts the
//     pipeline's packages share that build on the library (TestHouse draws the floors from the
//     imports and fails on an import back up a floor).
//   - Heavy clients stay out of the core: prefixcache, flowcontrol, fairness and routing with
//     its capability packages depend on xxhash alone, proxy and gateway on none of Redis, ZMQ,
//     gRPC or Kubernetes, and the library on no Kubernetes, plotting or API client
//     (TestDependencies); .ci/consumer builds every package at a controller-runtime project's
//     pins.
//
// The ordered structures are d-ary heaps and open-addressing tables rather than an ordered map
// such as a B-tree: every ordering usher keeps (dispatch order, deadlines, re-key times, idle
// expiry) is read only at its minimum, which a heap gives in O(1) and updates in O(log n)
// without allocating, where a B-tree costs a node per few entries and pointer chasing on every
// update. Everything ordered by time (deadlines, re-key timers, the simulator's events) shares
// one heap, internal/heap; the orders by a flowcontrol.Key move elements in place and are
// written in their packages.
//
// A request's path through a gateway built on usher:
//
//	client ─► gateway
//	  1. key:         flow id (tenant / session), priority band, prompt tokens, cost estimate
//	  2. prefixcache: hash the prompt into chained block hashes, once
//	  3. flowcontrol: wait for admission (policy order, saturation gate, deadline, capacity)
//	  4. routing:     pick a backend (scorers over BackendState and the prefix match)
//	  5. proxy the request and stream the answer
//	  6. done:        report usage to fairness accounting, in-flight counters and the prefix index
package usher
