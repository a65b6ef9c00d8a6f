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

// systemClock is the Clock backed by package time. It is stateless and safe for concurrent
// use.
//
// A Queue whose Options.Clock is systemClock (or nil) does not call Now: it reads the
// monotonic clock alone, which costs one clock read instead of time.Now's two, and adds the
// elapsed time to a time.Now reading it takes again once a second. Its times then carry the
// same monotonic reading as time.Now's would, and a wall-clock reading that lags by what the
// system clock was adjusted since the last second (a step is seen within a second).
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// NewTimer returns a timer backed by time.NewTimer.
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time   { return s.t.C }
func (s sysTimer) Reset(d time.Duration) { s.t.Reset(d) }
func (s sysTimer) Stop() bool            { return s.t.Stop() }

// monoClock is a Queue's reading of the system clock (see systemClock). Not safe for
// concurrent use: the queue reads it with its lock held.
type monoClock struct {
	base time.Time // a time.Now reading, with its monotonic part
}

// monoRebase is how long monoClock extends one time.Now reading.
const monoRebase = time.Second

// now returns the current time. O(1).
func (c *monoClock) now() time.Time {
	d := time.Since(c.base) // the monotonic clock only, once base has a reading
	if d < 0 || d >= monoRebase {
		c.base = time.Now()
		return c.base
	}
	return c.base.Add(d)
}
