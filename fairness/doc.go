// Package fairness provides the policies that decide, inside a flowcontrol.Queue, who is
// served next: llm-d's turn-priority and least-attained-service (LAS) reproduced exactly for
// comparison, usher's own LAS, the virtual token counter (VTC), earliest deadline first, SLO
// deadlines, round-robin, a two-level tenant/session hierarchy, BoundedWait, which caps how
// long anyone waits, and Gittins, which orders sessions by their expected remaining work,
// learned online.
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
//   - Gittins: the session with the highest Gittins index at its attained service first, the
//     distribution of a session's total service learned from the sessions that ended; with a
//     Wait it bounds waits as BoundedWait does. See "The Gittins index" below.
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
// # The Gittins index
//
// Every other policy here orders by a proxy: turns completed, service attained, a clock. The
// question a user asks is how long until their task is done, and for jobs whose size is unknown
// but whose size distribution is known queueing theory has the answer that minimises mean
// response time in the M/G/1: serve the job with the highest Gittins index (Scully and
// Harchol-Balter's SOAP computes it for any distribution). For a session that has attained a
// of a total service S,
//
//	index(a) = sup over Δ > 0 of P(S ≤ a+Δ | S > a) / E[min(S, a+Δ) − a | S > a]:
//
// the best rate, over any further quantum Δ, at which service turns into finished sessions.
// Its shape follows the hazard of S. Falling hazard (heavy tails: most sessions are short, and
// one that has run long will run longer): the sup is at small Δ, the index falls with a, and
// the order is LAS's — newcomers first. Rising hazard (tasks of a typical length): the index
// rises as a session nears the typical end, and sessions near their end go first, as under
// turn-priority. Constant hazard (geometric turn counts, exponential sizes): every index is
// equal, the order is FCFS, and no policy that sees only attained service can do better.
// Autellix and llm-d's program-aware fairness take LAS, i.e. assume heavy tails; turn-priority
// assumes the opposite; learning the distribution lets one policy be right in both worlds.
//
// Service is a session's weighted tokens (prompt × 1 + output × 2, as LAS charges, never
// decayed): tokens rather than turns because tokens are what the servers spend and turns
// differ in size; a turn count would call a one-line exchange and a long generation equal. A
// session is a flow (in the simulator every session is its own tenant) and ends when it has
// been idle for Memory.Forget (120 s by default, llm-d's turn reset): its total is then one
// observation. Set it from the workload's gaps between turns (below).
//
// Learning. The service axis is cut into 105 bins, [0, 64) and then four per octave up to
// 4.3·10⁹ weighted tokens. Per bin b the policy counts the sessions that reached b and those
// that ended in b; the hazard of b is their ratio and the survival function their running
// product — the discrete Kaplan–Meier estimator. A session counts as at risk in a bin once it
// has passed it or is known to have ended there; one still open counts in the bins it has
// passed and as ended in none: right-censored, so the long sessions still running do not bias
// the estimate short (TestGittinsCensoring: with as many sessions open as ended, KS distance
// 0.045, against 0.22 for the ended sessions alone). It does not yet count in the bin it is in,
// as the textbook estimator counts a censored observation: a session is known to have ended
// only Memory.Forget after its last turn, and the first estimator, which counted a session at
// risk in a bin on reaching it, counted every session that had ended within the last idle limit
// as at risk in its last bin and ended nowhere — with a limit of minutes, thousands of
// sessions, enough to make every hazard too low (bench's learned-distribution test, the trace's
// sessions after 2,000 ended: KS 0.34 at a 1-minute limit, 0.83 at 10 minutes; now 0.057 and
// 0.076; TestGittinsLimbo). Fading: a count made when k sessions had ended weighs
// 2^(k/HalfLife) (renormalised now and then), each count weighed when it is made — a pass when
// the session passes, an end when it is known — so that passes and late-known ends are two
// steady streams whose faded ratio stays the hazard while old sessions fade (HalfLife 300 ended
// sessions by default). Until MinSessions (200) sessions have
// ended the prior is exponential: every index equal, FCFS. TestGittinsLearns checks the learned
// distribution within KS 0.05 of the true one after 2,000 ended sessions, and again 2,000
// after the workload switches, for three pairs of shapes and three seeds.
//
// Provisional ends. Ends known only Memory.Forget late make the estimate follow a change of
// workload that late: at a 10-minute limit it did not follow a switch within 2,000 ended
// sessions (bench's learned-distribution test, KS 0.98 from the trace's sessions to
// increasing-hazard ones, 0.13 the other way). So a session idle for a shorter limit — four
// times the running median of the gaps after which sessions came back, at most Forget, and at
// least Forget/16 until 64 sessions have come back — is counted as ended at once; if it comes
// back before the table forgets it, the count is taken back exactly (its weight is subtracted,
// the ended count steps back) and when the table forgets it nothing more is counted
// (TestGittinsProvisionalTakeBack, TestGittinsProvisionalReturns). The same test then gave
// KS 0.038 and 0.042 at 10 minutes, 0.033 and 0.028 at 1 minute, and the 5-second figures
// unchanged (the limit is then Forget), but 0.062 for the trace's sessions from scratch at
// 10 minutes. That miss was noise, not bias: over 100 draws of the sessions the estimate's
// KS distance averaged 0.028, the faded empirical distribution of the same ended sessions
// 0.027 (the plain one 0.017), and the mean learned curve was within 0.004 of the true one;
// the draw the test uses was in the tail (3 of 100 past 0.05). What added to it was the floor
// Forget/16 — 37.5 s where four times the median gap is 6.4 s — which left about 230 ended
// sessions counted in the bins they passed and not yet where they ended, against a half-life
// of 300. The floor is only there while the running median is young, so it now goes after 64
// gaps: 0.049 at 10 minutes (the 1-minute figure; 1 of 100 draws past 0.05), 0.033 and 0.028
// after the switches, the simulator's runs unchanged. With fading off the same test gives 0.056
// (the weights no longer balance the passes known at once against the ends known later: the
// mean curve is 0.039 off over 100 draws), with provisional ends off 0.076. The prior weighs
// nothing in the estimate: it is the index table's until MinSessions sessions have ended.
// The policy keeps a ring of the sessions that became idle, in order, rather than changing
// the flow table every policy shares; an entry whose session came back is dropped when the
// ring fills, so the ring is bounded by twice the idle sessions, not by the rate of turns.
//
// The index table. Within a bin the hazard rate is taken constant (so an exponential has an
// exactly constant index); the sup is taken over Δ ending at bin edges, O(bins²) ≈ 5,500
// steps per table. TestGittinsIndexAgainstNaive compares it with the definition evaluated
// directly on a fine grid: exact for the exponential, within 8% for a Pareto (the hazard is
// averaged over at least one bin) and 4% for a uniform (away from the end of its support). A
// waiting flow's key is minus its session's index, interpolated between its bin's edges (so
// that inside a bin the order still follows service), then its head's arrival.
//
// Rebuilds without a goroutine. The table is rebuilt inside the call that records an end —
// under the queue's lock, like every policy call — every RebuildEvery (64) ended sessions and
// at least every quarter of the waiting flows. A rebuild that changes the table changes every
// waiting flow's key at once, which a key validity limit cannot express; so Gittins keeps its
// own order of the waiting flows (BoundedWait's machinery, a FlowPicker) and re-keys all of
// them at the next pick after a rebuild: O(W log W) for W waiting flows, amortised over at
// least W/4 ended sessions, i.e. O(log W) per ended session. Between rebuilds a flow's key
// changes only with its own events.
//
// The idle limit decides what a session is. Memory.Forget should exceed nearly every gap between
// a session's turns (think time plus the time to read the answer), or a session that pauses is
// split, its later part starts over at zero service — a newcomer's index — and the learned
// sessions are its pieces; it should also be short enough that sessions end within the time
// the policy has to learn in. The Mooncake conversation trace's gaps (bench's trace-sessions)
// have a median of 2 min, a p99 of 25 min and a maximum of 50 min: at 60 s, 78% of its later
// turns started a new session, and the mean task time in the simulator (×3, equal offered
// load, three seeds) is 144 s, against LAS's 136 s; at 10 min (250 of 4,658 gaps longer) it is
// 135 s with 2.1% of the sessions abandoned (120 s: 135 s, 3.8%; 300 s: 133 s, 2.8%; 900 s:
// 136 s, 2.5%; 1,200 s: 158 s, FCFS's — no session ended before the arrivals did). Before the
// estimator counted sessions as above, 10 min gave 131 s but 3.4% abandoned. bench derives it
// per workload: twice the 99th percentile of the gaps, at most 10 min (5 min is not adopted:
// 2 s off the completed sessions' mean for a third more sessions abandoned).
//
// What the index learns on bench's workloads (the tables at the end of one run each, service in
// weighted tokens). Increasing hazard (6–10 turns, uniform): no session ends below about 20k,
// the bins' hazard then rises to 0.19 at 78k, 0.43 at 110k, 0.83 at 156k, and the index rises
// with service throughout, from 0.09 (a newcomer) to 0.63 (per 10⁴ tokens): turn-priority's
// order, newcomers last, which sheds them at the TTL unless a wait bound holds. Agentic
// (geometric turns, a constant hazard per turn): a turn's prompt carries the session's history,
// so the hazard per quarter-octave bin rises slowly with tokens (0.03 at 20k to 0.4 at 3.5M) and
// the index is not flat: it peaks at about 7k (sessions in their first turns, 0.14) above
// newcomers (0.043) and falls to 0.01 for the longest — roughly LAS among the sessions under
// way, newcomers behind the young ones. The trace: the first turn's prompt is most of a
// session's service and the hazard has point masses where many prompts have the same size (the
// index peaks at 0.97 near 2.4k and 0.63 near 9.7k, above a newcomer's 0.31), then falls past
// 20k as a heavy tail's does (0.29 to 0.03): LAS's order for all but the sessions of those
// sizes.
//
// Tried and not adopted (bench, one seed unless noted; the trace's figures here are from
// before the estimator's fix above, when Gittins's was 131 s). Service as turns (a fixed
// charge per dispatch, no tokens): the trace 128 s against 131 s but the newcomers' wait p99
// 8.1 s against 4.3 s, increasing-hazard 51.1 s against 50.9 s — no clear gain, and it would need an option.
// MinSessions 50 instead of 200: increasing-hazard (a run of 960 sessions, where 200 ended ones
// take a fifth of it) 50.8 s against 56.5 s, but agentic abandons 53.8% of its sessions against
// 9.5% (learning from the first, short sessions orders it as LAS does) — the default stays. A
// falling-hazard prior (LAS's order until the table is learned) on the trace: the same 131 s,
// newcomers' wait p99 1.8 s against 4.3 s. Under overload the wait bound is the order: at W = 10 s
// nearly every waiting request is promoted and the urgent tier, by deadline, is FCFS, so
// Gittins with W = 10 s is bounded wait's and FCFS's figure (increasing-hazard ×24 74.9 s,
// three seeds, with provisional ends; 75.3 s before). A longer bound leaves the index more of
// the order: W = 15 s 68.3 s (69.1 s), W = 20 s (promotion at 15 s, below the runs' 20 s TTL)
// 66.3 s (56.6–71.1 s; 67.2 s before), every session completed
// and no newcomer shed (wait p99 15.2 s), against 63.7 s for bounded wait at W = 20 s around
// turn-priority, whose order the learned one approaches only after MinSessions sessions have
// ended (one seed: MinSessions 25–100 at W = 20 s, 69.2–69.6 s against 72.7 s; not adopted
// for what it does to agentic, above). A first-turn share on top (NewBoundedWait with Inner
// a Gittins policy) costs task time: at W = 20 s, 0.1 66.9 s, 0.2 70.7 s (newcomers' wait p99
// 3.0 s; 67.8 s, 72.0 s and 2.6 s before provisional ends); at W = 10 s, 0.1–0.3, 82–84 s on one seed against 82.4 s. At W = 30 s, beyond the
// TTL, where the share alone protects newcomers, increasing-hazard reaches 43.9–55.2 s
// (MinSessions 50–200) with no newcomer shed, their wait p99 1.5 s, but 31–34% of the
// sessions abandoned (later turns expire), and agentic 150 s with 9.8% abandoned. The bins'
// resolution at small service was not varied.
//
// Counting the abandoned. A mean over completed sessions flatters a policy that abandons the
// long ones; bench's TaskStats.TimeMeanAll counts an abandoned session as done at the end of
// the run. On increasing-hazard ×24 at equal offered load (three seeds) it is 134 s for LAS
// (65% abandoned), 93.3 s for VTC (8.4%), 75.2 s for Gittins without a bound and 66.3 s with
// W = 20 s — 29% below VTC's and 51% below LAS's, the target met on that figure (on the
// completed sessions' mean it is 19% below VTC's 82.1 s, and LAS's 49.7 s is its survivors';
// 77.5 s, 67.2 s, 28%, 50% and 18% before provisional ends).
// At the highest load at which LAS and VTC abandon nothing (×17; ×18 LAS abandons 3.5%) every
// policy's mean is 35.7–35.9 s: the queue holds little, the waiting is about 2 s of a task's
// 36 s (at ×12, where nobody waits, it is 33.4 s), so no order can take 15% off. The theory's
// gain from running a session to completion assumes the session's work is there to run; in a
// closed loop each session has one turn at a time and thinks between turns, so a policy only
// orders the turns that happen to wait.
//
// The agentic control's abandoned sessions. Without a bound Gittins abandons 4.8% (4.0–7.5%) of
// agentic's sessions at ×24 (7.2%, 6.2–14.0%, at equal offered load; 2.5%, 0.2–9.0%, before
// provisional ends), where FCFS and VTC abandon none: all of them are later turns that expire
// at the 20 s TTL (19, 16–30, per run; no newcomer shed, newcomers' wait p99 6.59 s as FCFS's).
// Which ones (a look inside the simulator before the estimator's fix, seeds 1–3): every
// expired turn belonged to a session that had attained 371k–467k weighted tokens (bins 51–52,
// its 19th–20th turn, above 60–66% of the later turns), expiring between 147 s and 225 s of
// runs of 7.5–9 minutes — just after the first learned table replaces the prior (at 170 s on
// seed 3: 200 sessions ended). In that table no session has yet ended beyond 371k; the
// estimator sees sessions at risk there and no end, the hazard is 0, and so is the index of
// every session past it, against 0.044 for a newcomer. But the later tables, which know
// sessions that long, rank them last too: on agentic a turn's prompt carries the session's
// history, the hazard per token falls, and the index falls to 0.008–0.015 per 10⁴ tokens at
// 0.44–1.8M against a newcomer's 0.043–0.059; in the run's peak some of their turns wait out
// the TTL. LAS starves the same sessions, more (71 later turns expire, 17.5% abandoned).
// Tried for the service beyond the learned support and not adopted (equal offered load,
// abandoned share over seeds 1–6 against 9.0% with none; the trace ×3's mean over seeds 1–3,
// which must stay at most 133.4 s): an exponential tail past the last bin with an end, its rate
// fitted to the counts (the prior's shape), 9.6% (trace 132.8 s); the same past the last bin
// with an end and 8 sessions at risk, 10.1% (132.2 s, but 2.9% of the trace's sessions
// abandoned against 2.3%); the index of the last bin with an end and 8, 32 or 64 sessions at
// risk held beyond it, 9.5%, 9.2%, 7.9% (133.4 s, 132.6 s, 134.0 s); open sessions counted at
// risk in their current bin (the textbook censored count), 9.0% (133.7 s). On seeds 1–3 alone
// several looked better (4.2–6.8% at the median against 7.2%); on six none is, the seeds
// ranging 0–14%. Before provisional ends a constant hazard per bin past the last end gave
// 3.8% (0.5–5.0%) against 2.5%. The completed sessions' mean, 144 s against FCFS's 154 s, is
// a survivors' figure: with the abandoned counted it is 163 s (137–169 s). A wait bound is the
// remedy: at W = 10, 15 or 20 s no turn expires and the mean is FCFS's (154 s).
//
// Composition and cost. With GittinsOptions.Wait, or wrapped by NewBoundedWait, a request
// that has waited Wait − Headroom is promoted to the urgent tier, so a newcomer's wait stays
// bounded under a rising hazard, where the index serves sessions near their end first
// (TestGittinsComposesWithBoundedWait). Per event and dispatch Gittins costs what BoundedWait
// costs, O(log flows), plus O(1) per bin a session's service crosses; no allocation in steady
// state (TestSteadyStateAllocs). A session's state also holds its node in BoundedWait's order,
// so a step (a completion, the dispatch it frees, an enqueue) looks a session up in a map once
// where it did nine times: the node of the flow just picked remembers its slot, the slots of
// the last two events are tried first, and the event itself says whether a flow had requests
// queued. BenchmarkPolicy at 100,000 flows, CPU time per step on a busy machine, ten
// interleaved runs: 2.1 µs against FCFS's 1.2 µs (1.8×, 1.5–2.5× per run; 3.4 µs, 2.9×,
// before). Memory: 2 × 105 counts, the table, and per remembered session a table slot (40
// bytes of state and the slot's links), bounded by Memory. It keeps no usage
// to share across gateway replicas: each replica learns from the sessions it serves. It cannot
// be a level of a Hierarchy (its keys change at rebuilds, which a Hierarchy would not see).
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
