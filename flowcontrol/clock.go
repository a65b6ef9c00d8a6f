package flowcontrol

import "time"

// Clock is the queue's source of time. The zero Options use the system clock; tests and
// simulators inject a fake (see package flowcontroltest) or a virtual one.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that delivers the time on its channel once d has passed.
	// The queue creates one per blocked Admit waiter and reuses it (Reset, Stop) when the
	// waiter is recycled, so implementations need not be cheap.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the queue uses. Stop and Reset follow Go 1.23+
// semantics: after Stop or Reset returns, no stale value is received from C. Each timer is
// used by one goroutine at a time (the blocked Admit that owns it), so its methods need not
// be safe for concurrent use.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop() bool
}

// SystemClock is the Clock backed by package time. It is stateless and safe for concurrent
// use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a timer backed by time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time   { return s.t.C }
func (s sysTimer) Reset(d time.Duration) { s.t.Reset(d) }
func (s sysTimer) Stop() bool            { return s.t.Stop() }
