// Package flowcontroltest provides a fake [flowcontrol.Clock], [FakeClock], for deterministic
// tests and for driving a [flowcontrol.Queue] in virtual time.
package flowcontroltest

import (
	"sync"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// FakeClock is a manually advanced [flowcontrol.Clock]. Time moves only when Advance or Set
// is called; timers whose time has come fire (in order of their due time) during that call.
//
// The zero value is ready to use and reads the zero [time.Time]; a test usually Sets it to a
// start time first:
//
//	clk := new(flowcontroltest.FakeClock)
//	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//
// Safe for concurrent use; must not be copied after first use.
type FakeClock struct {
	mu     sync.Mutex
	cond   sync.Cond           // broadcast when timers are armed or fire; L is &mu once waited on
	now    time.Time           // guarded by mu
	timers map[*timer]struct{} // guarded by mu; nil until the first timer
}

var _ flowcontrol.Clock = (*FakeClock)(nil)

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (d ≥ 0) and fires the timers that came due.
func (c *FakeClock) Advance(d time.Duration) {
	if d < 0 {
		panic("flowcontroltest: Advance with a negative duration")
	}
	c.mu.Lock()
	t := c.now.Add(d)
	c.mu.Unlock()
	c.Set(t)
}

// Set moves the clock to t, which must not be before the current time, and fires the
// timers that came due.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	if t.Before(c.now) {
		c.mu.Unlock()
		panic("flowcontroltest: Set moves the clock backwards")
	}
	c.now = t
	var due []*timer
	for tm := range c.timers {
		if !tm.when.After(t) {
			due = append(due, tm)
		}
	}
	for i := 1; i < len(due); i++ { // insertion sort by due time: few timers per step
		for j := i; j > 0 && due[j].when.Before(due[j-1].when); j-- {
			due[j], due[j-1] = due[j-1], due[j]
		}
	}
	for _, tm := range due {
		delete(c.timers, tm)
		select {
		case tm.c <- t:
		default:
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// WaitTimers blocks until at least n timers are armed and not yet fired or stopped. In a test
// that drives a blocking Admit from another goroutine, it tells when the waiter has gone to
// sleep.
func (c *FakeClock) WaitTimers(n int) {
	c.mu.Lock()
	for len(c.timers) < n {
		c.waitLocked()
	}
	c.mu.Unlock()
}

// NewTimer returns a timer firing when the clock reaches Now()+d.
func (c *FakeClock) NewTimer(d time.Duration) flowcontrol.Timer {
	tm := &timer{c: make(chan time.Time, 1), clock: c}
	tm.Reset(d)
	return tm
}

// waitLocked waits for the next Broadcast of cond; mu is held, and released while waiting.
func (c *FakeClock) waitLocked() {
	if c.cond.L == nil {
		c.cond.L = &c.mu
	}
	c.cond.Wait()
}

type timer struct {
	c     chan time.Time
	clock *FakeClock
	when  time.Time
}

func (t *timer) C() <-chan time.Time { return t.c }

// Reset re-arms the timer; a value not yet received is discarded.
func (t *timer) Reset(d time.Duration) {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-t.c:
	default:
	}
	t.when = c.now.Add(d)
	if d <= 0 {
		delete(c.timers, t)
		t.c <- c.now
		return
	}
	if c.timers == nil {
		c.timers = make(map[*timer]struct{})
	}
	c.timers[t] = struct{}{}
	c.cond.Broadcast()
}

// Stop disarms the timer; a value not yet received is discarded.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	_, armed := c.timers[t]
	delete(c.timers, t)
	select {
	case <-t.c:
	default:
	}
	return armed
}
