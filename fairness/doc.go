// Package fairness provides the policies that decide, inside a flowcontrol.Queue, who is
// served next: llm-d's turn-priority and least-attained-service (LAS) reproduced exactly for
// comparison, usher's own LAS, the virtual token counter (VTC), earliest deadline first, SLO
// deadlines, round-robin, a two-level tenant/session hierarchy, and BoundedWait, which caps how
// long anyone waits.
//
// # The newcomer question
//
// A model server that already holds a conversation's KV cache serves its next turn cheaply.
// Favouring admitted conversations therefore saves GPU work — and, at saturation, can keep the
// person still waiting to start out indefinitely. llm-d's turn-priority makes that trade-off
// without saying so: its score, turn + 0.05 × seconds waited, lets a session at turn 5 or more
// beat any newcomer that has waited less than the 60 s TTL, so under sustained competition from
// deep sessions newcomers are shed at their TTL (TestNewcomerStarvationTurnPriority). Fair-share
// policies (LAS, VTC) answer the other way: everyone gets an equal share of tokens, and depth
// earns nothing.
//
// usher's answer is BoundedWait: keep whatever order you like — turn-priority by default, so
// deep sessions keep their cache advantage — but promote any request that has waited
// W − Headroom to an urgent tier served earliest-deadline first, and optionally reserve a share
// of dispatches for first turns. Deep sessions pay only for the dispatches that go to promoted
// or reserved requests; nobody waits past W as long as capacity admits the overdue within the
// headroom (see BoundedWait for the exact bound). The scenario tests run every policy on the
// same workloads; TestStarvationTable (go test -run StarvationTable -v) prints the comparison —
// newcomer waits and sheds, deep-session throughput, the light tenant's share — and asserts
// what it shows.
//
// # Keys that stay valid
//
// A flowcontrol.Queue keeps flows and requests in heaps ordered by keys the policy computes at
// a few moments (see flowcontrol.Policy); a key must stay right while work waits. Most
// published policies are scores that change with time, which is why peers re-sort or scan on a
// ticker. Rewritten, they become time-invariant:
//
//   - turn + w·(now − a) is maximised by the same flow as −turn + w·a is minimised, because now
//     is common to every candidate (TurnPriority);
//   - decayed service S·2^−(now−t)/h compares like log₂ S + t/h (LAS);
//   - a VTC counter changes only when its own flow is charged (VTC);
//   - a condition that becomes true at a known time — a turn that resets after 120 s without a
//     completion, a request that reaches age W — is a key validity limit: the queue re-keys the
//     flow at that time, through a heap, without scanning.
//
// So every policy here dispatches in O(log flows) without allocating, except llm-d's LAS, whose
// min-max normalisation over all waiting flows cannot be a per-flow key: it is kept, off the
// API, as a reference to compare against (the policy named "las-reference" in the gateway's
// and the bench simulator's tables), a FlowPicker that scans the band on every dispatch
// (O(flows)).
//
// # What a policy may know
//
// Depth, attained service and history come only from what the queue observed — dispatches,
// completions and the usage reported with them — keyed by the flow id the gateway assigned and
// the band; never from a request field a client could set. (The Request's token estimates are
// the gateway's, a first charge that completion corrects.) Each policy's per-flow memory is
// bounded (Memory): a flow with work queued or in flight is always remembered; idle flows are
// forgotten after a policy-specific time or when more than MaxIdle are idle, longest idle
// first.
//
// # The policies
//
//   - TurnPriority: llm-d's turn-priority, exactly. Maximises cache reuse; starves newcomers,
//     and even its own shallower sessions, at saturation.
//   - llm-d's LAS, exactly, as the reference "las-reference" (not exported). O(flows) per
//     dispatch.
//   - LAS: the same cost and decay, ordered by decayed service alone through a time-invariant
//     key, charged as service is observed. O(log flows).
//   - VTC: virtual token counters (Sheng et al., OSDI 2024) in fixed point, lifted on return;
//     bounded service gap between backlogged flows (TestVTCBound).
//   - EDF, SLODeadline: earliest deadline first, on the expiry deadline or on arrival plus a
//     TTFT target. EDF meets every deadline whenever any order would
//     (TestEDFMeetsFeasibleDeadlines).
//   - RoundRobin: one request per backlogged flow per round.
//   - BoundedWait: any keyed policy above plus a wait bound and an optional first-turn share.
//   - Hierarchy: a tenant policy (VTC by default) over a session policy (turn-priority by
//     default); flow ids "tenant/session". With BoundedWait as the session policy the wait
//     bound holds across tenants (TestHierarchyBoundedWaitAcrossTenants).
//
// TurnPriority, BoundedWait, LAS, VTC and EDF are also flowcontrol.Rankers: they tell the queue
// where a request would stand under their order, so that early shedding estimates its wait
// under that order rather than behind every waiting request.
//
// # Gateway replicas
//
// Behind one Service, several gateway replicas each run a queue with its own policy instance,
// and each sees only the requests dealt to it. A fair share is global only if what orders flows
// is: VTC, LAS, llm-d's LAS, TurnPriority, Hierarchy and BoundedWait (forwarding to its inner
// policy) report the usage they charged since the last exchange as deltas and apply their
// peers', and package replica exchanges them through its queue. FCFS, EDF, SLODeadline and
// RoundRobin keep no usage and share nothing. Per policy, a delta for (flow, band) is:
//
//   - VTC: the weighted tokens charged here since the last exchange, net; applied, it is added
//     as a local charge is. The lift of a returning flow stays local, except that a flow peers
//     have charged (which may be backlogged at a peer) is lifted only to (k+1)·U below the
//     floor, the most a backlogged flow trails (see VTC); lifting it all the way would take
//     from it, at each replica it returns to, the service it is owed for waiting elsewhere.
//   - LAS and llm-d's LAS: the service attained here since the last exchange, decayed to the
//     exchange; applied, it is charged as attained then, so it decays with the rest.
//   - TurnPriority: the number of the flow's requests completed here; applied, each counts as a
//     turn dispatched and completed then, so a conversation is as deep on every replica once
//     its previous turn is known, and a peer's completion holds off the turn reset.
//   - Hierarchy: the Tenants policy's deltas under the tenant id and the Sessions policy's under
//     the flow id, told apart on arrival by Tenant(id) == id.
//   - BoundedWait: its inner policy's; any usable delta also marks the flow as past its first
//     turn, so the first-turn share goes to sessions new to every replica.
//
// Deltas are positive: a flow whose net growth is negative keeps it for the next exchange. An
// idle flow forgotten before its growth was reported hands it to the next report (at
// most Memory.MaxIdle such flows; before the first call nobody listens and it is dropped).
// Applying a delta for a flow the policy does not remember creates it idle, so peers' flows are
// bounded by Memory like local ones; a known idle flow becomes the most recently idle. Deltas that are not finite and positive, or name a
// negative band, are ignored. Two instances that exchange deltas order flows as one instance
// that saw every charge would (TestUsageSharingMatchesOneInstance); what stays local is what
// depends on the replica's own queue — VTC's lift, BoundedWait's promotions and first-turn
// credit. Replicas must run the same policy with the same options: a delta is in the policy's
// units. bench.TestReplicasTenantShare runs the tenant-share scenario across replicas.
//
// # Contract and complexity
//
// Every policy instance serves one queue. The queue serialises the calls, the exchange of
// deltas included, so policies do no locking; their inspection methods (LAS.Service,
// VTC.Counter) must be called from the goroutine operating the queue or while it is idle.
// Keyed policies cost O(log flows) per event and dispatch and allocate nothing in steady state;
// llm-d's LAS costs O(flows). A charge marks its flow dirty the first time since the last
// exchange, so a report costs O(flows charged since then), never a scan of every flow
// (the first call scans the table once; until then a policy keeps no dirty list). Current
// figures are in bench/BENCHMARKS.md (BenchmarkPolicy).
//
// # Alternatives not taken
//
//   - Re-scoring every waiting flow on a ticker or at each dispatch: cost grows with every flow
//     and the order is stale between ticks; time-invariant keys keep the heap exact.
//   - Raising turn-priority's wait weight: any finite weight still loses to a deep enough
//     session within a finite TTL, and a large one destroys the depth preference; a separate
//     urgent tier bounds the wait and leaves everyone else's order alone.
//   - Reserving slots for newcomers: idle when none wait; BoundedWait's share is a credit that
//     accrues only while first turns wait.
//   - Weighted fair queuing with finish tags, or deficit round-robin: both need a request's cost
//     at dispatch, but output length is known only at completion.
//   - Floating-point virtual time: float rounding makes equal services compare unequal;
//     counters are int64 fixed point (1/1024 token).
//   - Trusting a session-depth or priority header: a client would raise its own priority.
//   - Unbounded per-flow maps: cost and memory grow with every flow ever seen.
//   - Sharing absolute usage (peers taking the maximum or the sum): a maximum loses concurrent
//     usage, a sum double-counts, and both send every flow every time; deltas need no merge rule.
//   - Sharing VTC's lifts, or keeping the paper's lift unchanged with shared counters: each lift
//     would erase a tenant's global deficit at every return. Exchanging where each flow is
//     backlogged would fix the lift exactly, at the price of a second record per flow.
//   - Scanning every flow at each exchange: O(flows) under the queue's lock; the dirty list
//     makes it O(flows charged).
//   - Counting a peer's dispatches rather than completions for turn priority: it would deepen a
//     session whose turn is still running and leave the reset clock to local completions.
package fairness
