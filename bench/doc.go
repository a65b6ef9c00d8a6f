// Package bench is usher's cluster simulator: it replays a workload against N simulated model
// servers behind a gateway built from usher's own packages, in virtual time, and measures what
// each combination of admission policy and router costs whom. Run simulates one Workload under
// one Config; the command bench/cmd/compare runs the matrix of Policies and Routers and prints
// the tables kept in bench/README.md.
//
// # What runs in the loop
//
// Nothing is re-implemented for the simulation. Each request goes the way it goes in a gateway:
//
//   - Admission: a flowcontrol.Queue with the policy under test (fairness.FCFS or one of the
//     fairness package's) and a saturation gate — by default flowcontrol.Options.MaxInFlight at
//     MaxInFlight requests per server; optionally llm-d's saturation detector (mean over
//     servers of max(queued/5, kv/0.8), stale after 200 ms) as a flowcontrol.Options.Saturation
//     pool fed by the scraper. The queue is driven through its asynchronous API (Enqueue, Notify,
//     Ticket.Done) with outcomes delivered to an Observer, on a virtual clock.
//   - Routing: a routing.Router with the profile under test (by default profiles.Usher:
//     HealthFilter, then 1.5·SessionAware + 2·TokenLoad(UsherLoadCap) + 1·DynamoCost +
//     0.5·KVUtilization, max-score, learning at pick) and a prefixcache.Index: Pick
//     charges the router's in-flight counters and (with the profile's Learn, by default) records
//     the prompt's blocks under the chosen server, Result.FirstToken releases the prefill tokens,
//     Result.Done closes the books. The index is approximate — fed only by the router, capacity
//     per server = the server's KV blocks — unless the router stands for a system built on KV
//     events (Router.Events: Dynamo, llm-d's precise scorer) or Config.Index says exact: then
//     the engines record vLLM-style KV events (BlockStored, BlockRemoved, AllBlocksCleared) and
//     the simulator applies them to the index Config.EventDelay (20 ms) after the step that
//     produced them, so the index holds what each engine holds, late by that delay, plus what
//     the router predicts. BackendState comes from a
//     simulated scraper that copies every engine's queue, batch and KV use into Router.Update
//     every ScrapeInterval (50 ms, llm-d's), so the router sees metrics as stale as a real one.
//   - Serving: one simulated engine per server — vLLM's V1 scheduler with chunked prefill, a
//     block KV cache with prefix reuse and LRU eviction, recompute preemption — whose capacity
//     and costs are an EngineProfile (Config.Profile; by default BenchProfile, Qwen3-32B on
//     2×H100). A picked request reaches its engine at once, or after Config.Frontend plus
//     Config.FrontendPerToken per prompt token (the HTTP hops, parsing and tokenizing a real
//     gateway and server spend; calibrate.sh measures it), in flight for the router meanwhile.
//   - Completion: the engine's first token is the TTFT, its last the end-to-end latency; the
//     actual usage, with the cached prompt tokens the engine reports, goes to Ticket.Done so
//     the fairness policy charges what was really served.
//
// # LoRA adapters
//
// With Config.LoRA every server has adapter slots and a load cost (the engine's rules, shared
// with internal/glue/simfleet): a request under an adapter that is not resident loads it into a free
// slot or in place of the least recently used idle one, and the step that loads it takes the
// load cost longer; a request whose adapter finds every slot busy with other adapters waits.
// Request.Adapter seeds the request's block chain, so prefixes are cached per adapter, and
// the scraper publishes each engine's running and waiting adapters. LoRAWorkload and
// LoRACompare (compare -lora) compare adapter-blind and adapter-affine routing.
//
// # Service-level objectives
//
// With Config.Targets (and LaterTargets for later turns) every request carries latency
// targets, as the gateway gives them (proxy/doc.go, "Service-level objectives"): on its
// routing.Request, so a PredictedLatency scorer routes by headroom, and in its admission —
// the deadline arrival + T − p̂ (p̂ the best TTFT the router predicts at arrival, 0 for a
// router without a model), at least 50 ms, left to the TTL beyond it, with early shedding on.
// Result.SLO counts each sent request once as met, missed, shed, expired or failed (a request
// turned away misses), and the attainment Met/Sent. SLOPolicy orders the queue by each
// request's own target.
//
// # Gateway replicas
//
// Config.Replicas = K > 1 puts K gateway replicas in front of the same servers, as behind a
// Kubernetes Service without session affinity: arrivals are dealt to them round-robin, so a
// conversation's turns land on different replicas. Each replica has its own queue (its share
// of the concurrency limit), router, prefix index and session table. Every SyncInterval
// (50 ms) each replica flushes what it learnt — the chains its index's prefixcache.Options.Feed
// (a buffer, as the replica package's) heard, the placements its session scorers reported to
// their SessionOptions.Feed, its Router.AppendInFlight, its queue's usage deltas (peer.AppendUsage)
// (the fairness usage each flow accrued) — and the others apply it Config.SyncLag later with
// the index's remote insert (not fed back), SessionPlacer.LearnPlacement,
// Router.SetPeerInFlight and peer.ApplyUsage: the seams a replication layer (package
// replica) uses, exercised here in virtual time. NoSync shares nothing. In exact mode every replica's index applies every engine's KV events itself.
//
// # The event loop
//
// A run is a discrete-event simulation in one goroutine: a binary heap of events ordered by
// (time, scheduling order) — a server's step ends, a closed-loop turn arrives, a scrape, the
// queue's earliest deadline — merged with the workload's open-loop arrivals. Each event moves
// the virtual clock, calls the components above, and then settles: outcomes the queue produced
// (dispatches, expiries) are handled and idle servers that received work begin a step. The
// engine is clock-free (BeginStep returns the step's duration; EndStep is scheduled then), the
// queue and router read the virtual clock, and nothing iterates a map or draws an unseeded
// random number, so a run is a pure function of workload, configuration and seed.
//
// # Workloads
//
// Prompts are described as in the Mooncake traces: content ids, each standing for a block of
// BlockTokens tokens (512 in the traces), equal id prefixes meaning equal prompt prefixes. The
// simulator expands every id into BlockTokens/BlockSize engine blocks whose tokens are derived
// from the id and the block's position in it, and hashes them with prefixcache.HashTokens; the
// engine and the index therefore see the same chained hashes, and two prompts share exactly the
// engine blocks their ids share. Sessions are derived from the ids (see LoadMooncake): the
// first id after the common opening names the conversation; a session is the request's flow in
// the queue and its session id for the router. Built-in generators produce multi-turn chat,
// agentic coding sessions that share long opening instructions, and bursty arrivals, in the
// same format; their sessions are closed loop (a turn is sent a think time after the previous
// one completes; a shed turn ends its session). PrefixGroup has no sessions at all: independent
// requests over prefixes shared in groups of Zipf popularity, in bursts of a Markov-modulated
// Poisson process, sent in fan-outs of siblings that arrive together. Forks has short
// conversations whose first turns share most of their prompt with other sessions: forks of an
// earlier conversation and popular shared documents. Two workloads differ in the shape of their
// session lengths, for policies that guess a session's remaining work from its attained
// service: TraceSessions replays the trace's sessions closed loop (heavy-tailed: the chance
// that a session ends after its k-th turn falls with k), IncreasingHazard runs agentic
// sessions of 6 to 10 turns (it rises), and Agentic's geometric counts (constant) are the
// control. Workload.Scaled multiplies the arrival rate. WorkloadSources is the registry the
// comparison selects workloads from by name (mooncake, chat, agentic, bursty, prefix-group,
// forks, lora, trace-sessions, increasing-hazard).
//
// # Measurements
//
// TTFT and end-to-end latency percentiles (from arrival at the gateway, queue wait included);
// throughput; the prefix hit rate next to the ideal one (an infinite cache shared by every
// server, the same requests in workload order); time-averaged requests per server and the
// max/mean ratio; expiries, rejections, waits and abandoned turns for first turns and later
// turns separately; Jain's index over sessions of the share of their requested tokens that was
// served; sessions as tasks (TaskStats): the task completion time from a session's first
// arrival to its last answer, the sum of its response times, the share of sessions abandoned
// (a shed turn, or no turn within Config.SessionIdle), with sessions the end of the run cut
// off counted as censored rather than short; simulated events per second.
//
// One run is one seed. A comparison runs every configuration under several seeds (the seed
// generates a synthetic workload and drives the router's random choices) and summarises each
// figure as the median and the min–max range over the seeds (Cells, Spread); the goal check
// compares medians and calls a tie where the ranges of usher and the best peer overlap. Min–max
// rather than the interquartile range: at three to five seeds quartiles are interpolations
// between the same few values.
//
// The package's tests check the simulator itself: one server with an infinite cache
// reproduces the trace's ideal hit rate, the population sampled from the queue's gauges obeys
// Little's law, and the same seed gives identical results for every router (bench/README.md,
// "The simulator", has the figures).
//
// # Contract and cost
//
// Run is a pure function of its workload, configuration and seed; it starts no goroutine, and
// separate runs may go in parallel (compare bounds them with errgroup). Its cost is linear in
// the events simulated, each O(log pending events) plus the work of the components it calls.
// Config's zero value is valid, each zero field a documented default; a Config or Workload that
// cannot run fails with an error wrapping ErrInvalidConfig.
//
// # Alternatives not taken
//
//   - Driving the components from goroutines on a fake clock, one per request as a gateway
//     would: it needs synchronisation to know when everyone is blocked, and is slow and not
//     deterministic.
//   - A fixed time step: it either blurs the engine's step boundaries or costs idle ticks;
//     events jump straight to the next thing that happens.
//   - Servers as a service-time distribution (M/G/k): it loses what the routers compete on,
//     the prefix cache, its evictions and the prefill they save.
//   - Real token arrays from the trace: the chained hashes depend only on which blocks are
//     equal, which the ids say.
package bench
