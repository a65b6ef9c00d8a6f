// Package fairness provides the policies that decide, inside a flowcontrol.Queue, who is
// served next: llm-d's turn-priority and least-attained-service (LAS) reproduced exactly
// for comparison, usher's own LAS, the virtual token counter (VTC), earliest deadline
// first, SLO deadlines, round-robin, a two-level tenant/session hierarchy, and BoundedWait,
// which caps how long anyone waits.
//
// # The newcomer question
//
// A model server that already holds a conversation's KV cache serves its next turn
// cheaply. Favouring admitted conversations therefore saves GPU work — and, at saturation,
// can keep the person still waiting to start out indefinitely. llm-d's turn-priority makes
// that trade-off without saying so: its score, turn + 0.05 × seconds waited, lets a session
// at turn 5 or more beat any newcomer that has waited less than the 60 s TTL, so under
// sustained competition from deep sessions newcomers are shed at their TTL (the scenario
// test TestNewcomerStarvationTurnPriority reproduces it). Fair-share policies (LAS, VTC)
// answer the other way: everyone gets an equal share of tokens, and depth earns nothing.
//
// usher's answer is BoundedWait: keep whatever order you like — turn-priority by default,
// so deep sessions keep their cache advantage — but promote any request that has waited
// W − Headroom to an urgent tier served earliest-deadline first, and optionally reserve a
// share of dispatches for first turns. Deep sessions pay only for the dispatches that go to
// promoted or reserved requests; nobody waits past W as long as capacity keeps completing
// work fast enough to admit the overdue within the headroom (see BoundedWait for the exact
// bound). The scenario tests measure every policy on the same
// workloads; the table is in the package's closing note and is printed by
// TestStarvationTable (go test -run StarvationTable -v).
//
// # Keys that stay valid
//
// A flowcontrol.Queue keeps flows and requests in heaps ordered by keys the policy computes
// at a few moments (see flowcontrol.Policy); a key must stay right while work waits. Most
// published policies are written as scores that change with time, which is why peers
// re-sort or scan on a ticker. Rewritten, they become time-invariant:
//
//   - turn + w·(now − a) is maximised by the same flow as −turn + w·a is minimised, because
//     now is common to every candidate (TurnPriority);
//   - decayed service S·2^−(now−t)/h compares like log₂ S + t/h (LAS);
//   - a VTC counter changes only when its own flow is charged (VTC);
//   - a condition that becomes true at a known time — a turn that resets after 120 s
//     without a completion, a request that reaches age W — is a key validity limit: the
//     queue re-keys the flow at that time, through a heap, without scanning.
//
// So every policy here dispatches in O(log flows) without allocating, except llm-d's LAS,
// whose min-max normalisation over all waiting flows cannot be a per-flow key: it is kept
// as LASReference, a FlowPicker that scans the band on every dispatch, and its cost is
// measured (BenchmarkPolicy/las-llm-d).
//
// # What a policy may know
//
// Depth, attained service and history come only from what the queue observed — dispatches,
// completions and the usage reported with them — keyed by the flow id the gateway assigned
// and the band; never from a request field a client could set. (Token estimates in the
// Request are the gateway's, used only as a first charge that completion corrects.) Each
// policy's per-flow memory is bounded (Memory): a flow with work queued or in flight is
// always remembered, idle flows are forgotten after a policy-specific time or when more
// than MaxIdle are idle, longest idle first.
//
// # The policies
//
//   - TurnPriority: llm-d's turn-priority, exactly (0.05 per second of head wait, reset to
//     turn 1 after 120 s without a completion and nothing in flight, ties to the longer
//     wait). Maximises cache reuse; starves newcomers and even its own shallower sessions
//     at saturation.
//   - LASReference: llm-d's LAS, exactly (prompt + 2 × completion tokens charged at
//     completion, 60 s half-life, 0.8 · (1 − normalised service) + 0.2 · normalised wait,
//     min-max over waiting flows, forgotten after an hour). O(flows) per dispatch.
//   - LAS: usher's LAS: the same cost and decay, ordered by decayed service alone through a
//     time-invariant key, charged as service is observed (prompt at dispatch, output and
//     correction at completion). O(log flows).
//   - VTC: virtual token counters (Sheng et al., OSDI 2024) in fixed point, lifted on
//     return; bounded service gap between backlogged flows (TestVTCBound).
//   - EDF, SLODeadline: earliest deadline first, on the expiry deadline or on arrival + a
//     TTFT target. EDF meets every deadline whenever any order would
//     (TestEDFMeetsFeasibleDeadlines).
//   - RoundRobin: one request per backlogged flow per round.
//   - BoundedWait: any of the keyed policies above plus a wait bound and an optional
//     first-turn share.
//   - Hierarchy: a tenant policy (VTC by default) over a session policy (turn-priority by
//     default); flow ids "tenant/session". With BoundedWait as the session policy the
//     wait bound holds across tenants (TestHierarchyBoundedWaitAcrossTenants).
//
// TurnPriority, BoundedWait, LAS, VTC and EDF are flowcontrol.Rankers too: they tell the
// queue where a request would stand under their order — its flow's key and, for
// turn-priority, a class per turn depth — so that early shedding estimates its wait under
// that order rather than behind every waiting request (TestEstimateWaitOfError measures the
// estimate per policy, TestEarlyShedNewcomerStarvation the newcomers refused on arrival).
//
// Every policy instance serves one queue. The queue serialises the calls (AppendUsageDeltas
// and ApplyUsageDeltas too), so policies do no locking; their inspection methods (LAS.Service, VTC.Counter) must be called from the
// goroutine operating the queue or while it is idle.
//
// # Gateway replicas
//
// Behind one Service, several gateway replicas each run a queue with its own policy instance,
// and each sees only the requests dealt to it. A fair share is global only if what orders
// flows is: VTC, LAS, LASReference, TurnPriority, Hierarchy and BoundedWait (forwarding to
// its inner policy) are flowcontrol.UsageSharers, and package replica exchanges their usage
// deltas over Redis every flush (Queue.AppendUsageDeltas, Queue.ApplyUsageDeltas). FCFS,
// EDF, SLODeadline and RoundRobin keep no usage and share nothing. Per policy, a delta for
// (flow, band) is:
//
//   - VTC: the weighted tokens charged to the flow here since the last exchange (dispatch
//     estimates and completion corrections, net); applied, it is added to the counter as a
//     local charge is. The lift of a returning flow stays local — a floor taken from the
//     replica's own backlog, whose counters carry the global usage — except that a flow
//     peers have charged, which may be backlogged at a peer while it has nothing queued
//     here, is lifted only to (k+1)·U below that floor, the most a backlogged flow trails
//     (see VTC). Lifting it all the way would take from a tenant, at each replica it returns
//     to, the service it is owed for waiting at the others.
//   - LAS, LASReference: the service attained here since the last exchange, decayed to the
//     exchange; applied, it is charged as attained at the time it is applied, so it then
//     decays with the rest (SyncLag adds at most a factor 2^(lag/half-life), 1.0006 at
//     50 ms and 60 s).
//   - TurnPriority: the number of the flow's requests completed here; applied, each counts as
//     a turn dispatched and completed at that time, so a conversation is as deep on every
//     replica once its previous turn is known, and a peer's completion holds off the 120 s
//     reset. Completions rather than dispatches, because they move both the depth and the
//     reset clock, and a conversation's next turn exists only once the previous one is done.
//   - Hierarchy: the Tenants policy's deltas under the tenant id and the Sessions policy's
//     under the flow id, told apart on arrival by Tenant(id) == id.
//   - BoundedWait: its inner policy's; any usable delta also marks the flow as past its first
//     turn, so the first-turn share goes to sessions new to every replica.
//
// Exchanging deltas keeps the hot path as it was: a charge adds to a per-flow accumulator in
// the flow's slot of the policy's bounded table and, the first time since the last exchange,
// puts the slot on a dirty list, so that AppendUsageDeltas costs O(flows charged since the
// last exchange), never a scan of every flow, and nothing allocates in steady state (the
// list is kept from the first AppendUsageDeltas on, which scans the table once: a policy
// nobody asks keeps none). A flow
// whose net growth is negative (a correction larger than the charges) keeps it for the next
// exchange; deltas are positive. An idle flow forgotten with growth not yet reported hands
// it to a list the next AppendUsageDeltas drains (at most Memory.MaxIdle flows; until the
// first AppendUsageDeltas nobody listens, and it is dropped with the flow). Applying a delta
// for a flow the policy does not remember creates it idle, as a flow that was just served,
// so peers' flows are bounded by Memory like local ones; a known idle flow becomes the most
// recently idle. Deltas that are not finite and positive, or name a negative band, are
// ignored (a policy is not told how many bands its queue has; a delta in a band beyond them
// creates idle state that no request joins, forgotten like any other).
//
// Two instances that exchange their deltas order flows as one instance that saw every charge
// would (TestUsageSharingMatchesOneInstance, model-based, per policy); what stays local is
// what depends on the replica's own queue — VTC's lift, BoundedWait's promotions and
// first-turn credit. Replicas must run the same policy with the same options: a delta is in
// the policy's units. In the cluster simulator, three replicas with shared usage give VTC's
// light tenants their max-min share where replicas alone do not (bench,
// TestReplicasTenantShare).
//
// # Rejected alternatives
//
//   - Re-scoring every waiting flow on a ticker or at each dispatch (llm-d's flow control
//     dispatches one item per 1 ms cycle and sweeps expiry by scanning): cost grows with
//     every flow, and the order is stale between ticks. Time-invariant keys make the heap
//     exact at all times.
//   - Fixing starvation by raising the wait weight of turn-priority: any finite weight still
//     loses to a deep enough session within a finite TTL, and a large one destroys the
//     depth preference for everyone. A separate urgent tier bounds the wait and leaves the
//     order of everyone else alone.
//   - Reserving slots for newcomers: idle when none wait. BoundedWait's share is a credit
//     that accrues only while first turns are waiting.
//   - Weighted fair queuing with per-request finish tags, or deficit round-robin: both need
//     a request's cost when it is dispatched, but an LLM request's output length is known
//     only at completion. VTC and LAS charge the prompt at dispatch and the output when it
//     is observed.
//   - Floating-point virtual time for VTC: counters grow without bound and float rounding
//     makes equal services compare unequal; counters are int64 fixed point (1/1024 token).
//   - Trusting a session-depth or priority header: a client would raise its own priority.
//     Depth is what the queue observed under the flow id the gateway assigned.
//   - Unbounded per-flow maps (a peer's dispatch cost grew with every flow ever seen): state
//     is bounded and idle flows are forgotten.
//   - Sharing absolute usage (each replica publishing its counters, peers taking the
//     maximum or the sum): a maximum loses concurrent usage, a sum double-counts what was
//     already applied, and both send every flow every time. Deltas need no merge rule, cost
//     only what changed, and compose with decay and local lifts.
//   - Sharing VTC's lifts as usage, or keeping the paper's lift unchanged with shared
//     counters: a replica lifts a tenant that has nothing queued there although it waits at
//     another; shared, the lift would erase its deficit everywhere, and kept local it still
//     erases it at every return (light tenants 0.20 of the service instead of 0.25 across
//     three replicas). Exchanging which flows are backlogged where would fix the lift
//     exactly, at the price of a second record per flow and flush.
//   - Scanning every flow's state at each exchange for what changed: O(flows) every 50 ms
//     under the queue's lock; the dirty list makes it O(flows charged).
//   - Counting a peer's dispatches, not its completions, for turn priority: it would deepen a
//     session whose turn is still running, and would leave the reset clock to local
//     completions alone.
package fairness
