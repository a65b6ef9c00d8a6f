package flowcontrol

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
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

// Limits bounds what may wait in the queue (in flight work is the Gate's business).
// A zero field means "no limit at this level" except in Options.Capacity, where zero means
// the default.
type Limits struct {
	Requests int
	Bytes    int64
}

// Options configures a Queue. The zero value is a valid one-band FCFS queue with no gate,
// a 60 s TTL and room for 10,000 requests or 1 GiB.
type Options struct {
	// Bands is the number of priority bands; zero means 1. Band 0 is served first.
	Bands int
	// Policy orders flows and requests within a band; nil means FCFS.
	Policy Policy
	// Gate is consulted before each dispatch; nil means always open (the queue then only
	// orders and bounds; requests are dispatched as they arrive). A Gate that implements
	// BandGate is asked per band before the policy chooses the request.
	Gate Gate
	// Clock is the source of time; nil means SystemClock.
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
// arrival with RejectedWait (ErrWouldExpire) if its estimated wait (Queue.EstimateWaitOf)
// exceeds its budget — the time left until its Deadline, or until Arrival+Bound if that is
// sooner — by more than the factor 1+Margin. TryAdmit never waits, so it never sheds: what it
// cannot dispatch at once is ErrWouldWait as before. An unknown estimate (no recent
// dispatch history) never sheds. The zero value is off; New rejects a negative Bound or
// HalfLife and a Margin that is not finite and > −1.
type EarlyShed struct {
	// Enabled turns shedding on. When it is off the estimate is still kept, so
	// EstimateWait and EstimateWaitOf can be watched before shedding is turned on.
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
// outcome (an Admit, Done, Notify, Tick or Close caller, or a waiter whose context or
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
	st       FlowState
	items    itemHeap
	until    int64  // unix ns, 0 = no limit
	hash     uint64 // of st.ID, for band.flows
	bandIdx  int    // index in band.heap or band.list, -1 when not there
	rekeyIdx int    // index in Queue.rekey, -1 when not there
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
// concurrent use. See the package documentation for the model.
//
// Lock discipline: the fields above mu are set by New and never change; the fields below mu
// are guarded by it; methods ending in Locked expect it held. The Policy and Gate are called
// with mu held; the Observer never is.
type Queue struct {
	policy   Policy
	picker   FlowPicker
	gate     Gate
	bandGate BandGate // gate, when it implements BandGate
	clock    Clock
	ttl      time.Duration
	capacity Limits
	flowCap  Limits
	observer Observer
	observed bool
	notePool sync.Pool
	shed     EarlyShed    // HalfLife filled in
	ranker   Ranker       // policy, when it implements Ranker
	position Positioner   // picker, when it is a Ranker and implements Positioner
	seed     maphash.Seed // of the flow tables' hashes
	sysClock bool         // clock is SystemClock, read through mono

	mu        sync.Mutex
	bands     []band
	deadlines deadlineHeap
	rekey     rekeyHeap
	seq       uint64
	queued    int
	bytes     int64
	inFlight  int
	flows     int
	closed    bool
	stats     Stats
	freeW     []*waiter
	freeF     []*flow
	ev        Event
	scratch   Request
	notes     *noteBuf
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
		o.Policy = FCFS{}
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if es := o.EarlyShed; es.Bound < 0 || es.HalfLife < 0 || !(es.Margin > -1) || math.IsInf(es.Margin, 1) {
		return nil, fmt.Errorf("%w: EarlyShed %+v: Bound and HalfLife must be ≥ 0, Margin finite and > −1", ErrInvalidOptions, es)
	}
	if o.EarlyShed.HalfLife == 0 {
		o.EarlyShed.HalfLife = DefaultRateHalfLife
	}
	q := &Queue{
		policy:   o.Policy,
		gate:     o.Gate,
		clock:    o.Clock,
		ttl:      o.TTL,
		capacity: o.Capacity,
		flowCap:  o.FlowCapacity,
		observer: o.Observer,
		observed: o.Observer.Outcome != nil || o.Observer.Done != nil,
		bands:    make([]band, o.Bands),
		shed:     o.EarlyShed,
		seed:     maphash.MakeSeed(),
	}
	q.picker, _ = o.Policy.(FlowPicker)
	q.ranker, _ = o.Policy.(Ranker)
	if q.picker != nil && q.ranker != nil {
		q.position, _ = o.Policy.(Positioner)
	}
	q.bandGate, _ = o.Gate.(BandGate)
	q.deadlines.limit = 2*o.Capacity.Requests + minCompact
	_, q.sysClock = o.Clock.(SystemClock)
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

// Admit waits until the policy, the gate and the capacity let r through, and returns its
// Ticket; the caller must call Ticket.Done exactly once when the request has finished.
//
// Admit blocks in the caller's own goroutine: there is no dispatcher goroutine. The
// request is dispatched by whichever goroutine changes the queue's state in a way that lets
// it through (its own Admit, another Admit, a Done, a Notify or Tick, or another waiter
// processing expiry); the waiting goroutine is then woken through a channel. Each waiter
// sleeps on its own deadline timer too, and when it fires it processes every expiry due.
//
// It returns an error wrapping ErrInvalidRequest (nil ctx, invalid r), ErrQueueFull (one of
// ErrGlobalFull, ErrBandFull, ErrFlowFull), ErrWouldExpire (early shedding), ErrClosed,
// ErrExpired, or ctx.Err() if ctx ends first; in every error case the returned Ticket is
// the zero Ticket. If the request was dispatched before the cancellation was seen, Admit
// returns the Ticket and no error.
//
// Cost: O(log n) for the enqueue, n the requests waiting, and O(log r + log f) for each
// dispatch it triggers, r the requests in the flow and f the flows in the band (see Costs in
// the package documentation); allocation-free in steady state.
func (q *Queue) Admit(ctx context.Context, r Request) (Ticket, error) {
	if ctx == nil {
		return Ticket{}, q.rejectInvalid(&r, errNilContext)
	}
	q.mu.Lock()
	now := q.nowLocked()
	if err := ctx.Err(); err != nil {
		o := ctxOutcome(err)
		if o == Expired {
			q.stats.Expired++
		} else {
			q.stats.Cancelled++
		}
		q.noteLocked(false, Record{Outcome: o, Err: err, Request: r})
		q.unlock()
		return Ticket{}, err
	}
	w, err := q.enqueueLocked(&r, now)
	if err != nil {
		q.unlock()
		return Ticket{}, err
	}
	w.owned = true
	q.runLocked(now)
	if w.state == stateDispatched {
		t := Ticket{w, w.gen}
		q.unlock()
		return t, nil
	}
	w.blocking = true
	wait := time.Duration(w.deadline - now.UnixNano())
	q.unlock()
	return q.wait(ctx, w, wait)
}

var errNilContext = fmt.Errorf("%w: nil context", ErrInvalidRequest)

// wait blocks until w leaves the queue, its deadline passes or ctx ends.
func (q *Queue) wait(ctx context.Context, w *waiter, d time.Duration) (Ticket, error) {
	if w.timer == nil {
		w.timer = q.clock.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	for {
		select {
		case <-w.ready:
			q.mu.Lock()
		case <-ctx.Done():
			q.mu.Lock()
			if w.state != stateQueued {
				<-w.ready // ended by another goroutine, which signalled before unlocking
				break
			}
			w.blocking = false
			now := q.nowLocked()
			err := ctx.Err()
			q.removeLocked(w, ctxOutcome(err), err, now)
			q.runLocked(now)
		case <-w.timer.C():
			q.mu.Lock()
			if w.state != stateQueued {
				<-w.ready
				break
			}
			w.blocking = false
			now := q.nowLocked()
			q.runLocked(now)
			if w.state == stateQueued {
				// The clock has not reached the deadline yet (timer and clock disagree
				// slightly): sleep again.
				w.blocking = true
				d := time.Duration(w.deadline - now.UnixNano())
				q.unlock()
				w.timer.Reset(max(d, time.Millisecond))
				continue
			}
		}
		w.timer.Stop()
		w.blocking = false
		if w.state == stateDispatched {
			t := Ticket{w, w.gen}
			q.unlock()
			return t, nil
		}
		err := w.err
		q.recycleLocked(w)
		q.unlock()
		return Ticket{}, err
	}
}

// TryAdmit is Admit's non-blocking twin: it dispatches r at once if capacity and the gate
// allow it and no request of r's band is waiting (those would go first, or at least
// deserve to: like a semaphore's TryAcquire, TryAdmit does not overtake waiters), and
// otherwise returns ErrWouldWait (outcome RejectedCapacity) without changing the queue.
// Waiters in higher bands do not stop it: after the queue has been brought up to date they
// are held back by the gate for their own band. The policy sees the request enqueued and
// dispatched. O(log n); allocation-free in steady state.
func (q *Queue) TryAdmit(r Request) (Ticket, error) {
	q.mu.Lock()
	now := q.nowLocked()
	q.runLocked(now)
	if !q.closed && r.Band >= 0 && r.Band < len(q.bands) {
		q.scratch = r // the gate gets a pointer; r itself must not escape
		ok := q.wouldDispatchLocked(&q.scratch)
		q.scratch = Request{}
		if !ok {
			q.stats.RejectedCapacity++
			q.noteLocked(false, Record{Outcome: RejectedCapacity, Err: ErrWouldWait, Request: r})
			q.unlock()
			return Ticket{}, ErrWouldWait
		}
	}
	w, err := q.enqueueLocked(&r, now)
	if err != nil {
		q.unlock()
		return Ticket{}, err
	}
	w.owned = true
	q.runLocked(now)
	if w.state != stateDispatched {
		// Only when the gate changed its mind between the two calls, or a FlowPicker
		// held the band back: take the request back out.
		q.removeLocked(w, 0, nil, now)
		q.markLocked(now.UnixNano())
		q.stats.RejectedCapacity++
		q.noteLocked(false, Record{Outcome: RejectedCapacity, Err: ErrWouldWait, Request: w.req})
		q.recycleLocked(w)
		q.unlock()
		return Ticket{}, ErrWouldWait
	}
	t := Ticket{w, w.gen}
	q.unlock()
	return t, nil
}

// wouldDispatchLocked reports whether r would be dispatched right now: nothing waits in
// its band and the gate is open for it.
func (q *Queue) wouldDispatchLocked(r *Request) bool {
	if q.bands[r.Band].queued > 0 {
		return false
	}
	return q.gate == nil || q.gate.Open(r, Load{InFlight: q.inFlight, BandInFlight: q.bands[r.Band].inFlight})
}

// Enqueue is the asynchronous form of Admit, for callers that cannot block a goroutine per
// request (a single-threaded simulator, an event loop): it queues r and returns at once
// with the request's Ticket. The outcome is delivered through Options.Observer's Outcome
// hook, whose Record carries the Ticket (Done it when the request finishes); Ticket.Cancel
// withdraws a waiting request. Expiry of Enqueue'd requests happens when the queue is next
// operated on; such a caller calls Tick at the deadline it returns. The returned error is
// one of Admit's immediate rejections. O(log n).
func (q *Queue) Enqueue(r Request) (Ticket, error) {
	q.mu.Lock()
	now := q.nowLocked()
	w, err := q.enqueueLocked(&r, now)
	if err != nil {
		q.unlock()
		return Ticket{}, err
	}
	t := Ticket{w, w.gen}
	q.runLocked(now)
	q.unlock()
	return t, nil
}

// Notify tells the queue that the gate may have opened (saturation fell, a backend came
// back): it dispatches as much as the gate and policy allow. It also processes expiry.
// O(k log n) for k dispatches.
func (q *Queue) Notify() {
	q.mu.Lock()
	q.runLocked(q.nowLocked())
	q.unlock()
}

// Tick processes the queue at the clock's current time — expiry of every request whose
// deadline has come, re-keying of flows whose keys' validity ended, and dispatch — and
// returns the earliest remaining deadline (zero if nothing waits). Admit callers never need
// it: their own deadline timers drive expiry. A caller running the queue in virtual time,
// or using Enqueue, calls Tick whenever its clock reaches the returned time.
// O((k+1) log n) for k expiries and dispatches, plus O(log n) for each stale entry (of a
// request that left the queue otherwise) it drops from the top of the deadline heap.
func (q *Queue) Tick() (next time.Time) {
	q.mu.Lock()
	q.runLocked(q.nowLocked())
	q.deadlines.dropStale()
	if e := q.deadlines.top(); e != nil {
		next = time.Unix(0, e.dl)
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
	for e := q.deadlines.top(); e != nil; e = q.deadlines.top() {
		if e.live() {
			q.removeLocked(e.w, RejectedClosed, ErrClosed, now)
		}
		q.deadlines.pop()
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

// ---- internals; everything below expects q.mu held ----

// nowLocked reads the queue's clock.
func (q *Queue) nowLocked() time.Time {
	if q.sysClock {
		return q.mono.now()
	}
	return q.clock.Now()
}

func (q *Queue) rejectInvalid(r *Request, err error) error {
	q.mu.Lock()
	q.stats.RejectedInvalid++
	q.noteLocked(false, Record{Outcome: RejectedInvalid, Err: err, Request: *r})
	q.unlock()
	return err
}

// validateLocked fills Arrival and Deadline and checks r.
func (q *Queue) validateLocked(r *Request, now time.Time) error {
	switch {
	case r.Band < 0 || r.Band >= len(q.bands):
		return fmt.Errorf("%w: band %d not in [0, %d)", ErrInvalidRequest, r.Band, len(q.bands))
	case r.Bytes < 0:
		return fmt.Errorf("%w: negative Bytes %d", ErrInvalidRequest, r.Bytes)
	case r.PromptTokens < 0 || r.OutputTokens < 0:
		return fmt.Errorf("%w: negative token estimate", ErrInvalidRequest)
	case r.TTL < 0:
		return fmt.Errorf("%w: negative TTL %v", ErrInvalidRequest, r.TTL)
	}
	if r.Arrival.IsZero() {
		r.Arrival = now
	} else if r.Arrival.After(now) {
		return fmt.Errorf("%w: Arrival %v is in the future", ErrInvalidRequest, r.Arrival)
	} else if r.Arrival.Before(minTime) {
		return fmt.Errorf("%w: Arrival %v is before %v", ErrInvalidRequest, r.Arrival, minTime)
	}
	if r.Deadline.IsZero() {
		ttl := r.TTL
		if ttl == 0 {
			ttl = q.ttl
		}
		r.Deadline = r.Arrival.Add(ttl)
		if !r.Deadline.After(now) {
			return fmt.Errorf("%w: Arrival+TTL already passed", ErrInvalidRequest)
		}
	} else if !r.Deadline.After(now) {
		return fmt.Errorf("%w: Deadline %v is not in the future", ErrInvalidRequest, r.Deadline)
	}
	if r.Deadline.After(maxTime) {
		r.Deadline = maxTime // "never", within the range of UnixNano
	}
	return nil
}

// The range of times that int64 nanoseconds since 1970 can hold (years 1678 to 2262).
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// enqueueLocked validates r, checks capacity and queues it. Rejections are counted and
// noted here.
func (q *Queue) enqueueLocked(r *Request, now time.Time) (*waiter, error) {
	if q.closed {
		q.stats.RejectedClosed++
		q.noteLocked(false, Record{Outcome: RejectedClosed, Err: ErrClosed, Request: *r})
		return nil, ErrClosed
	}
	if err := q.validateLocked(r, now); err != nil {
		q.stats.RejectedInvalid++
		q.noteLocked(false, Record{Outcome: RejectedInvalid, Err: err, Request: *r})
		return nil, err
	}
	q.expireLocked(now) // expired requests must not hold capacity against this one
	bd := &q.bands[r.Band]
	h := flowHash(q.seed, r.Flow)
	f := bd.flows.get(r.Flow, h)
	if err := q.capacityLocked(r, bd, f); err != nil {
		q.stats.RejectedCapacity++
		q.noteLocked(false, Record{Outcome: RejectedCapacity, Err: err, Request: *r})
		q.markLocked(now.UnixNano()) // the expiry above may have emptied a band
		return nil, err
	}
	var rk Rank
	if q.ranker != nil {
		rk = q.rankLocked(r, bd, f, now)
	}
	if q.shed.Enabled && q.shedLocked(r, &rk, bd, f, now) {
		q.stats.RejectedWait++
		q.noteLocked(false, Record{Outcome: RejectedWait, Err: ErrWouldExpire, Request: *r})
		q.markLocked(now.UnixNano())
		return nil, ErrWouldExpire
	}
	if f == nil {
		f = q.newFlowLocked(r.Flow, r.Band, h)
		bd.flows.add(f)
		q.flows++
	}
	w := q.newWaiterLocked()
	w.req = *r
	q.seq++ // from 1, so that FlowState.HeadSeq is non-zero exactly when Head is set
	w.seq = q.seq
	w.deadline = r.Deadline.UnixNano()
	w.flow = f
	w.state = stateQueued
	w.class = uint8(rk.Class)
	if rk.Class > 0 {
		bd.cls[rk.Class-1].queued++
	}
	w.key = q.policy.ItemKey(&w.req, &f.st, now).sanitize()
	f.items.push(w)
	q.deadlines.push(w)
	f.st.Queued++
	f.st.QueuedBytes += r.Bytes
	bd.queued++
	bd.bytes += r.Bytes
	q.queued++
	q.bytes += r.Bytes
	headChanged := w.itemIdx == 0
	if headChanged {
		q.setHeadLocked(f)
	}
	q.observeLocked(EventEnqueue, f, w, now)
	if headChanged {
		q.keyFlowLocked(f, bd, now)
	}
	return w, nil
}

func (q *Queue) capacityLocked(r *Request, bd *band, f *flow) error {
	switch {
	case q.queued+1 > q.capacity.Requests:
		return errGlobalRequests
	case r.Bytes > q.capacity.Bytes-q.bytes: // not q.bytes+r.Bytes: that can overflow
		return errGlobalBytes
	case bd.limits.Requests > 0 && bd.queued+1 > bd.limits.Requests:
		return errBandRequests
	case bd.limits.Bytes > 0 && r.Bytes > bd.limits.Bytes-bd.bytes:
		return errBandBytes
	}
	var fq int
	var fb int64
	if f != nil {
		fq, fb = f.st.Queued, f.st.QueuedBytes
	}
	switch {
	case q.flowCap.Requests > 0 && fq+1 > q.flowCap.Requests:
		return errFlowRequests
	case q.flowCap.Bytes > 0 && r.Bytes > q.flowCap.Bytes-fb:
		return errFlowBytes
	}
	return nil
}

// setHeadLocked refreshes f's head fields from its item heap.
func (q *Queue) setHeadLocked(f *flow) {
	if len(f.items) == 0 {
		f.st.Head, f.st.HeadKey, f.st.HeadSeq = nil, Key{}, 0
		return
	}
	h := f.items[0]
	f.st.Head, f.st.HeadKey, f.st.HeadSeq = &h.req, h.key, h.seq
}

// keyFlowLocked places the non-empty flow f in its band's order after its head or the
// policy's state changed; an empty flow is taken out (and forgotten if idle).
func (q *Queue) keyFlowLocked(f *flow, bd *band, now time.Time) {
	if f.st.Queued == 0 {
		q.unlistLocked(f, bd)
		q.forgetIfIdleLocked(f, bd)
		return
	}
	if q.picker != nil {
		if f.bandIdx < 0 {
			f.bandIdx = len(bd.list)
			bd.list = append(bd.list, f)
			bd.states = append(bd.states, &f.st)
		}
		return
	}
	k, until := q.policy.FlowKey(&f.st, now)
	k = k.sanitize()
	switch {
	case f.bandIdx < 0:
		bd.heap.push(f, k, f.st.HeadSeq)
	case k != f.key || f.st.HeadSeq != f.keySeq:
		bd.heap.set(f.bandIdx, k, f.st.HeadSeq)
	}
	// An unchanged key (a completion under a policy that does not charge, say) leaves
	// the heap alone: its entry is likely out of the cache.
	f.key, f.keySeq = k, f.st.HeadSeq
	var u int64
	if !until.IsZero() && until.After(now) && !until.After(maxTime) {
		u = until.UnixNano()
	}
	switch {
	case u == 0 && f.rekeyIdx >= 0:
		q.rekey.remove(f.rekeyIdx)
	case u != 0 && f.rekeyIdx >= 0:
		f.until = u
		q.rekey.fix(f.rekeyIdx)
	case u != 0:
		f.until = u
		q.rekey.push(f)
	}
}

// unlistLocked takes f out of its band's order and the re-key heap.
func (q *Queue) unlistLocked(f *flow, bd *band) {
	if f.rekeyIdx >= 0 {
		q.rekey.remove(f.rekeyIdx)
	}
	if f.bandIdx < 0 {
		return
	}
	if q.picker == nil {
		bd.heap.remove(f.bandIdx)
		return
	}
	i, n := f.bandIdx, len(bd.list)-1
	if i != n {
		bd.list[i], bd.states[i] = bd.list[n], bd.states[n]
		bd.list[i].bandIdx = i
	}
	bd.list[n], bd.states[n] = nil, nil
	bd.list, bd.states = bd.list[:n], bd.states[:n]
	f.bandIdx = -1
}

func (q *Queue) forgetIfIdleLocked(f *flow, bd *band) {
	if f.st.Queued != 0 || f.st.InFlight != 0 {
		return
	}
	bd.flows.remove(f)
	q.flows--
	if len(q.freeF) < maxFreeFlows {
		f.st = FlowState{}
		q.freeF = append(q.freeF, f)
	}
}

func (q *Queue) newFlowLocked(id FlowID, b int, h uint64) *flow {
	var f *flow
	if n := len(q.freeF); n > 0 {
		f = q.freeF[n-1]
		q.freeF[n-1] = nil
		q.freeF = q.freeF[:n-1]
	} else {
		f = &flow{bandIdx: -1, rekeyIdx: -1}
	}
	f.st.ID, f.st.Band = id, b
	f.until, f.hash = 0, h
	return f
}

func (q *Queue) newWaiterLocked() *waiter {
	if n := len(q.freeW); n > 0 {
		w := q.freeW[n-1]
		q.freeW[n-1] = nil
		q.freeW = q.freeW[:n-1]
		return w
	}
	return &waiter{q: q, itemIdx: -1, ready: make(chan struct{}, 1)}
}

// recycleLocked returns a finished waiter to the free list; its Tickets go stale.
func (q *Queue) recycleLocked(w *waiter) {
	w.gen++
	w.state = stateFree
	w.req = Request{}
	w.flow = nil
	w.blocking, w.owned = false, false
	w.outcome, w.err = 0, nil
	if len(q.freeW) < maxFreeWaiters {
		q.freeW = append(q.freeW, w)
	}
}

// observeLocked tells the policy about an event.
func (q *Queue) observeLocked(k EventKind, f *flow, w *waiter, now time.Time) {
	ev := &q.ev
	ev.Kind, ev.Now, ev.Flow, ev.Request, ev.Usage = k, now, &f.st, &w.req, Usage{}
	q.policy.Observe(ev)
}

// takeLocked removes a queued w from its flow and the deadline heap and updates the
// counters; it reports whether w was its flow's head.
func (q *Queue) takeLocked(w *waiter) bool {
	f := w.flow
	bd := &q.bands[f.st.Band]
	wasHead := w.itemIdx == 0
	f.items.remove(w.itemIdx)
	q.deadlines.stale++ // w's entry; see deadlineHeap
	b := w.req.Bytes
	f.st.Queued--
	f.st.QueuedBytes -= b
	bd.queued--
	bd.bytes -= b
	if w.class > 0 {
		bd.cls[w.class-1].queued--
	}
	q.queued--
	q.bytes -= b
	if wasHead {
		q.setHeadLocked(f)
	}
	return wasHead
}

// removeLocked takes a queued w out without dispatching it and ends it with outcome o
// (Expired, Cancelled, RejectedClosed, or 0 for TryAdmit's silent withdrawal) and error
// err. A waiter nobody owns (Enqueue'd) is recycled.
func (q *Queue) removeLocked(w *waiter, o Outcome, err error, now time.Time) {
	f := w.flow
	bd := &q.bands[f.st.Band]
	wasHead := q.takeLocked(w)
	w.state = stateEnded
	var k EventKind
	switch o {
	case Expired:
		k = EventExpire
	case Cancelled, 0:
		k = EventCancel
	case RejectedClosed:
		k = EventClose
	}
	q.observeLocked(k, f, w, now)
	if wasHead || f.st.Queued == 0 {
		q.keyFlowLocked(f, bd, now)
	}
	if o != 0 {
		q.endLocked(w, o, err, now)
		if !w.owned {
			q.recycleLocked(w)
		}
	}
}

// endLocked records w's outcome, notes it for the observer and wakes its waiter.
func (q *Queue) endLocked(w *waiter, o Outcome, err error, now time.Time) {
	w.outcome, w.err = o, err
	switch o {
	case Dispatched:
		q.stats.Dispatched++
	case Expired:
		q.stats.Expired++
	case Cancelled:
		q.stats.Cancelled++
	case RejectedClosed:
		q.stats.RejectedClosed++
	}
	if q.observed && q.observer.Outcome != nil {
		rec := Record{Outcome: o, Err: err, Request: w.req, Wait: now.Sub(w.req.Arrival)}
		if o == Dispatched {
			rec.Ticket = Ticket{w, w.gen}
		}
		q.noteLocked(false, rec)
	}
	if w.blocking {
		w.ready <- struct{}{}
	}
}

// expireLocked ends every waiting request whose deadline is not after now.
func (q *Queue) expireLocked(now time.Time) {
	ns := now.UnixNano()
	for e := q.deadlines.top(); e != nil && e.dl <= ns; e = q.deadlines.top() {
		if e.live() {
			q.removeLocked(e.w, Expired, ErrExpired, now)
		}
		q.deadlines.pop()
	}
}

// runLocked brings the queue up to date at now: expiry, re-keying, dispatch.
func (q *Queue) runLocked(now time.Time) {
	q.expireLocked(now)
	ns := now.UnixNano()
	for len(q.rekey) > 0 && q.rekey[0].until <= ns {
		f := q.rekey[0]
		q.rekey.remove(0)
		q.keyFlowLocked(f, &q.bands[f.st.Band], now)
	}
	if q.queued > 0 {
		q.dispatchLocked(now)
	}
	q.markLocked(ns)
}

// dispatchLocked dispatches as much as the gate allows, band by band.
func (q *Queue) dispatchLocked(now time.Time) {
	for b := range q.bands {
		bd := &q.bands[b]
		for bd.queued > 0 {
			// A gate closed to the whole band is found out before the policy is asked:
			// no PickFlow (possibly a scan of the band) for a dispatch that cannot happen.
			if q.bandGate != nil && !q.bandGate.OpenBand(b, Load{InFlight: q.inFlight, BandInFlight: bd.inFlight}) {
				break
			}
			var f *flow
			if q.picker == nil {
				f = bd.heap[0].f
			} else {
				id, ok := q.picker.PickFlow(b, bd.states, now)
				if !ok {
					break
				}
				f = bd.flows.get(id, flowHash(q.seed, id))
				if f == nil || f.bandIdx < 0 {
					panic(fmt.Sprintf("flowcontrol: PickFlow returned flow %q, which has nothing waiting in band %d", id, b))
				}
			}
			w := f.items[0]
			if q.gate != nil && !q.gate.Open(&w.req, Load{InFlight: q.inFlight, BandInFlight: bd.inFlight}) {
				break
			}
			q.takeLocked(w)
			w.state = stateDispatched
			f.st.InFlight++
			bd.inFlight++
			q.inFlight++
			q.observeLocked(EventDispatch, f, w, now)
			q.keyFlowLocked(f, bd, now)
			q.rateTickLocked(now.UnixNano())
			q.rateCount++
			if w.seq <= q.seqMark { // it waited: a dispatch the gate paced
				bd.hist.served++
				if w.class > 0 {
					bd.cls[w.class-1].hist.served++
				}
			}
			q.endLocked(w, Dispatched, nil, now)
		}
	}
}

// doneLocked completes a dispatched request.
func (q *Queue) doneLocked(w *waiter, u Usage, now time.Time) {
	f := w.flow
	bd := &q.bands[f.st.Band]
	w.state = stateEnded
	f.st.InFlight--
	bd.inFlight--
	q.inFlight--
	q.stats.Completed++
	ev := &q.ev
	ev.Kind, ev.Now, ev.Flow, ev.Request, ev.Usage = EventDone, now, &f.st, &w.req, u
	q.policy.Observe(ev)
	if f.st.Queued > 0 {
		q.keyFlowLocked(f, bd, now)
	} else {
		q.forgetIfIdleLocked(f, bd)
	}
	if q.observed && q.observer.Done != nil {
		q.noteLocked(true, Record{Outcome: Dispatched, Request: w.req, Wait: now.Sub(w.req.Arrival), Usage: u})
	}
	q.recycleLocked(w)
}

// noteLocked queues a record for the observer.
func (q *Queue) noteLocked(done bool, r Record) {
	if !q.observed {
		return
	}
	if q.notes == nil {
		q.notes = q.notePool.Get().(*noteBuf)
	}
	q.notes.n = append(q.notes.n, note{done, r})
}

// unlock releases q.mu and then delivers the noted records to the observer.
func (q *Queue) unlock() {
	nb := q.notes
	q.notes = nil
	q.mu.Unlock()
	if nb == nil {
		return
	}
	for i := range nb.n {
		n := &nb.n[i]
		if n.done {
			if q.observer.Done != nil {
				q.observer.Done(n.r)
			}
		} else if q.observer.Outcome != nil {
			q.observer.Outcome(n.r)
		}
		*n = note{}
	}
	nb.n = nb.n[:0]
	q.notePool.Put(nb)
}

// ctxOutcome is the outcome of a request whose context ended with err: a passed context
// deadline is an expiry, anything else a cancellation.
func ctxOutcome(err error) Outcome {
	if err == context.DeadlineExceeded {
		return Expired
	}
	return Cancelled
}
