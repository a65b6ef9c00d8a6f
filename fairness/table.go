package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// flowRef names one queue flow: the gateway's flow id in one band.
type flowRef struct {
	id   flowcontrol.FlowID
	band int
}

func refOf(f *flowcontrol.FlowState) flowRef { return flowRef{f.ID, f.Band} }

// slot is one entry of a table: a flow's policy state and its place in the idle list.
type slot[S any] struct {
	ref        flowRef
	idleSince  int64 // unix ns, while idle
	prev, next int32 // idle list neighbours, -1 at the ends
	idle       bool
	s          S
}

// table is a policy's per-flow history, keyed by flow. It is bounded: a flow with work
// queued or in flight (an active flow) is always kept, and there are at most as many of
// those as the queue holds; an idle flow (nothing queued, nothing in flight) is kept for at
// most forget after it became idle, and at most maxIdle idle flows are kept, the longest
// idle forgotten first. Forgetting a flow resets it to the zero state S.
//
// Slots live in one slice and are recycled through a free list, so steady-state use does
// not allocate. Pointers returned by use and get are valid until the next call that may
// create a slot. Not safe for concurrent use; the queue serialises policy calls.
type table[S any] struct {
	index      map[flowRef]int32
	slots      []slot[S]
	free       []int32
	head, tail int32 // idle list: head most recently idle, tail longest idle
	idle       int
	maxIdle    int
	forget     int64 // ns
}

func newTable[S any](maxIdle int, forget time.Duration) table[S] {
	return table[S]{index: make(map[flowRef]int32), head: -1, tail: -1, maxIdle: maxIdle, forget: int64(forget)}
}

// len is the number of flows remembered, active and idle.
func (t *table[S]) len() int { return len(t.index) }

// get returns the state of r, or nil if r is not remembered. O(1).
func (t *table[S]) get(r flowRef) *S {
	i, ok := t.index[r]
	if !ok {
		return nil
	}
	return &t.slots[i].s
}

// use returns the state of r, creating a zero one if needed, and marks r active (it
// leaves the idle list). O(1) amortised.
func (t *table[S]) use(r flowRef) *S {
	i, ok := t.index[r]
	if !ok {
		if n := len(t.free); n > 0 {
			i = t.free[n-1]
			t.free = t.free[:n-1]
		} else {
			t.slots = append(t.slots, slot[S]{})
			i = int32(len(t.slots) - 1)
		}
		t.slots[i] = slot[S]{ref: r, prev: -1, next: -1}
		t.index[r] = i
		return &t.slots[i].s
	}
	if t.slots[i].idle {
		t.unlink(i)
	}
	return &t.slots[i].s
}

// release marks r idle from now on (it was active). Then it forgets what is due. O(1)
// amortised.
func (t *table[S]) release(r flowRef, now int64) {
	if i, ok := t.index[r]; ok && !t.slots[i].idle {
		s := &t.slots[i]
		s.idle, s.idleSince = true, now
		s.prev, s.next = -1, t.head
		if t.head >= 0 {
			t.slots[t.head].prev = i
		}
		t.head = i
		if t.tail < 0 {
			t.tail = i
		}
		t.idle++
	}
	t.sweep(now)
}

// settle releases f's flow if the queue holds nothing of it any more, and in any case
// forgets what is due. Policies call it at the end of Observe.
func (t *table[S]) settle(f *flowcontrol.FlowState, now int64) {
	if f.Queued == 0 && f.InFlight == 0 {
		t.release(refOf(f), now)
		return
	}
	t.sweep(now)
}

// sweep forgets idle flows beyond maxIdle and those idle for longer than forget. O(1)
// amortised: each forgotten flow was made idle once.
func (t *table[S]) sweep(now int64) {
	for t.tail >= 0 && (t.idle > t.maxIdle || now-t.slots[t.tail].idleSince > t.forget) {
		i := t.tail
		t.unlink(i)
		delete(t.index, t.slots[i].ref)
		var zero S
		t.slots[i] = slot[S]{s: zero}
		t.free = append(t.free, i)
	}
}

func (t *table[S]) unlink(i int32) {
	s := &t.slots[i]
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		t.head = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	} else {
		t.tail = s.prev
	}
	s.prev, s.next, s.idle = -1, -1, false
	t.idle--
}
