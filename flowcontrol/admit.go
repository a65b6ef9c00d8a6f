package flowcontrol

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Admission: validating a request, checking capacity, queueing it, waiting for its outcome.
// Methods whose names end in Locked expect q.mu held.

// Admit waits until the policy, the gate and the capacity let r through, and returns its
// Ticket; the caller must call Ticket.Done exactly once when the request has finished.
//
// Admit blocks in the caller's own goroutine: there is no dispatcher goroutine. The
// request is dispatched by whichever goroutine changes the queue's state in a way that lets
// it through (its own Admit, another Admit, a Done, a Notify, or another waiter
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
// its band and the limits and the gate are open for it.
func (q *Queue) wouldDispatchLocked(r *Request) bool {
	if q.bands[r.Band].queued > 0 {
		return false
	}
	return q.openLocked(r, Load{InFlight: q.inFlight, BandInFlight: q.bands[r.Band].inFlight})
}

// Enqueue is the asynchronous form of Admit, for callers that cannot block a goroutine per
// request (a single-threaded simulator, an event loop): it queues r and returns at once
// with the request's Ticket. The outcome is delivered through Options.Observer's Outcome
// hook, whose Record carries the Ticket (Done it when the request finishes); Ticket.Cancel
// withdraws a waiting request. Expiry of Enqueue'd requests happens when the queue is next
// operated on; such a caller calls Notify at the deadline it returns. The returned error is
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
	q.deadlines.Push(w.deadline, w.seq, w)
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

func (q *Queue) newFlowLocked(id FlowID, b int, h uint64) *flow {
	var f *flow
	if n := len(q.freeF); n > 0 {
		f = q.freeF[n-1]
		q.freeF[n-1] = nil
		q.freeF = q.freeF[:n-1]
	} else {
		f = &flow{bandIdx: -1}
	}
	f.st.ID, f.st.Band = id, b
	f.hash = h
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
