package flowcontrol

import "time"

// Hooks for the external tests.

// EstimateBandWait is the band count: the wait of a request of band b that goes behind every
// request waiting in bands 0..b (EstimateWait's for a policy that is not a Ranker).
func EstimateBandWait(q *Queue, b int) (time.Duration, bool) { return q.estimateBandWait(b) }

// Valid reports whether t refers to a request that is waiting or dispatched and not yet Done.
func Valid(t Ticket) bool { return t.valid() }

// TicketRequest returns a copy of t's request as the queue holds it, and false if t is no
// longer valid.
func TicketRequest(t Ticket) (Request, bool) { return t.request() }

// Positioner is the interface a FlowPicker that is a Ranker implements to count what it
// serves first, for the wait estimate.
type Positioner = positioner

// Open reports what the queue's built-in limits answer for band r.Band at load l (band), and
// whether r may go once the Gate is asked too (open).
func Open(q *Queue, r *Request, l Load) (band, open bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bandOpenLocked(r.Band, l), q.openLocked(r, l)
}
