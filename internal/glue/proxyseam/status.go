package proxyseam

import (
	"net/http"

	"github.com/usher-llm/usher/flowcontrol"
)

// StatusClientClosedRequest is nginx's non-standard 499 status, the answer (for logs and
// metrics: nobody is listening) to a request whose client went away.
const StatusClientClosedRequest = 499

// OutcomeStatus is the HTTP status a gateway answers with for a request whose stay in the
// admission queue ended with o. It is the one mapping; StatusOf applies it to errors.
//
//	Dispatched        200 (proxy the request; the backend decides the final status)
//	RejectedCapacity  429 Too Many Requests, with a Retry-After header (see Queue.RetryAfter)
//	RejectedWait      429 Too Many Requests, with a Retry-After header (see Queue.RetryAfter)
//	RejectedClosed    503 Service Unavailable (the gateway is shutting down; retry elsewhere)
//	RejectedInvalid   400 Bad Request
//	Expired           503 Service Unavailable: no capacity became free in time. A
//	                  Retry-After header is optional; the client's own patience is spent.
//	Cancelled         499 (StatusClientClosedRequest)
//
// 429 says "you, slow down" and is the answer on arrival, when the queue was full or (early
// shedding) too slow to serve the request before its deadline; 503 says "we could not serve
// this in time" and is the answer after the request waited. Anything else maps to 500.
func OutcomeStatus(o flowcontrol.Outcome) int {
	switch o {
	case flowcontrol.Dispatched:
		return http.StatusOK
	case flowcontrol.RejectedCapacity, flowcontrol.RejectedWait:
		return http.StatusTooManyRequests
	case flowcontrol.RejectedClosed, flowcontrol.Expired:
		return http.StatusServiceUnavailable
	case flowcontrol.RejectedInvalid:
		return http.StatusBadRequest
	case flowcontrol.Cancelled:
		return StatusClientClosedRequest
	}
	return http.StatusInternalServerError
}

// StatusOf maps an error returned by flowcontrol's Admit, TryAdmit or Enqueue to the status a
// gateway answers with: OutcomeStatus(flowcontrol.OutcomeOf(err)). A caller's own context
// deadline (context.DeadlineExceeded) counts as expiry; unknown errors map to 500.
func StatusOf(err error) int { return OutcomeStatus(flowcontrol.OutcomeOf(err)) }
