// Package flowcontrol is the admission queue of an LLM inference gateway: it holds requests
// in front of model servers that are saturated, decides who goes next, and ends every
// request in exactly one outcome.
//
// # The model
//
// A gateway calls Admit(ctx, req) before proxying a request and Ticket.Done(usage) when the
// answer has been streamed. Between the two the request is in flight; before the first it
// waits in the queue, which is organised in three levels:
//
//   - Bands. Request.Band picks one of Options.Bands priority bands. Bands are served
//     strictly by index: a request of band b is dispatched only when no request of a band
//     below b can be (nothing waits there, or the saturation checks hold that band back).
//   - Flows. Within a band, requests belong to flows, keyed by the FlowID the gateway
//     assigned (a tenant, a session). The Policy orders the band's non-empty flows.
//   - Requests. Within a flow, the Policy orders the flow's requests.
//
// Saturation checks are consulted before each dispatch: they answer whether the servers can
// take one more request of this band. Options.MaxInFlight and BandMaxInFlight count the
// queue's own in-flight requests; Options.Saturation compares pool levels, such as prefill
// and decode utilisation, against per-band thresholds; an Options.Gate of the caller's own
// judges the request itself. Capacity limits (Options.Capacity, BandCapacity,
// FlowCapacity, in requests and bytes) bound what may wait; a request that does not fit is
// rejected at once, with an error that names the limit. The built-in checks answer for a
// whole band without seeing the request, so they are asked first, before the policy
// chooses a request: at saturation a closed band costs no policy work. The chosen request
// is then passed to the Gate's Open before it is dispatched.
//
// # Time-invariant keys
//
// The Policy does not compare two requests with a function of the current time, as a
// Less(a, b) comparator re-evaluated at each dispatch would: a heap is only valid if keys
// do not change while their items wait, and an order that drifts with time would force a
// re-sort or an O(n) scan on every decision. Instead the policy gives each request a Key at
// enqueue (ItemKey) and each non-empty flow a Key (FlowKey) that the queue keeps in a heap.
// Most time-dependent orders can be rewritten so: "highest turn + w·(now − t_enq)" orders
// exactly like "lowest −turn + w·t_enq", because now is the same for every candidate;
// exponentially decayed service S·2^(−(now−t)/h) orders like log₂S + t/h. When a key does
// change at a known future time — a session's depth resets 120 s after its last
// completion, a request is promoted to an urgent tier once it has waited W — FlowKey
// returns that time with the key, and the queue keeps such flows in a re-key heap ordered
// by it. At the start of every dispatch decision the flows whose time has come are re-keyed,
// so a key is never stale when it is used, and nothing is ever scanned. The queue re-asks
// FlowKey only when something about the flow changed: it became non-empty, its head
// changed, one of its requests completed, or its key's validity ended.
//
// An order that genuinely depends on all waiting flows at once (llm-d's LAS normalises
// service and wait by their minimum and maximum over the waiting flows) cannot be a key.
// Such a policy implements FlowPicker and chooses the next flow itself from the band's list
// of non-empty flows; that costs O(flows) per dispatch, which the policy documents. The same
// hook lets a policy keep its own structure (a tenant heap over per-tenant session heaps)
// maintained from Observe events.
//
// # Event-driven dispatch, and no goroutine
//
// There is no dispatcher goroutine and no ticker. Dispatch runs, under the queue's lock, in
// whichever goroutine changed something that could let a request through: an Admit or
// Enqueue (arrival), a Ticket.Done (completion frees a slot), a Ticket.Cancel or cancelled
// context, a waiter whose deadline timer fired, and Notify, which the caller invokes when
// the gate may have opened for a reason the queue cannot see (saturation fell). Each run
// dispatches as many requests as the gate allows, band by band, and wakes each dispatched
// Admit caller through its own channel. An Admit that cannot be served at once blocks in the
// caller's own goroutine, on its channel, its context and its own deadline timer: when the
// timer fires, that goroutine takes the lock and processes every expiry that is due. Work
// is therefore proportional to events, the queue costs nothing while idle, and a backlog
// drains as fast as completions arrive, not at the pace of a ticker.
//
// A caller that cannot block a goroutine per request — a discrete-event simulator running
// in virtual time, an event loop — uses Enqueue instead: the outcome is delivered through
// Options.Observer, and Notify processes expiry at the Clock's current time and returns the
// next deadline. Time always comes from the injected Clock; package flowcontroltest
// provides a manual one, so every behaviour, including expiry, is testable deterministically.
//
// # Deadlines, cancellation and outcomes
//
// Every waiting request has a deadline (Request.Deadline, or Arrival plus a TTL) and sits
// in a deadline heap besides its flow's heap, so expiry pops the deadline heap. It carries
// its index in its flow's heap, so a cancellation removes it from there in O(log r); its
// deadline entry, like that of a dispatched request, is left to go stale, and stale entries
// are dropped when they reach the top or, once they outnumber the live ones, by a compaction
// of the heap (see Costs). A request
// ends in exactly one Outcome — Dispatched, RejectedCapacity, RejectedClosed,
// RejectedInvalid, Expired, Cancelled or RejectedWait — counted in Stats and reported to the
// Observer, whose hooks run outside the lock; OutcomeOf tells which an error stands for. The
// package knows nothing of HTTP: package proxy maps outcomes to a gateway's answer (429
// with Retry-After when the queue is full or sheds the request early, 503 when the request
// waited and no capacity came in time or the queue is closing, 400 for an invalid request).
//
// # Early shedding
//
// A request that cannot be served before its deadline is better refused on arrival, with a
// 429 the client can act on, than held until it expires. With Options.EarlyShed enabled,
// Admit and Enqueue refuse a request that would not go at once with RejectedWait
// (ErrWouldExpire) when its estimated wait (Queue.EstimateWait) exceeds the time left to
// its deadline (or Arrival+Bound) times 1+Margin; an unknown estimate never sheds. The
// estimate turns the request's place under the policy into time:
//
//   - Pace. Each band measures the interval between dispatches of its requests that had
//     waited, counting only time when it had a backlog, so that it is the pace at which the
//     gate lets the band through, net of what higher bands take, whatever the arrival rate.
//     It is kept in one-second windows averaged with half-life EarlyShed.HalfLife and with
//     four times that, and the shorter interval of the two is used: the pace that matters
//     is the mean over a whole wait, and on a bursty workload the recent one strays by ±15%
//     in ten seconds (in the bench simulator on the Mooncake trace at ×5, where waits reach
//     96% of the 60 s TTL, the recent average alone refused 33 requests that the run without
//     shedding served; the two together refuse none). Until a window with such dispatches
//     has ended, and after a long spell without a backlog, the estimate is unknown.
//   - Position. By default a request is behind every request waiting in bands 0..b, which
//     is exact for FCFS. A policy that is a Ranker gives the key the request's flow would
//     have, and only the requests of the flows whose keys come first count, found by a walk
//     of the band's flow heap that stops where keys do not (past 64 flows ahead the whole
//     band counts): a high priority, an early deadline, a deep turn or a light flow is no
//     longer timed as if it were behind everyone. A FlowPicker keeps its own order, so the
//     whole band counts, unless it counts for itself (fairness.NewBoundedWait's policy does).
//   - Class. A position cannot see the requests that will arrive and overtake. Bands
//     account for theirs by their net pace; a Ranker does the same within a band by giving
//     requests a class — fairness.NewTurnPriority's are first turns, second turns, turns 3–4
//     and deeper ones — whose pace the band measures apart, while that class has a backlog.
//     The class's requests ahead, times its interval, is a second estimate, and the larger
//     one is used: a newcomer behind every later turn still to come sees its class's
//     interval grow while the class is not served, its estimate passes its budget, and it is
//     refused at once. A class nobody has served is credited with one dispatch per long
//     window, so that a young backlog is not taken for starvation.
//   - Promise. A request that its policy will serve by deadline once it has waited
//     Rank.Within (BoundedWait's promotion) is estimated at most at the larger of that and
//     its wait behind everything waiting now.
//
// Shedding first computes the estimate with the whole band ahead, which needs no walk; only
// if that would shed is the position counted, and only if that too would shed is the gate
// asked whether the request could go at once. The bookkeeping costs O(bands × classes) per
// operation while something waits, the walk O(min(flows ahead, 64)) for requests about to
// be refused.
//
// Measured error, as |estimate − wait| / wait over requests that waited. FCFS, on a fake
// clock with one dispatch per 100 ms, over waits of at least 0.5 s: a mean of 3.4% under a
// load swinging around capacity, 0.6% under steady overload with shedding on (no shed
// request would have been served within its TTL, none admitted expired), 8.8% for a lower
// band overtaken by random higher-band arrivals, and 27% without shedding in an overload
// whose backlog fills with requests that will expire (it errs high there). Per policy, for
// multi-turn sessions on 8 slots under a load swinging between 1.35 and 0.67 times capacity
// (fairness's TestEstimateWaitError), median and 90th percentile: FCFS 9% and 28%;
// turn-priority 38% and 82%, newcomers' median 28%, against 69%, 87% and 73% for the band
// count alone; bounded wait 41% and 84% (band count 67% and 94%); VTC 33% and 64%; LAS
// 63% and 90%. Under these policies the estimate errs low: later arrivals that overtake a
// request within its class — a deeper turn, a flow with less service — are not foreseen.
// Its over-estimates, which are what sheds, are rarer than the band count's: the signed
// error's 90th percentile is +42% for turn-priority, +1% for VTC and −15% for LAS, against
// +49%, +140% and +170%.
//
// Starvation. Under llm-d's turn-priority with deep sessions saturating the slots and a
// newcomer every 15 s (fairness's TestEarlyShedNewcomerStarvation, 60 s TTL), 35 of 40
// newcomers are refused on arrival, where the band count refused none and 37 waited their
// 60 s before being shed; the deep sessions are served as before. In the bench simulator's
// agentic workload at ×24 with a 20 s TTL, 129 of the 198 newcomers turn-priority sheds are
// refused on arrival instead of after 20 s. The other 69 arrive in the 7 s it takes a
// class's interval to follow the onset of its starvation (with the averages' half-lives),
// and are admitted and expire. A request of a starved class with none of its class ahead
// is estimated at half its class's interval, which the history can show up to about 58 s
// at the default half-life, so under a 60 s TTL such a request is admitted and expires.
// Policies without classes (LAS, VTC) starve their heaviest flows by overtaking, which a
// position does not foresee: in the bench's Mooncake run at ×5 the 475 and 459 later turns
// they shed still wait their 60 s. Requests ahead that expire or are cancelled, and a change
// of pace during the wait, are not foreseen either.
//
// # Memory
//
// A flow exists only while it has something waiting or in flight; then it is forgotten, so
// millions of distinct flow ids (one per session) leave no trace. What a policy needs to
// remember about a flow beyond that (its depth, its attained service) the policy keeps
// itself, bounded by its own rules. Request records and flow records come from bounded free
// lists, and the heaps and flow tables keep their slices, so a steady state allocates
// nothing; the deadline heap holds at most as many stale entries as live ones (and makes
// room for them when it grows). A Ticket is a small value holding a pooled
// record and a generation number, so a Ticket used after its request ended is detected
// instead of corrupting the request that reuses the record.
//
// # Costs
//
// With n requests waiting in total, r in the flow and f non-empty flows in the band:
// enqueue O(log r + log f + log n); dispatch O(log r + log f) plus the gate and policy calls
// (a FlowPicker that scans adds O(f), but only when the built-in checks do not hold the band
// back) and O(1) amortised for the deadline heap; completion O(log f), and O(1) when the
// flow's key does not change; cancellation O(log r + log f); expiry O(log r + log f + log n);
// re-keying O(log f) per flow whose key expired. A flow is found by its id in O(1) expected.
// One mutex guards the queue; the policy and the gate run under it and must not block.
//
// At 100,000 flows the cost is that of cache misses rather than of comparisons, and the
// layout follows: the flow and deadline heaps are 4-ary, with each entry's ordering fields
// inline, so a sift takes half the dependent misses of a binary heap and never dereferences
// an entry to compare it; a band's flows are found through an open-addressing table whose
// slot holds the flow's hash beside its pointer (one slot read instead of a Go map's
// control word and slot); a completion that leaves the flow's key as it was does not touch
// the heap; a dispatch does not sift the deadline heap (its entry goes stale, and a
// compaction, one pass over the heap, drops the stale entries once they outnumber the live
// ones: two entries read per stale one, amortised). A queue on the system clock (a nil
// Options.Clock) reads the monotonic clock alone, one clock read per operation instead of
// time.Now's two.
//
// # Alternatives considered
//
//   - A dispatcher goroutine on a ticker (llm-d dispatches at most one item per 1 ms cycle,
//     so an idle backlog drains at ~1,000 requests/s, and its loop was reported to spin at
//     100% CPU). Here dispatch is a side effect of the events that make it possible.
//   - Sweeping the queue for expired items every second (O(n) per sweep, up to a second of
//     overshoot). The deadline heap expires each request at its deadline in O(log n).
//   - Comparators evaluated against the current time. They corrupt a heap as time passes;
//     keys plus validity times keep every operation logarithmic.
//   - A sync.Cond broadcast to wake waiters. Every waiter would wake to find it was not
//     chosen; a channel per waiter wakes exactly the dispatched ones.
//   - One capacity for waiting and running work. Waiting capacity (the gateway's memory)
//     and in-flight capacity (the servers) are different resources: the first is bounded
//     by the capacity limits, per queue, band and flow; the second by MaxInFlight,
//     Saturation and the Gate.
//   - Sharding the queue across several locks. Dispatch order is global within a band, so
//     shards would need a merge step; at the measured cost of one admission (well under a
//     microsecond) a single lock is not the bottleneck of a gateway.
//   - Estimating a request's wait from the waits of recently dispatched requests like it. It
//     lags by a whole wait, and a starved class is the one whose requests expire instead of
//     being dispatched, so its waits are censored at the TTL just when they matter. Nor is
//     the policy simulated forward over the queue: O(n) per arrival, and as blind to the
//     arrivals that will overtake. A pace per class, measured as for bands, sees both.
//   - Binary heaps, a map[FlowID]*flow, and removing a dispatched request from the deadline
//     heap at once. At 100,000 flows each sift level and each map probe is a cache miss,
//     and every dispatch paid a sift through both heaps: a backlogged admission cost nearly
//     twice what it does with the layout described under Costs. Measured and not kept, being no faster within the
//     noise: an 8-ary heap; removal that moves the hole to a leaf before placing the last
//     entry; and flow-heap entries naming flows by a dense id, with their positions in a
//     dense array rather than in the flow records (the sift's writes then hit the cache,
//     but its reads still miss, and they dominate).
//   - Returning *Ticket from a pool. A pointer cannot tell a second Done from a Done on
//     the next request using the same record; the generation in the Ticket value can.
//
// # Concurrency
//
// A Queue is safe for concurrent use. Its Policy (with its FlowPicker and Ranker
// methods), Gate and pools' Level functions are called under its lock, never concurrently for one queue,
// so they need no locks of their own; its Observer's hooks are called outside the lock and
// may run concurrently. A Ticket belongs to the goroutine that was given it. The other
// exported types (Request, Options, Limits, Stats, Record, Key, Rank, FlowState, Event,
// Usage, Outcome, Tokens) are plain values: copy them freely, and do not modify one while
// another goroutine reads it.
package flowcontrol
