package flowcontrol

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/usher-llm/usher/internal/heap"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/rekey"
)

// Defaults for the zero Options.
const (
	DefaultTTL      = 60 * time.Second
	DefaultRequests = 10000
	DefaultBytes    = 1 << 30
	// DefaultRateHalfLife is the half-life of the recent dispatch-rate average behind the
	// wait estimate when EarlyShed.HalfLife is zero.
	DefaultRateHalfLife = 10 * time.Second
)

// Limits bounds what may wait in the queue (work in flight is bounded by
// Options.MaxInFlight, BandMaxInFlight, Saturation and Gate).
// A zero field means "no limit at this level" except in Options.Capacity, where zero means
// the default.
type Limits struct {
	Requests int
	Bytes    int64
}

// Options configures a Queue. The zero value is a valid one-band FCFS queue with no limit on
// work in flight, a 60 s TTL and room for 10,000 requests or 1 GiB.
type Options struct {
	// Bands is the number of priority bands; zero means 1. Band 0 is served first.
	Bands int
	// Policy orders flows and requests within a band; nil means FCFS.
	Policy Policy
	// MaxInFlight bounds the requests in flight queue-wide: one is dispatched only while
	// fewer are; zero means no limit. The queue sees every completion, so this limit needs
	// no Notify.
	MaxInFlight int
	// BandMaxInFlight[b], when > 0, lets band b dispatch only while fewer than that many
	// requests (of all bands) are in flight. Giving lower bands smaller limits keeps headroom
	// for the higher ones. Missing entries and zeros mean no band limit.
	BandMaxInFlight []int
	// Saturation gates dispatch on the fullness of one or more pools of model servers (a
	// prefill pool and a decode pool with different thresholds, say): band b dispatches only
	// while every pool's Level is below its threshold for b. Call Queue.Notify when a level
	// falls. O(pools) per dispatch.
	Saturation []Pool
	// Gate, if set, is consulted for the request a band would dispatch next, once the limits
	// above let the band through; nil means always open. With no limit and no Gate the queue
	// only orders and bounds: requests are dispatched as they arrive. The limits above depend
	// on the band alone and are checked before the policy chooses a request, so a closed band
	// costs no policy work; Gate sees the chosen request.
	Gate Gate
	// Clock is the source of time; nil means the system clock (package time).
	Clock Clock
	// TTL is the default time a request may wait, from its Arrival; zero means DefaultTTL.
	TTL time.Duration
	// Capacity bounds the queue as a whole: zero Requests means DefaultRequests, zero
	// Bytes DefaultBytes.
	Capacity Limits
	// BandCapacity[b] bounds band b; missing entries and zero fields mean no band limit.
	BandCapacity []Limits
	// FlowCapacity bounds each flow; zero fields mean no flow limit.
	FlowCapacity Limits
	// Observer is told about every outcome and completion, outside the lock.
	Observer Observer
	// EarlyShed rejects at once a request that the queue estimates would not be dispatched
	// before its deadline, instead of holding it until it expires; the zero value is off.
	EarlyShed EarlyShed
}

// EarlyShed configures early shedding (see "Early shedding" in the package documentation).
// When Enabled, a request that Admit or Enqueue cannot dispatch at once is refused on
// arrival with RejectedWait (ErrWouldExpire) if its estimated wait (Queue.EstimateWait)
// exceeds its budget — the time left until its Deadline, or until Arrival+Bound if that is
// sooner — by more than the factor 1+Margin. TryAdmit never waits, so it never sheds: what it
// cannot dispatch at once is ErrWouldWait as before. An unknown estimate (no recent
// dispatch history) never sheds. The zero value is off; New rejects a negative Bound or
// HalfLife and a Margin that is not finite and > −1.
type EarlyShed struct {
	// Enabled turns shedding on. When it is off the estimate is still kept, so
	// EstimateWait can be watched before shedding is turned on.
	Enabled bool
	// Bound caps the wait, counted from Arrival, that a request may be queued for when its
	// deadline is later; zero means the deadline alone.
	Bound time.Duration
	// Margin moves the shedding threshold to the budget times 1+Margin. Zero sheds as soon
	// as the estimate exceeds the budget; a positive Margin tolerates that much relative
	// error before shedding (fewer requests shed that could have been served), a negative
	// one, > −1, sheds earlier (fewer admitted requests expire after all).
	Margin float64
	// HalfLife is the half-life of the recent dispatch-rate average, and a quarter of that
	// of the long one; zero means DefaultRateHalfLife. It applies to the estimate whether or
	// not shedding is enabled.
	HalfLife time.Duration
}

// Observer receives the queue's outcomes. Both hooks are optional (nil means not called),
// are called outside the queue's lock by whichever goroutine's operation produced the
// outcome (an Admit, Done, Notify or Close caller, or a waiter whose context or
// deadline ended), and may call back into the queue. Calls may be concurrent and need not
// arrive in the order the events happened: a request admitted through Admit may even have
// its Done reported before its Dispatched outcome, when another goroutine dispatched it and
// has not yet delivered its records. For requests queued with Enqueue, whose Ticket
// travels in the Dispatched record, Outcome always comes first. A single-goroutine user
// (a simulator) sees every call in order, synchronously inside its own calls.
type Observer struct {
	// Outcome is called exactly once per request, with its Outcome.
	Outcome func(Record)
	// Done is called when a dispatched request's Ticket.Done is called.
	Done func(Record)
}

// Record describes one outcome or completion for the Observer.
type Record struct {
	Outcome Outcome
	// Err is the error the caller got (nil for Dispatched).
	Err error
	// Request is a copy of the request, with Arrival and Deadline filled in as the queue
	// used them (zero for requests rejected as invalid before that step).
	Request Request
	// Ticket is the request's ticket; valid (usable for Done) only for Dispatched and
	// only until Done is called. For Enqueue callers this is how a dispatch is delivered.
	Ticket Ticket
	// Wait is the time from Arrival to the outcome, or to the completion for Done.
	Wait time.Duration
	// Usage is the reported usage (Done only).
	Usage Usage
}

// Stats is a snapshot of the queue's counters and gauges.
type Stats struct {
	// Outcome counters since New.
	Dispatched, RejectedCapacity, RejectedClosed, RejectedInvalid, Expired, Cancelled, RejectedWait uint64
	// Completed counts Ticket.Done calls.
	Completed uint64
	// Gauges: waiting requests and their bytes, requests in flight, flows known (waiting
	// or in flight).
	Queued      int
	QueuedBytes int64
	InFlight    int
	Flows       int
}

// waiter states.
const (
	stateFree uint8 = iota
	stateQueued
	stateDispatched
	stateEnded
)

// waiter is one request's record. It is pooled: gen changes on every reuse so that a
// stale Ticket is detected.
type waiter struct {
	q        *Queue
	req      Request
	key      Key
	seq      uint64
	deadline int64 // unix ns
	gen      uint64
	state    uint8
	class    uint8 // Rank.Class, 0 for none
	outcome  Outcome
	err      error // the error for a non-dispatched outcome
	owned    bool  // an Admit/TryAdmit call recycles it; otherwise the queue does
	blocking bool  // an Admit goroutine waits on ready
	flow     *flow
	itemIdx  int
	ready    chan struct{}
	timer    Timer
}

// flow is the queue's record of one (FlowID, band) with something queued or in flight.
type flow struct {
	st      FlowState
	items   itemHeap
	rekey   rekey.Timer // when the flow's key must be recomputed, in Queue.rekey
	hash    uint64      // of st.ID, for band.flows
	bandIdx int         // index in band.heap or band.list, -1 when not there
	// key and keySeq are a copy of f's band.heap entry's ordering fields, valid while
	// bandIdx ≥ 0 under a keyed policy, so that a re-key that changes nothing is seen
	// without reading the entry.
	key    Key
	keySeq uint64
}

type band struct {
	flows    flowTable
	heap     flowHeap     // non-empty flows, when the policy is not a FlowPicker
	list     []*flow      // non-empty flows, when it is
	states   []*FlowState // &list[i].st, handed to PickFlow
	limits   Limits
	queued   int
	bytes    int64
	inFlight int
	// The dispatch-rate history behind the wait estimate, of the band and, when the
	// policy is a Ranker, of each class (cls[c−1] for Rank.Class c).
	hist history
	cls  []classHistory
}

// Queue is an admission queue of flows in priority bands. All methods are safe for
// concurrent use; the Policy and the Gate are called one at a time (under the queue's lock),
// the Observer never under it. See the package documentation for the model.
type Queue struct {
	// Lock discipline: the fields above mu are set by New and never change; the fields below
	// mu are guarded by it; methods ending in Locked expect it held.
	policy   Policy
	picker   FlowPicker
	gate     Gate
	bandMax  []int
	pools    []Pool
	clock    Clock
	ttl      time.Duration
	capacity Limits
	flowCap  Limits
	observer Observer
	observed bool
	notePool sync.Pool
	shed     EarlyShed        // HalfLife filled in
	ranker   Ranker           // policy, when it implements Ranker
	position positioner       // picker, when it is a Ranker and implements positioner
	sharer   peer.UsageSharer // policy, when it implements it
	seed     maphash.Seed     // of the flow tables' hashes
	sysClock bool             // clock is systemClock, read through mono

	mu          sync.Mutex
	maxInFlight int // Options.MaxInFlight, changed by peer.SetMaxInFlight
	bands       []band
	deadlines   heap.Heap[*waiter] // every waiting request by deadline; see dlLive
	rekey       rekey.Timers[*flow]
	seq         uint64
	queued      int
	bytes       int64
	inFlight    int
	flows       int
	closed      bool
	stats       Stats
	freeW       []*waiter
	freeF       []*flow
	ev          Event
	scratch     Request
	notes       *noteBuf
	// dispatch rate estimate for RetryAfter: dispatches in the current one-second window
	// and in the last complete one.
	rateStart int64
	rateCount int
	rateLast  int
	// busy-time accounting for the rate behind the wait estimate (see history), as of the
	// end of the latest operation: how many bands had a backlog, and the enqueue sequence
	// number reached (a request with a higher one was enqueued by the operation under way
	// and has not waited).
	backlogs int
	seqMark  uint64
	// scratchFlow is the state handed to Rank for a flow the queue does not know.
	scratchFlow FlowState
	mono        monoClock // when sysClock
}

type note struct {
	done bool // for Observer.Done rather than Observer.Outcome
	r    Record
}

type noteBuf struct{ n []note }

// free-list bounds: enough to keep a busy queue off the allocator, small enough that a
// burst does not pin memory for long.
const (
	maxFreeWaiters = 4096
	maxFreeFlows   = 4096
)

// New returns a queue configured by o, or an error wrapping ErrInvalidOptions.
func New(o Options) (*Queue, error) {
	if o.Bands < 0 {
		return nil, fmt.Errorf("%w: Bands %d < 0", ErrInvalidOptions, o.Bands)
	}
	if o.Bands == 0 {
		o.Bands = 1
	}
	if o.TTL < 0 {
		return nil, fmt.Errorf("%w: TTL %v < 0", ErrInvalidOptions, o.TTL)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Capacity.Requests < 0 || o.Capacity.Bytes < 0 || o.FlowCapacity.Requests < 0 || o.FlowCapacity.Bytes < 0 {
		return nil, fmt.Errorf("%w: negative capacity", ErrInvalidOptions)
	}
	if len(o.BandCapacity) > o.Bands {
		return nil, fmt.Errorf("%w: %d BandCapacity entries for %d bands", ErrInvalidOptions, len(o.BandCapacity), o.Bands)
	}
	for i, l := range o.BandCapacity {
		if l.Requests < 0 || l.Bytes < 0 {
			return nil, fmt.Errorf("%w: negative capacity for band %d", ErrInvalidOptions, i)
		}
	}
	if o.Capacity.Requests == 0 {
		o.Capacity.Requests = DefaultRequests
	}
	if o.Capacity.Bytes == 0 {
		o.Capacity.Bytes = DefaultBytes
	}
	if o.Policy == nil {
		o.Policy = fcfs{}
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if es := o.EarlyShed; es.Bound < 0 || es.HalfLife < 0 || !(es.Margin > -1) || math.IsInf(es.Margin, 1) {
		return nil, fmt.Errorf("%w: EarlyShed %+v: Bound and HalfLife must be ≥ 0, Margin finite and > −1", ErrInvalidOptions, es)
	}
	if o.MaxInFlight < 0 {
		return nil, fmt.Errorf("%w: MaxInFlight %d < 0", ErrInvalidOptions, o.MaxInFlight)
	}
	for b, n := range o.BandMaxInFlight {
		if n < 0 {
			return nil, fmt.Errorf("%w: BandMaxInFlight %d < 0 for band %d", ErrInvalidOptions, n, b)
		}
	}
	for i, p := range o.Saturation {
		if p.Level == nil {
			return nil, fmt.Errorf("%w: Saturation pool %d has no Level", ErrInvalidOptions, i)
		}
	}
	if o.EarlyShed.HalfLife == 0 {
		o.EarlyShed.HalfLife = DefaultRateHalfLife
	}
	q := &Queue{
		policy:   o.Policy,
		gate:     o.Gate,
		bandMax:  slices.Clone(o.BandMaxInFlight),
		pools:    slices.Clone(o.Saturation),
		clock:    o.Clock,
		ttl:      o.TTL,
		capacity: o.Capacity,
		flowCap:  o.FlowCapacity,
		observer: o.Observer,
		observed: o.Observer.Outcome != nil || o.Observer.Done != nil,
		bands:    make([]band, o.Bands),
		shed:     o.EarlyShed,
		seed:     maphash.MakeSeed(),

		maxInFlight: o.MaxInFlight,
	}
	q.picker, _ = o.Policy.(FlowPicker)
	q.ranker, _ = o.Policy.(Ranker)
	if q.picker != nil && q.ranker != nil {
		q.position, _ = o.Policy.(positioner)
	}
	q.sharer, _ = o.Policy.(peer.UsageSharer)
	q.deadlines.Live, q.deadlines.MaxLive = dlLive, o.Capacity.Requests
	_, q.sysClock = o.Clock.(systemClock)
	q.notePool.New = func() any { return new(noteBuf) }
	for i := range q.bands {
		if i < len(o.BandCapacity) {
			q.bands[i].limits = o.BandCapacity[i]
		}
		if q.ranker != nil {
			q.bands[i].cls = make([]classHistory, MaxClasses)
		}
	}
	return q, nil
}

// Notify brings the queue up to date at its clock's current time — expiry of every request
// whose deadline has come, re-keying of flows whose keys' validity ended, and dispatch of as
// much as the limits, the gate and the policy allow — and returns the earliest remaining
// deadline (zero if nothing waits).
//
// Call it when the gate may have opened for a reason the queue cannot see (a pool's
// saturation level fell, a backend came back). Admit callers need nothing more: their own
// deadline timers drive expiry. A caller running the queue in virtual time, or using
// Enqueue, also calls it whenever its clock reaches the returned time.
//
// O((k+1) log n) for k expiries and dispatches, plus O(log n) for each stale entry (of a
// request that left the queue otherwise) it drops from the top of the deadline heap.
func (q *Queue) Notify() (next time.Time) {
	q.mu.Lock()
	q.runLocked(q.nowLocked())
	q.deadlines.DropStale()
	if e := q.deadlines.Top(); e != nil {
		next = time.Unix(0, e.At)
	}
	q.unlock()
	return next
}

// Close ends every waiting request with RejectedClosed (Admit returns ErrClosed) and makes
// later admissions fail with ErrClosed. Requests in flight are unaffected and must still be
// Done. Close is idempotent. O(n log n).
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	now := q.nowLocked()
	for e := q.deadlines.Top(); e != nil; e = q.deadlines.Top() {
		if dlLive(e) {
			q.removeLocked(e.Val, RejectedClosed, ErrClosed, now)
		}
		q.deadlines.Pop()
	}
	q.markLocked(now.UnixNano())
	q.unlock()
}

// Stats returns the current counters and gauges. O(1).
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	s := q.stats
	s.Queued, s.QueuedBytes, s.InFlight, s.Flows = q.queued, q.bytes, q.inFlight, q.flows
	q.mu.Unlock()
	return s
}

// BandStats is a snapshot of one band's gauges.
type BandStats struct {
	Queued      int
	QueuedBytes int64
	InFlight    int
	Flows       int // flows of this band with something waiting or in flight
}

// BandStats returns band b's gauges; b must be in [0, Options.Bands), otherwise the result
// is zero. O(1).
func (q *Queue) BandStats(b int) BandStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b < 0 || b >= len(q.bands) {
		return BandStats{}
	}
	bd := &q.bands[b]
	return BandStats{Queued: bd.queued, QueuedBytes: bd.bytes, InFlight: bd.inFlight, Flows: bd.flows.n}
}

// RetryAfter is a suggestion for the Retry-After header of a 429 answer: the time the
// queue would take to drain its current backlog at the dispatch rate of the last complete
// second, clamped to [1 s, TTL]; the TTL when there is a backlog and nothing was dispatched
// in that second. O(1).
func (q *Queue) RetryAfter() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rateTickLocked(q.nowLocked().UnixNano())
	switch {
	case q.queued == 0:
		return time.Second
	case q.rateLast == 0:
		return q.ttl // a backlog and no dispatch in the last second: nothing moves
	}
	d := time.Duration(int64(q.queued) * int64(time.Second) / int64(q.rateLast))
	return min(max(d, time.Second), q.ttl)
}

// ---- internals; everything below expects q.mu held (admit.go, dispatch.go and expire.go
// hold the rest, by concern) ----

// nowLocked reads the queue's clock.
func (q *Queue) nowLocked() time.Time {
	if q.sysClock {
		return q.mono.now()
	}
	return q.clock.Now()
}
