package flowcontrol

import (
	"testing"
	"time"
)

// TestMonoClock checks that the queue's reading of the system clock lies between two
// time.Now readings taken around it, by the monotonic clock and by the wall clock (within a
// millisecond of adjustment), and never goes back.
func TestMonoClock(t *testing.T) {
	var c monoClock
	var last time.Time
	for i := range 2000 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		if got.Before(before) || got.After(after) {
			t.Fatalf("reading %d: %v not within [%v, %v]", i, got, before, after)
		}
		if ns, ms := got.UnixNano(), int64(time.Millisecond); ns < before.UnixNano()-ms || ns > after.UnixNano()+ms {
			t.Fatalf("reading %d: wall clock %v not within a millisecond of [%v, %v]", i, got.UnixNano(), before.UnixNano(), after.UnixNano())
		}
		if got.Before(last) {
			t.Fatalf("reading %d: %v before the previous %v", i, got, last)
		}
		last = got
		if i == 1000 {
			c.base = c.base.Add(-monoRebase) // as if a second had passed: the next reading rebases
		}
	}
}
