package flowcontrol

import (
	"context"
	"errors"
)

// Outcome is how a request's stay in the queue ended. Every request that Admit, TryAdmit
// or Enqueue sees ends in exactly one Outcome.
type Outcome uint8

const (
	// Dispatched: admitted; the caller holds a Ticket and must call Done.
	Dispatched Outcome = iota + 1
	// RejectedCapacity: refused at once because a capacity limit (global, band or flow,
	// in requests or bytes) was reached, or, for TryAdmit, because it would have waited.
	RejectedCapacity
	// RejectedClosed: refused because the queue was closed, or ended by Close while waiting.
	RejectedClosed
	// RejectedInvalid: refused because the request (or its context) was invalid.
	RejectedInvalid
	// Expired: the request's deadline passed while it waited.
	Expired
	// Cancelled: the caller's context ended, or Ticket.Cancel was called, while it waited.
	Cancelled
	// RejectedWait: refused at once by early shedding (Options.EarlyShed) because its
	// estimated wait would outlast its deadline or the configured bound.
	RejectedWait
)

var outcomeNames = [...]string{"none", "dispatched", "rejected_capacity", "rejected_closed", "rejected_invalid", "expired", "cancelled", "rejected_wait"}

// String returns a snake_case name suitable for a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "none"
}

// OutcomeOf returns the Outcome that the error returned by Admit, TryAdmit or Enqueue
// stands for: nil is Dispatched; context.Canceled is Cancelled and
// context.DeadlineExceeded is Expired. Any other error maps to 0, whose String is "none".
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Dispatched
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrWouldWait):
		return RejectedCapacity
	case errors.Is(err, ErrWouldExpire):
		return RejectedWait
	case errors.Is(err, ErrClosed):
		return RejectedClosed
	case errors.Is(err, ErrInvalidRequest):
		return RejectedInvalid
	case errors.Is(err, ErrExpired), errors.Is(err, context.DeadlineExceeded):
		return Expired
	case errors.Is(err, context.Canceled):
		return Cancelled
	}
	return 0
}

// Errors returned by the queue. Capacity errors name the limit that was hit and all match
// ErrQueueFull with errors.Is.
var (
	// ErrQueueFull matches every capacity rejection.
	ErrQueueFull = errors.New("flowcontrol: queue full")
	// ErrGlobalFull: the queue-wide limit (Options.Capacity) was reached.
	ErrGlobalFull error = &scopeError{"flowcontrol: queue full: global limit"}
	// ErrBandFull: the request's band limit (Options.BandCapacity) was reached.
	ErrBandFull error = &scopeError{"flowcontrol: queue full: band limit"}
	// ErrFlowFull: the request's flow limit (Options.FlowCapacity) was reached.
	ErrFlowFull error = &scopeError{"flowcontrol: queue full: flow limit"}
	// ErrWouldWait: TryAdmit could not dispatch the request at once.
	ErrWouldWait = errors.New("flowcontrol: request would wait")
	// ErrWouldExpire: early shedding refused the request on arrival, because its
	// estimated wait outlasts its deadline or Options.EarlyShed.Bound.
	ErrWouldExpire = errors.New("flowcontrol: estimated wait exceeds the request's deadline")
	// ErrExpired: the request's deadline passed while it waited.
	ErrExpired = errors.New("flowcontrol: deadline passed while waiting")
	// ErrClosed: the queue is closed.
	ErrClosed = errors.New("flowcontrol: queue closed")
	// ErrInvalidRequest: the request or its context is invalid; the queue is unchanged.
	ErrInvalidRequest = errors.New("flowcontrol: invalid request")
	// ErrInvalidOptions: New was given invalid Options.
	ErrInvalidOptions = errors.New("flowcontrol: invalid options")
)

// scopeError is a capacity sentinel naming a scope; it matches ErrQueueFull.
type scopeError struct{ msg string }

func (e *scopeError) Error() string { return e.msg }

func (e *scopeError) Is(target error) bool { return target == ErrQueueFull }

// capacityError is a precomputed capacity rejection: which scope and which unit.
type capacityError struct {
	scope error
	msg   string
}

func (e *capacityError) Error() string { return e.msg }

func (e *capacityError) Is(target error) bool { return target == ErrQueueFull || target == e.scope }

var (
	errGlobalRequests = &capacityError{ErrGlobalFull, "flowcontrol: queue full: global limit on requests"}
	errGlobalBytes    = &capacityError{ErrGlobalFull, "flowcontrol: queue full: global limit on bytes"}
	errBandRequests   = &capacityError{ErrBandFull, "flowcontrol: queue full: band limit on requests"}
	errBandBytes      = &capacityError{ErrBandFull, "flowcontrol: queue full: band limit on bytes"}
	errFlowRequests   = &capacityError{ErrFlowFull, "flowcontrol: queue full: flow limit on requests"}
	errFlowBytes      = &capacityError{ErrFlowFull, "flowcontrol: queue full: flow limit on bytes"}
)
