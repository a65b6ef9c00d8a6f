package flowcontrol

import "context"

// Ticket is the handle of an admitted (or, from Enqueue, a queued) request. It is a small
// value: copy it freely, but complete it once. The zero Ticket is what failed admissions
// return.
//
// Tickets are backed by pooled records; each handle carries a generation so that using a
// handle after its request finished is detected rather than touching a later request.
// Ticket methods are safe for concurrent use.
type Ticket struct {
	w   *waiter
	gen uint64
}

// Done reports that the dispatched request has finished, with its actual usage, which the
// policy sees (EventDone) and may charge to the flow. Negative usage fields are treated as
// zero. It frees the request's in-flight slot and dispatches whatever that lets through.
//
// Done must be called exactly once per dispatched request. Calling it on the zero Ticket
// (a rejected request), on a Ticket that was never dispatched, or a second time, is misuse
// and panics. O(log f) to re-key its flow, f the flows in the band (nothing when the key is
// unchanged), plus the dispatches it triggers; allocation-free.
func (t Ticket) Done(u Usage) {
	w := t.w
	if w == nil {
		panic("flowcontrol: Ticket.Done on the zero Ticket (the request was not admitted)")
	}
	q := w.q
	q.mu.Lock()
	if w.gen != t.gen || w.state != stateDispatched {
		queued := w.gen == t.gen && w.state == stateQueued
		q.mu.Unlock()
		if queued {
			panic("flowcontrol: Ticket.Done on a request that is still waiting")
		}
		panic("flowcontrol: Ticket.Done called twice, or on a request that was not dispatched")
	}
	u.PromptTokens, u.CachedTokens, u.OutputTokens = max(u.PromptTokens, 0), max(u.CachedTokens, 0), max(u.OutputTokens, 0)
	now := q.nowLocked()
	q.doneLocked(w, u, now)
	q.runLocked(now)
	q.unlock()
}

// Cancel withdraws a request that is still waiting (one queued with Enqueue; Admit callers
// cancel through their context) and reports whether it did: false if the request already
// has its outcome. The outcome is Cancelled. O(log r + log f), r the requests in its flow
// and f the flows in the band, plus the dispatches it triggers.
func (t Ticket) Cancel() bool {
	w := t.w
	if w == nil {
		return false
	}
	q := w.q
	q.mu.Lock()
	if w.gen != t.gen || w.state != stateQueued || w.owned {
		q.mu.Unlock()
		return false
	}
	now := q.nowLocked()
	q.removeLocked(w, Cancelled, context.Canceled, now)
	q.runLocked(now)
	q.unlock()
	return true
}

// valid reports whether t refers to a request that is waiting or dispatched and not yet
// Done. O(1).
func (t Ticket) valid() bool {
	w := t.w
	if w == nil {
		return false
	}
	w.q.mu.Lock()
	ok := w.gen == t.gen && (w.state == stateQueued || w.state == stateDispatched)
	w.q.mu.Unlock()
	return ok
}

// request returns a copy of the request as the queue holds it (Arrival and Deadline
// filled in), and false if t is no longer valid. O(1).
func (t Ticket) request() (Request, bool) {
	w := t.w
	if w == nil {
		return Request{}, false
	}
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if w.gen != t.gen || (w.state != stateQueued && w.state != stateDispatched) {
		return Request{}, false
	}
	return w.req, true
}
