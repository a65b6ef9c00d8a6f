package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// NewBoundedWait returns a bounded-wait policy, or an error wrapping ErrInvalidOptions.
//
// BoundedWait is usher's answer to the newcomer question. It wraps any keyed policy
// (turn-priority by default) and bounds how long a request can wait: a request that has
// waited Wait − Headroom is promoted to an urgent tier, ahead of all other work of its
// band, where requests are served earliest-deadline first. Optionally it reserves a share
// of dispatches for first turns while any are waiting. Within a flow requests go in arrival
// order, so a flow's head is always its oldest request and the first to be promoted (the
// inner policy's own item order is not used; inner policies whose flow key is their head's
// item key, such as EDF, then order flows by head arrival).
//
// # Guarantee
//
// Let P = Wait − Headroom. Once a request r has waited P, no request that is not urgent is
// dispatched before it, and urgent requests go by deadline. So, provided the gate keeps
// admitting work (capacity keeps completing),
//
//	wait(r) ≤ P + the time the gate takes to admit u_r + 1 requests,
//
// where u_r counts the urgent requests with a deadline before r's that are dispatched after
// r's promotion. With a uniform TTL deadlines follow arrival, so the urgent tier is FCFS and
// u_r counts older requests that were also overdue. If the gate admits a request at least
// every δ while work waits (k slots whose requests each finish within s: δ ≤ s), then
// wait(r) ≤ P + (u_r + 1)·δ; when promotions are at least δ apart u_r = 0, and with
// Headroom ≥ δ no request waits longer than Wait — none is shed if Wait < TTL.
// TestNewcomerBoundedWait checks it in the scenario where llm-d's turn-priority sheds
// newcomers.
// If requests reach age P faster than capacity serves them (overload), u_r grows, the urgent
// tier is FCFS and the excess expires at its TTL as under any policy: BoundedWait then
// guarantees only that the overdue are served oldest deadline first.
//
// With FirstTurnShare = s > 0, urgent requests still go first; otherwise, while first
// turns are waiting, a credit grows by s per dispatch and each first turn dispatched costs
// 1 (the credit stays in [0, 1]); when it reaches 1 the next dispatch goes to the best
// first-turn flow in the inner order. So among n consecutive dispatches while first turns
// wait and none is urgent, at least ⌊n·s⌋ − 1 go to first turns
// (TestNewcomerFirstTurnShare: one in four with s = 0.25).
//
// # Cost to deep sessions
//
// Deep sessions give up exactly the dispatches taken by promoted requests and reserved
// first turns: with newcomers arriving at rate λ that would otherwise starve, they lose λ
// dispatches per second (plus the reserved share while first turns wait), and nothing when
// nobody waits P. TestStarvationTable prints the deep sessions' throughput under every policy
// in the scenario tests and checks that BoundedWait keeps at least 90% of FCFS's.
//
// # Mechanics
//
// BoundedWait is a FlowPicker that keeps the band's order itself, from the inner policy's
// keys, so that the first-turn share can see the whole band; promotion is a key validity
// limit (the inner key is valid until the head reaches age P). O(log flows) per event and
// dispatch, allocation-free in steady state. FlowKey gives the same keys for use inside a
// Hierarchy (without the first-turn share). It is a flowcontrol.Ranker that counts what is
// ahead itself, for the queue's wait estimate: the inner policy's classes and keys, its own
// count of what is ahead, and the promotion as a cap.
//
// Across gateway replicas (package replica) it shares the inner policy's usage when that
// policy shares usage (and shares nothing otherwise): its own order — promotion by age, deadlines — needs no history.
// A peer's delta also tells it that the flow was dispatched somewhere, so that a session whose
// first turn went to another gateway replica is not a first turn here. A BoundedWait serves
// one queue; it is not safe for concurrent use except through the queue.
func NewBoundedWait(o BoundedWaitOptions) (flowcontrol.Policy, error) {
	p, err := newBoundedWait(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewSLODeadline returns the policy, or an error wrapping ErrInvalidOptions.
//
// SLODeadline is earliest-deadline-first on a service-level deadline rather than the expiry
// deadline: a request's deadline is its arrival plus a target time to first token, so the
// request closest to missing its latency objective goes first, across all flows. Unlike EDF
// it ignores how long the caller is willing to wait; with a uniform target it is FCFS.
// Requests already past their target keep their place (most overdue first). Stateless after
// New; O(log n) per operation; safe for concurrent use if Target is.
func NewSLODeadline(o SLODeadlineOptions) (flowcontrol.Policy, error) {
	p, err := newSLODeadline(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// RoundRobin returns a round-robin policy.
//
// RoundRobin serves the backlogged flows of a band in turn, one request each per round,
// requests of a flow in arrival order. A flow that becomes backlogged joins the end of the
// round. Its promise: between two dispatches of a backlogged flow, every other flow that
// stayed backlogged is served at most once — equal request counts, whatever their sizes
// (use VTC or LAS for equal tokens).
//
// It keeps a position per flow with work queued or in flight, forgotten as soon as the flow
// is idle. O(log flows) per dispatch, allocation-free in steady state. A RoundRobin serves
// one queue; it is not safe for concurrent use except through the queue.
func RoundRobin() flowcontrol.Policy {
	return newRoundRobin()
}

// NewHierarchy returns a two-level policy, or an error wrapping ErrInvalidOptions.
//
// Hierarchy is two-level fairness: first between tenants, by the Tenants policy, then among
// the chosen tenant's sessions, by the Sessions policy — for example VTC across tenants so
// that a tenant with many sessions cannot crowd out a tenant with few, and turn-priority (or
// BoundedWait) across one tenant's sessions. The queue's flows are the sessions; flow ids
// carry the tenant (see HierarchyOptions.Tenant). Within each level the inner policy's
// promise holds among the competitors of that level. With a BoundedWait as the Sessions
// policy the wait bound holds across tenants as well: a tenant whose best session is urgent
// (Key.Tier == UrgentTier) is served before the others, by that session's deadline.
//
// Both levels are ordered by their policies' keys in heaps that Hierarchy maintains from
// the queue's events (it is a FlowPicker, because a tenant's key depends on the events of
// all its sessions, which the queue would not re-key). O(log tenants + log sessions of the
// tenant) per event and dispatch, allocation-free in steady state. Hierarchy keeps a record
// per tenant and per session only while they have work queued or in flight; the level
// policies keep their own bounded history.
//
// Across gateway replicas (package replica; see "Gateway replicas" in the package
// documentation) it shares both levels, for those of its policies that share usage
// themselves: the Tenants policy's deltas name tenants ("acme"), the
// Sessions policy's name flows ("acme/chat-42"), and a delta is told apart on arrival by
// whether its flow id is a tenant's (Tenant(id) == id). So the Tenant function must map a
// tenant id to itself, as the default does; a tenant-level delta whose id does not, and
// the session-level delta of a flow whose id is its own tenant's (a flow without "/"), are
// not sent: such a flow shares its tenant's usage, not its own standing among the tenant's
// sessions. Applying re-keys both levels of the flows named.
//
// A Hierarchy serves one queue; it is not safe for concurrent use except through the queue.
func NewHierarchy(o HierarchyOptions) (flowcontrol.Policy, error) {
	p, err := newHierarchy(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewLAS returns usher's LAS policy, or an error wrapping ErrInvalidOptions.
//
// LAS is usher's least-attained-service policy: the flow that has received the least
// recent service goes next, oldest head first among equals, requests of a flow in arrival
// order. Service is prompt tokens × 1 + output tokens × 2 (PromptWeight, OutputWeight),
// decaying exponentially with a 60 s half-life, so a flow is judged on the last few
// minutes, not on its lifetime.
//
// Its promise: among backlogged flows, service converges to equal shares in weighted
// tokens, whatever the flows' request sizes or depths; a flow that was idle returns with
// little service and is served promptly. It does not bound waits by itself (a flow that
// just received a large answer waits until the others catch up); compose with BoundedWait.
//
// The key is time-invariant. A flow's decayed service at time t is S(t) = S(t₀)·2^−(t−t₀)/h,
// so log₂ S(t) = log₂ S(t₀) + t₀/h − t/h: comparing flows by L = log₂ S(t₀) + t₀/h orders
// them exactly as comparing S(now), for any now, and L changes only when the flow itself is
// charged. Dispatch is therefore a heap operation, O(log flows), allocation-free.
//
// Service is charged as the queue observes it: the prompt estimate (Request.PromptTokens,
// which the gateway computes) at dispatch, then at completion the actual output and the
// difference between the actual and estimated prompt (Usage). Flows are keyed by flow id
// and band.
//
// A LAS shares its usage across gateway replicas (package replica): a delta is the service a
// flow attained on one replica since the last exchange, decayed to the time of the exchange;
// applying it charges it as if it were attained at the time it is applied (package doc,
// "Gateway replicas").
//
// How it differs from llm-d's LAS: llm-d charges the whole cost at
// completion, so a flow with many requests in flight looks unserved until they finish;
// llm-d blends service with head wait (0.8/0.2) after min-max normalising both over the
// waiting flows, which makes the order depend on who else waits and costs O(flows) per
// dispatch; usher's LAS orders by service alone and leaves wait bounds to BoundedWait.
//
// A LAS serves one queue; it is not safe for concurrent use except through the queue.
func NewLAS(o LASOptions) (flowcontrol.Policy, error) {
	p, err := newLAS(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewTurnPriority returns a turn-priority policy, or an error wrapping ErrInvalidOptions.
//
// TurnPriority is llm-d's turn-priority fairness, reproduced exactly for comparison: the
// flow with the highest score
//
//	score = turn + 0.05 × (seconds its head request has waited)
//	turn  = the flow's dispatched count + 1
//
// goes next, ties going to the longer wait. A flow with nothing in flight whose last
// completion is more than 120 s ago counts as turn 1 again. Within a flow requests are
// served in arrival order. Flow ids are sessions: a deep conversation is served before a
// shallow one, which keeps cached prefixes warm.
//
// Its promise is throughput for admitted conversations, not fairness to newcomers: a new
// session's score tops out at 1 + 0.05 × TTL, 4 with the 60 s default, so under sustained
// competition from sessions at turn 5 or more a newcomer is never dispatched and is shed at
// its TTL (llm-d's documented workaround is a 9000 s TTL and a concurrency cap). The
// scenario test TestNewcomerStarvationTurnPriority reproduces this (and shows that it starves its own shallower sessions too); wrap it in BoundedWait to
// bound every wait. It is a flowcontrol.Ranker: with the queue's early shedding on, each turn
// depth is timed by its own pace, so the newcomers it starves are refused on arrival with a
// 429 rather than after their TTL (TestEarlyShedNewcomerStarvation).
//
// The order is a time-invariant key: turn + w·(now − a) orders like −turn + w·a, so the
// queue keeps flows in a heap; the 120 s reset is a key validity limit. O(log flows) per
// dispatch, allocation-free. The turn is counted from what the queue observed, keyed by
// flow id and band.
//
// A TurnPriority shares its usage across gateway replicas (package replica), so that a session
// whose turns land on different gateway replicas has the same depth on all of them: a delta is
// the number of the flow's requests completed on one replica since the last exchange; applying
// it counts each as a turn dispatched and completed here at the time it is applied (after a
// reset that was due), so the peer's completion also holds off the 120 s reset (package doc,
// "Gateway replicas").
//
// A TurnPriority serves one queue; it is not safe for concurrent use except through the
// queue, which serialises its calls.
func NewTurnPriority(o TurnPriorityOptions) (flowcontrol.Policy, error) {
	p, err := newTurnPriority(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewVTC returns a VTC policy, or an error wrapping ErrInvalidOptions.
//
// VTC is the virtual token counter of Sheng et al. (OSDI 2024): each flow has a counter of
// the weighted tokens it was served (prompt × 1, output × 2); the backlogged flow with the
// smallest counter goes next; a flow that becomes backlogged again has its counter lifted to
// the smallest counter of the flows backlogged in its band (to the counter of the flow that
// last left the backlog when there is none), so that idling earns no credit. Requests of a
// flow go in arrival order.
//
// Service is charged as the queue observes it: the prompt estimate (Request.PromptTokens)
// at dispatch; at completion the actual output tokens and the difference between actual
// and estimated prompt (Usage). Counters are fixed-point integers (1/1024 of a weighted
// token), so virtual time does not drift with float rounding.
//
// Its promise, the paper's bound adapted to a queue with up to k requests in flight: while
// two flows f and g are both backlogged, their counters differ by at most (k+1)·U, and the
// service they receive over any interval in which both stay backlogged differs by at most
// 2·(k+1)·U, where U is the largest weighted cost of one request (with exact prompt
// estimates; an estimate error adds to U). TestVTCBound checks this on a fake clock.
//
// FlowKey is the flow's own counter, which changes only at the flow's own dispatches and
// completions, so the queue orders flows in a heap; the lift uses a heap of the backlogged
// flows. O(log flows) per event, allocation-free in steady state. Flows are keyed by flow
// id and band.
//
// A VTC shares its usage across gateway replicas (package replica): they exchange what each
// charged, so that the counters — and a tenant's share — are global (package doc, "Gateway
// replicas"). A delta is the weighted tokens a flow was charged on one replica since the last
// exchange; applying it adds it to the flow's counter as a local charge would. Lifts stay
// local, with one change: a flow that other replicas have charged may be backlogged there while
// it has nothing queued here, so when it becomes backlogged here it is lifted only to (k+1)·U
// below the smallest counter (k the band's requests in flight here, U about the largest request
// cost lately) — the most a backlogged flow can trail — instead of to it; otherwise each
// replica would take away, at every return, the service a tenant is owed for waiting at the
// others (in the bench tenant-share scenario across three replicas, the light tenants' share
// fell from 0.25 to 0.20). Such a flow starts at most (k+1)·U further behind than the paper's
// bound allows, so the bound at most doubles for it; a flow no peer has charged is lifted as
// before, and one VTC alone behaves exactly as before.
//
// A VTC serves one queue; it is not safe for concurrent use except through the queue.
func NewVTC(o VTCOptions) (flowcontrol.Policy, error) {
	p, err := newVTC(o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// EDF returns an earliest-deadline-first policy.
//
// It serves, within each band, the waiting request with the earliest deadline
// (Request.Deadline, which the queue sets to Arrival + TTL when the caller left it zero),
// across all flows; equal deadlines go in enqueue order. With a uniform TTL it is FCFS.
//
// Its promise is the classical one: if some order dispatches every request by its deadline
// (given the times at which the gate admits work), EDF does too — TestEDFMeetsFeasibleDeadlines
// checks it. Under overload it degrades badly (every request may end up just late); bound
// the load with capacity limits. Stateless; O(log n) per operation; safe for concurrent use.
func EDF() flowcontrol.Policy { return edf{} }

// FCFS returns a first-come-first-served policy: requests in arrival order within each band,
// across all flows (the item key and the flow key are both the (head) request's arrival
// time); equal arrival times go in enqueue order. It is the queue's default. Stateless, so
// one value serves any number of queues; O(log n) per operation.
func FCFS() flowcontrol.Policy { return fcfs{} }

// StrictPriority returns a policy that serves, within each band, the request with the
// highest Request.Priority first, and FCFS among equal priorities, across all flows. A
// high-priority flow can starve the others for as long as it has work: use bands for coarse
// classes and this for order within one. Stateless; O(log n) per operation. It is a
// flowcontrol.Ranker: the wait estimate of a request counts only the requests of its priority
// or higher ahead of it, not the whole band.
func StrictPriority() flowcontrol.Policy { return strictPriority{} }

// NewGittins returns a Gittins-index policy, or an error wrapping ErrInvalidOptions.
//
// Gittins serves first the session whose expected remaining work is cheapest to finish: the
// waiting flow (a session) whose Gittins index, at the service it has attained so far, is the
// highest; requests of a flow in arrival order, the oldest head first among equal indices. For
// a session of unknown total service S drawn from a known distribution, having attained a,
//
//	index(a) = sup over Δ > 0 of P(S ≤ a+Δ | S > a) / E[min(S, a+Δ) − a | S > a],
//
// the best ratio of the chance to finish to the work it costs (Gittins; Scully and
// Harchol-Balter's SOAP). It minimises mean response time in the M/G/1 with unknown sizes.
// When the hazard of S falls with age (heavy tails: the longer a session has run, the longer
// it will) the index falls with service and the policy is LAS; when the hazard rises (tasks
// of a typical length) the index rises and it favours sessions near their end, as
// turn-priority does; under a constant hazard every index is equal and it is FCFS.
//
// Service is weighted tokens (PromptWeight, OutputWeight), charged as LAS charges them but
// never decayed: a session's service is its total. The distribution of the total is learned
// from the sessions seen: a session ends when it has been idle for Memory.Forget; sessions
// still open count as right-censored (Kaplan–Meier per log-spaced bin); old sessions fade
// with a half-life of HalfLife ended sessions; until MinSessions have ended the prior is
// exponential (FCFS). The index table is rebuilt inside the call that records an end, every
// RebuildEvery ended sessions (and at least every quarter of the waiting flows), and the
// waiting flows are then re-keyed. See "The Gittins index" in the package documentation.
//
// With Wait > 0 it bounds waits as BoundedWait does (Wait − Headroom promotes a request to the
// urgent tier); without, NewBoundedWait may wrap it. O(log flows) per event and dispatch,
// allocation-free in steady state, plus an amortised O(log flows) re-key per ended session.
// It keeps no usage to share across gateway replicas. A Gittins serves one queue; it is not
// safe for concurrent use except through the queue.
func NewGittins(o GittinsOptions) (flowcontrol.Policy, error) {
	if o.Wait < 0 || (o.Wait > 0 && (o.Headroom < 0 || o.Headroom >= o.Wait)) || (o.Wait == 0 && o.Headroom != 0) {
		return nil, invalid("Gittins Wait %v, Headroom %v: want Wait ≥ 0 and Headroom in [0, Wait)", o.Wait, o.Headroom)
	}
	g, err := newGittins(o)
	if err != nil {
		return nil, err
	}
	promote := int64(-1)
	if o.Wait > 0 {
		promote = int64(o.Wait - o.Headroom)
	}
	m, _ := Memory{}.resolve(120 * time.Second) // first-turn history, unused without a share
	return &gittinsPolicy{newBoundedWaitOver(g, promote, 0, m)}, nil
}
