package flowcontrol

import (
	"context"
	"time"
)

// Expiry: deadlines, cancellation and the outcomes that end a wait. Methods whose names end in
// Locked expect q.mu held.

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
	for e := q.deadlines.Top(); e != nil && e.At <= ns; e = q.deadlines.Top() {
		if dlLive(e) {
			q.removeLocked(e.Val, Expired, ErrExpired, now)
		}
		q.deadlines.Pop()
	}
}

// ctxOutcome is the outcome of a request whose context ended with err: a passed context
// deadline is an expiry, anything else a cancellation.
func ctxOutcome(err error) Outcome {
	if err == context.DeadlineExceeded {
		return Expired
	}
	return Cancelled
}
