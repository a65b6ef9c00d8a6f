// Package rekey keeps re-key timers: the times at which records ordered by a key that expires
// must be keyed again, taken in time order (flowcontrol's queue and fairness's policies that
// keep their own order use it).
package rekey

import (
	"math"
	"time"

	"github.com/usher-llm/usher/internal/heap"
)

// Timer is one record's pending re-key time in a Timers set: a FlowPicker embeds it in its
// per-flow record (the queue embeds one in each of its flows). The zero value is not set.
type Timer struct {
	at  int64  // unix ns
	seq uint64 // of its live entry; 0 when not set
}

// At returns the time the timer is set for, or the zero Time when it is not set. O(1).
func (t *Timer) At() time.Time {
	if t.seq == 0 {
		return time.Time{}
	}
	return time.Unix(0, t.at)
}

// Timers is a set of re-key timers, each embedded in its owner's record, from which the
// owners whose time has come are taken in time order. It is what the queue uses for keys
// with a validity limit (FlowKey's until), offered to a FlowPicker that keeps its own order
// and must re-key a flow from its FlowState copy when a time-based key expires: set a timer
// when the key is computed, and at the start of PickFlow take every owner Due at now.
//
// Moving or clearing a timer leaves its old entry in the heap, stale, to be dropped when it
// reaches the top or when stale entries outnumber live ones (one pass over the heap), so
// every operation is O(log n) amortised for n timers set, the heap holds at most about twice
// that many entries, and it does not allocate once grown. The zero value is empty and ready
// to use. Not safe for concurrent use: a policy's methods run under the queue's lock.
type Timers[T any] struct {
	h   heap.Heap[timed[T]]
	seq uint64
}

type timed[T any] struct {
	t *Timer
	v T
}

func timedLive[T any](e *heap.Entry[timed[T]]) bool { return e.Val.t.seq == e.Seq }

// Set sets t, owned by v, to fire at at. The zero Time, or one past the range of
// time.Time.UnixNano, clears it. Setting a timer to the time it is already set for changes
// nothing. O(log n) amortised.
func (ts *Timers[T]) Set(t *Timer, at time.Time, v T) {
	if at.IsZero() || at.After(maxTime) || at.Before(minTime) {
		ts.Clear(t)
		return
	}
	ns := at.UnixNano()
	if t.seq != 0 {
		if t.at == ns {
			return
		}
		ts.h.Stale()
	}
	if ts.h.Live == nil {
		ts.h.Live = timedLive[T]
	}
	ts.seq++
	t.at, t.seq = ns, ts.seq
	ts.h.Push(ns, ts.seq, timed[T]{t, v})
}

// Clear clears t if it is set. O(1).
func (ts *Timers[T]) Clear(t *Timer) {
	if t.seq != 0 {
		t.seq = 0
		ts.h.Stale()
	}
}

// Due removes the timer with the earliest time if that time is not after now, clears it
// and returns its owner; ok is false when no timer is due. Timers set for the same time come
// out in the order they were set. O(log n) amortised.
func (ts *Timers[T]) Due(now time.Time) (v T, ok bool) {
	ts.h.DropStale()
	e := ts.h.Top()
	if e == nil || e.At > now.UnixNano() {
		return v, false
	}
	x := ts.h.Pop()
	x.Val.t.seq = 0
	return x.Val.v, true
}

// Len returns the number of entries held: the timers set and the stale entries not yet
// dropped. O(1).
func (ts *Timers[T]) Len() int { return ts.h.Len() }

// The range of times time.Time.UnixNano represents.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)
