// Package benchcpu lets a benchmark report the CPU time it spent per operation, as the metric
// cpu-ns/op beside the wall-clock ns/op. On a shared, oversubscribed machine the wall clock
// also counts the time spent waiting for a core; the CPU time measures the code.
//
// A thread meter (StartThread) locks the benchmark's goroutine to its OS thread and counts
// that thread alone (Linux): for a loop on one goroutine, it leaves out the garbage collector's
// and other goroutines' work. A process meter (StartProcess) counts the whole process (unix),
// which RunParallel loops need; it collects garbage first, so that an earlier benchmark's
// garbage is not charged to this loop. Where the clock is unavailable, Stop reports nothing.
package benchcpu

import (
	"runtime"
	"testing"
	"time"
)

// A Meter measures the CPU time of one timed loop: start it just before the loop, Stop it
// right after. A Meter is used by one goroutine.
type Meter struct {
	start  time.Duration
	ok     bool
	thread bool
}

// StartThread locks the calling goroutine to its OS thread and starts counting that thread's
// CPU time; Stop unlocks it.
func StartThread() Meter {
	runtime.LockOSThread()
	t, ok := threadCPU()
	return Meter{start: t, ok: ok, thread: true}
}

// StartProcess collects garbage, then starts counting the process's CPU time.
func StartProcess() Meter {
	runtime.GC()
	t, ok := processCPU()
	return Meter{start: t, ok: ok}
}

// Exclude runs f and leaves the CPU time it takes out of the loop's (for work inside the loop
// that the benchmark stops its timer for).
func (m *Meter) Exclude(f func()) {
	clock := processCPU
	if m.thread {
		clock = threadCPU
	}
	t0, ok0 := clock()
	f()
	t1, ok1 := clock()
	if ok0 && ok1 {
		m.start += t1 - t0
	}
}

// Stop reports the CPU time per operation of b's loop as cpu-ns/op and returns it, or
// returns false (and reports nothing) where the clock is unavailable or b ran no operation.
func (m Meter) Stop(b *testing.B) (float64, bool) {
	var t time.Duration
	var ok bool
	if m.thread {
		t, ok = threadCPU()
		runtime.UnlockOSThread()
	} else {
		t, ok = processCPU()
	}
	if !m.ok || !ok || b.N <= 0 {
		return 0, false
	}
	perOp := float64(t-m.start) / float64(b.N)
	b.ReportMetric(perOp, "cpu-ns/op")
	return perOp, true
}
