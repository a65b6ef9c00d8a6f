package flowcontrol

import (
	"math"
	"time"
)

// Key orders queued work. A smaller key is served first. Keys are compared field by field:
// Tier, then Value, then Tie; requests (or flows) with equal keys are served in the order
// they were enqueued (for flows: the order their head requests were enqueued).
//
// A key must stay valid while the request or flow waits: the queue stores it in a heap and
// re-asks the policy only at the moments listed on Policy. Order that depends on the current
// time must be rewritten as a time-invariant key — "highest turn + w·(now − t) first" orders
// exactly like "lowest −turn + w·t first", because now is common to every candidate — or
// given a validity limit through FlowKey's until result.
//
// A NaN Value is treated as +Inf.
type Key struct {
	// Tier is compared first. Use it for strict classes (an urgent tier, a priority).
	Tier int64
	// Value is compared second: a score, a virtual time, a deadline in seconds.
	Value float64
	// Tie is compared third, for example an arrival time in nanoseconds.
	Tie int64
}

// Less reports whether k is served before o (ignoring enqueue order).
func (k Key) Less(o Key) bool {
	if k.Tier != o.Tier {
		return k.Tier < o.Tier
	}
	if k.Value != o.Value {
		return k.Value < o.Value
	}
	return k.Tie < o.Tie
}

// sanitize maps a NaN Value to +Inf so that the comparison is a strict weak order.
func (k Key) sanitize() Key {
	if math.IsNaN(k.Value) {
		k.Value = math.Inf(1)
	}
	return k
}

// FlowState is the queue's view of one flow, handed to the policy. The queue owns it and
// keeps it current; a policy reads it during a call and must not retain the pointer or
// modify the struct (the queue reuses it for other flows once this one is forgotten).
//
// A policy may keep a copy of the struct. The copy stays exact until the flow's next
// event (the next Observe call whose Event.Flow is this flow): nothing in a FlowState
// changes without an event of its own flow, and Head keeps pointing at the same queued
// request, whose fields do not change, until then. A picker that keeps its own order
// (heaps maintained from Observe) can therefore re-key a flow from its last copy at any
// time before the flow's next event — but not after it: once the head is dispatched,
// expires or is cancelled the pointer refers to a record the queue reuses.
type FlowState struct {
	// ID and Band identify the flow.
	ID   FlowID
	Band int
	// Queued is the number of requests of this flow waiting in the queue, QueuedBytes
	// their total size.
	Queued      int
	QueuedBytes int64
	// InFlight is the number of requests of this flow dispatched and not yet Done.
	InFlight int
	// Head is the flow's next request in item-key order, nil when Queued == 0. Its
	// Arrival is the head's enqueue (wait start) time.
	Head *Request
	// HeadKey is Head's item key (zero when Head is nil).
	HeadKey Key
	// HeadSeq is Head's enqueue sequence number, zero exactly when Head is nil: it starts
	// at 1 and increases with every request the queue enqueues, across all flows and bands. The queue
	// breaks full ties between requests and between flows (equal keys) by the smaller
	// sequence; a FlowPicker can do the same to reproduce the queue's order exactly.
	HeadSeq uint64
}

// EventKind says what happened to a request.
type EventKind uint8

const (
	// EventEnqueue: the request entered its flow's queue (also for TryAdmit, which is
	// followed at once by EventDispatch).
	EventEnqueue EventKind = iota + 1
	// EventDispatch: the request left the queue and was admitted.
	EventDispatch
	// EventExpire: the request reached its deadline while waiting and left the queue.
	EventExpire
	// EventCancel: the caller's context ended (or the caller cancelled) while it waited.
	EventCancel
	// EventClose: the queue was closed while the request waited.
	EventClose
	// EventDone: a dispatched request completed; Event.Usage holds its actual usage.
	EventDone
)

var eventNames = [...]string{"invalid", "enqueue", "dispatch", "expire", "cancel", "close", "done"}

// String returns the lower-case name of the event kind.
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "invalid"
}

// Event describes one step in a request's life for Policy.Observe. The queue owns the
// struct and reuses it; the policy reads it during the call only.
type Event struct {
	Kind EventKind
	// Now is the queue clock's time of the event.
	Now time.Time
	// Flow is the flow's state after the event took effect (for EventDispatch, Queued
	// has been decremented and InFlight incremented; for EventDone, InFlight has been
	// decremented). After EventDone or a final dequeue the flow may be forgotten by the
	// queue: a policy that needs history keeps its own, keyed by (Flow.ID, Flow.Band).
	Flow *FlowState
	// Request is the request concerned.
	Request *Request
	// Usage is the actual usage, for EventDone only.
	Usage Usage
}

// Policy decides the order of service inside a band: which flow goes next, and which of
// that flow's requests. Bands themselves are always served strictly by index.
//
// All methods are called with the queue's lock held, from whatever goroutine is operating
// on the queue: they must be fast, must not block and must not call back into the Queue.
// A policy instance serves one queue; since the queue serialises the calls the policy
// needs no locking of its own for state it touches only from these methods.
//
// The order is expressed through keys that stay fixed while work waits, so the queue keeps
// flows and requests in heaps and every operation costs O(log n):
//
//   - ItemKey is called once per request, at enqueue, and orders the request among its
//     flow's queued requests. It is never re-evaluated.
//   - FlowKey orders a non-empty flow among its band's non-empty flows. The queue calls it
//     when the flow becomes non-empty, when its head request changes (dispatch, expiry,
//     cancellation of the head, or a new request that sorts before the head), after
//     EventDone for a flow that still has queued requests, and when the key's validity
//     ends: FlowKey returns until, the time after which the key must be recomputed (zero
//     time: valid until one of the other triggers). Flows whose until has passed are
//     re-keyed at the start of every dispatch decision, through a heap ordered by until,
//     so a key is never stale when it is used and no scan ever happens.
//   - Observe is told about every enqueue, dispatch, expiry, cancellation, close and
//     completion, so the policy can account service (Event.Usage on EventDone).
//
// Calling order for one operation: on enqueue, ItemKey, then Observe(EventEnqueue) with
// the flow state already updated, then FlowKey if needed. On dispatch, Observe(EventDispatch)
// then FlowKey if the flow still has queued requests. On completion, Observe(EventDone) then
// FlowKey if the flow still has queued requests.
//
// State kept between calls: a policy may copy a FlowState (not retain the pointer); the
// copy, Head included, stays valid until that flow's next Observe call (see FlowState).
//
// A policy whose order cannot be written as keys implements FlowPicker in addition.
type Policy interface {
	// ItemKey returns the key of r among the requests of its flow. f is the flow's state
	// before r is added. now is the queue clock's time.
	ItemKey(r *Request, f *FlowState, now time.Time) Key
	// FlowKey returns the key of the non-empty flow f (f.Head != nil) among its band's
	// flows, valid until the returned time. A zero until, or one not after now, means
	// no time limit: the key stands until one of the other triggers.
	FlowKey(f *FlowState, now time.Time) (k Key, until time.Time)
	// Observe is told about each event of each request that was enqueued.
	Observe(e *Event)
}

// FlowPicker is implemented by a Policy that chooses the next flow itself instead of
// ordering flows by FlowKey: a policy whose order depends on all waiting flows together
// (min-max normalisation over them, as in llm-d's LAS) or that keeps its own structure
// (a tenant → session hierarchy maintained from Observe events).
//
// When the policy implements FlowPicker the queue never calls FlowKey; it keeps, per band,
// a dense list of the non-empty flows and, for each dispatch, calls PickFlow with it. The
// list's order is unspecified and changes as flows come and go. ItemKey still orders the
// requests inside each flow. PickFlow returns the id of the flow to serve next, or ok ==
// false to dispatch nothing from this band now. Returning an id that is not in flows is
// misuse and panics. The slice and the states belong to the queue: read them during the
// call, do not modify or retain them.
//
// A picker that keeps its own order (heaps maintained from Observe events) may keep a copy
// of each flow's FlowState from the flow's latest event and re-key the flow from it later
// (when a time-based key expires): the copy, Head included, is exact until the flow's next
// event (see FlowState). rekey.Timers keeps such expiry times as the queue keeps its own. With keys, the queue breaks full ties between flows by
// FlowState.HeadSeq (smaller first); a picker that does the same reproduces that order.
//
// PickFlow is called only when a dispatch can happen as far as the queue can tell: not
// for a band that Options.MaxInFlight, BandMaxInFlight or Saturation hold back. An
// Options.Gate is asked afterwards, for the head of the flow it picked.
//
// Cost: the queue's part is O(1) per call, but a picker that scans flows makes every
// dispatch O(flows in the band); say so in its doc.
//
// Concurrency: like the Policy methods, PickFlow is called with the queue's lock held, never
// concurrently for one queue; it must not block or call the Queue.
type FlowPicker interface {
	PickFlow(band int, flows []*FlowState, now time.Time) (id FlowID, ok bool)
}

// MaxClasses is the number of classes a Ranker may sort requests into (Rank.Class).
const MaxClasses = 4

// Ranker is implemented by a Policy that can say where a request would stand in its band if
// it were enqueued now, for the wait estimate behind early shedding (Queue.EstimateWait;
// see "Early shedding" in the package documentation). Without it the queue assumes that a
// new request goes behind everything waiting in its band, which is exact for FCFS and errs
// high for a request the policy moves ahead.
//
// Rank is called for every request Admit, TryAdmit or Enqueue queues, before ItemKey, and
// by EstimateWait; r has its Arrival and Deadline filled in, f is r's flow's state before
// r is added (Queued zero and Head nil when nothing of the flow waits). It must not change
// the policy's state: the request may be refused, and EstimateWait only asks. It is
// called with the queue's lock held, like the Policy methods, and must be as cheap: O(1)
// or O(log flows), no allocation.
type Ranker interface {
	Rank(r *Request, f *FlowState, now time.Time) Rank
}

// Rank is where a request would stand under its band's policy (see Ranker).
type Rank struct {
	// Key is the flow key r's flow would have once r is enqueued: f's current key when r
	// joins behind f's head, the key with r as head otherwise. The queue counts the
	// requests of the flows whose keys come first (under a FlowPicker, which orders flows
	// itself, the whole band counts, unless the picker counts for itself as fairness's
	// bounded-wait policy does).
	Key Key
	// Class, in [1, MaxClasses], groups requests the policy treats alike — a first turn
	// and a later turn under turn-priority — whose rate of service the queue measures
	// apart: a class the policy leaves behind shows a low rate, and its requests a long
	// wait, however few requests are ahead of them now. Requests of one class should be
	// served in about their order of arrival. Zero means no class: the wait is estimated
	// from the position and the band's rate alone.
	Class int
	// Within, if positive, is the wait after which the policy serves the request ahead of
	// everything that has not waited as long, in order of deadline (BoundedWait's
	// promotion). Its wait is then at most about the larger of Within and its wait behind
	// everything waiting now, and the estimate is capped there.
	Within time.Duration
}

// positioner is implemented by a FlowPicker that is a Ranker and can count, in its own
// order, the requests it would serve before a flow of key k in band: every request of
// every flow whose key comes before k or equals it (a flow already waiting goes before a new
// one with the same key). It stops past limit flows and reports ok false;
// it reports ok false too when it has no keys to compare. Called with the queue's lock
// held, only for requests that early shedding would otherwise refuse, and by
// EstimateWait. O(min(flows ahead, limit)). fairness's bounded-wait policy implements it;
// it stays off the API until a policy outside the module needs it.
type positioner interface {
	Ahead(band int, k Key, limit int) (n int, ok bool)
}

// fcfs is the default policy: requests in arrival order within each band, across all flows
// (fairness.FCFS is the same order).
type fcfs struct{}

func (fcfs) ItemKey(r *Request, _ *FlowState, _ time.Time) Key { return Key{Tie: r.Arrival.UnixNano()} }

func (fcfs) FlowKey(f *FlowState, _ time.Time) (Key, time.Time) { return f.HeadKey, time.Time{} }

func (fcfs) Observe(*Event) {}
