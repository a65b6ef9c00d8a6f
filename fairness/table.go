package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
)

// flowRef names one queue flow: the gateway's flow id in one band.
type flowRef struct {
	id   flowcontrol.FlowID
	band int
}

// freeRef is the ref of a table's free slot: no flow's, for bands are never negative.
var freeRef = flowRef{band: -1}

func refOf(f *flowcontrol.FlowState) flowRef { return flowRef{f.ID, f.Band} }

// slot is one entry of a table: a flow's policy state, its place in the idle list and the
// usage it accrued that other gateway replicas have not been told of.
type slot[S any] struct {
	ref        flowRef
	idleSince  int64 // unix ns, while idle
	prev, next int32 // idle list neighbours, -1 at the ends
	dpos       int32 // index in the table's dirty list, -1 when not on it
	idle       bool
	grown      float64 // usage accrued since the last report, in the policy's units (see grow)
	s          S
}

// goneFlow is the unreported growth of a flow the table forgot, with its last state.
type goneFlow[S any] struct {
	ref   flowRef
	grown float64
	s     S
}

// table is a policy's per-flow history, keyed by flow. It is bounded: a flow with work
// queued or in flight (an active flow) is always kept, and there are at most as many of
// those as the queue holds; an idle flow (nothing queued, nothing in flight) is kept for at
// most forget after it became idle, and at most maxIdle idle flows are kept, the longest
// idle forgotten first. Forgetting a flow resets it to the zero state S.
//
// Slots live in one slice and are recycled through a free list, so steady-state use does
// not allocate. Pointers returned by use, useAt, touch and get are valid until the next call
// that may create a slot. Not safe for concurrent use; the queue serialises policy calls.
//
// For peer.UsageSharer the table also keeps, per flow, the usage accrued locally since
// the last report (grow) and a list of the flows with such growth (the dirty list), so that a
// report (report) costs O(flows that grew), not O(flows). The list is kept from the first
// report on, which scans every flow once: a table nobody asks for reports (one gateway) pays
// one addition per charge and no memory. A flow forgotten with unreported growth hands it to
// a list of forgotten growth that the next report drains — once reports are asked for (until
// then the growth is dropped with the flow); that list holds at most maxIdle flows, beyond
// which forgotten growth is dropped.
type table[S any] struct {
	index      map[flowRef]int32
	slots      []slot[S]
	free       []int32
	head, tail int32 // idle list: head most recently idle, tail longest idle
	idle       int
	maxIdle    int
	forget     int64 // ns

	dirty   []int32       // slots with growth not yet reported, in no order (while sharing)
	gone    []goneFlow[S] // growth of flows forgotten since the last report (while sharing)
	sharing bool          // report was called: keep the dirty list and forgotten growth

	onForget func(*S) // if set, told of each flow's state as the table forgets it (set once, after newTable)
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
	s, _ := t.useAt(r)
	return s
}

// useAt is use that also returns the slot's index, for grow and settleAt. O(1) amortised.
func (t *table[S]) useAt(r flowRef) (*S, int32) {
	return t.useHint(r)
}

// useHint is useAt that first tries the slots hints (indices useAt returned earlier, perhaps
// since recycled; negative ones are skipped), saving the map look-up when one still holds r.
// O(1) amortised.
func (t *table[S]) useHint(r flowRef, hints ...int32) (*S, int32) {
	for _, h := range hints {
		if h >= 0 && int(h) < len(t.slots) && t.slots[h].ref == r {
			if t.slots[h].idle {
				t.unlink(h)
			}
			return &t.slots[h].s, h
		}
	}
	i, ok := t.index[r]
	if !ok {
		if n := len(t.free); n > 0 {
			i = t.free[n-1]
			t.free = t.free[:n-1]
		} else {
			t.slots = append(t.slots, slot[S]{ref: freeRef})
			i = int32(len(t.slots) - 1)
		}
		t.slots[i] = slot[S]{ref: r, prev: -1, next: -1, dpos: -1}
		t.index[r] = i
		return &t.slots[i].s, i
	}
	if t.slots[i].idle {
		t.unlink(i)
	}
	return &t.slots[i].s, i
}

// touch returns the state of r for a charge that did not come from this queue (another
// replica's usage, see peer.UsageSharer): an active flow stays as it is; an idle or
// unknown flow (created in the zero state) becomes the most recently idle, as if released at
// now, for it was just served elsewhere. Then it forgets what is due, which never includes r.
// O(1) amortised.
func (t *table[S]) touch(r flowRef, now int64) *S {
	if i, ok := t.index[r]; ok && !t.slots[i].idle {
		return &t.slots[i].s
	}
	t.use(r)
	t.release(r, now) // r is now the head of the idle list, idle for 0 ns: sweep keeps it
	return &t.slots[t.index[r]].s
}

// grow returns the unreported growth of slot i (an index from useAt) for the policy to add
// to, and puts the slot on the dirty list. O(1) amortised.
func (t *table[S]) grow(i int32) *float64 {
	s := &t.slots[i]
	if s.dpos < 0 && t.sharing {
		s.dpos = int32(len(t.dirty))
		t.dirty = append(t.dirty, i)
	}
	return &s.grown
}

// report appends a usage delta for every flow on the dirty list and every forgotten flow,
// with the amount that amount makes of its growth and state, and empties both lists. A flow
// whose amount is zero or negative (a correction outweighed what it accrued) keeps its growth
// for the next report; an amount that is not finite is dropped. O(flows that grew); the first
// report, which finds the growth since the table was made, O(flows).
func (t *table[S]) report(dst []peer.UsageDelta, amount func(grown float64, s *S) float64) []peer.UsageDelta {
	if !t.sharing {
		t.sharing = true
		for i := range t.slots {
			if s := &t.slots[i]; s.grown != 0 {
				t.grow(int32(i)) // free slots have no growth
			}
		}
	}
	for _, i := range t.dirty {
		s := &t.slots[i]
		s.dpos = -1
		var ok bool
		dst, ok = appendDelta(dst, s.ref, amount(s.grown, &s.s))
		if ok {
			s.grown = 0
		}
	}
	t.dirty = t.dirty[:0]
	for k := range t.gone {
		g := &t.gone[k]
		dst, _ = appendDelta(dst, g.ref, amount(g.grown, &g.s))
	}
	clear(t.gone) // let go of the flow ids
	t.gone = t.gone[:0]
	return dst
}

// appendDelta appends r's delta of amount a if a is finite and positive; ok reports whether
// the growth is settled (appended, or not finite and so dropped).
func appendDelta(dst []peer.UsageDelta, r flowRef, a float64) (_ []peer.UsageDelta, ok bool) {
	switch {
	case a > 0 && a <= math.MaxFloat64:
		return append(dst, peer.UsageDelta{Flow: string(r.id), Band: r.band, Amount: a}), true
	case a <= 0:
		return dst, false
	}
	return dst, true // NaN or +Inf
}

// usable reports whether another replica's delta may be applied: a finite, positive amount
// in a band that can exist. The policy is not told how many bands its queue has; a delta in a
// band beyond them charges a flow no request can join, idle state bounded by Memory like any
// other (and the queue re-keys only flows of its bands).
func usable(d *peer.UsageDelta) bool {
	return d.Band >= 0 && d.Amount > 0 && d.Amount <= math.MaxFloat64
}

// release marks r idle from now on (it was active). Then it forgets what is due. O(1)
// amortised.
func (t *table[S]) release(r flowRef, now int64) {
	i, ok := t.index[r]
	if !ok {
		t.sweep(now)
		return
	}
	t.releaseAt(i, now)
}

// releaseAt is release of the flow in slot i (an index from useAt, current). O(1) amortised.
func (t *table[S]) releaseAt(i int32, now int64) {
	if !t.slots[i].idle {
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

// settleAt is settle for the flow in slot i (an index from useAt, current), without a look-up.
func (t *table[S]) settleAt(f *flowcontrol.FlowState, i int32, now int64) {
	if f.Queued == 0 && f.InFlight == 0 {
		t.releaseAt(i, now)
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
		s := &t.slots[i]
		if s.dpos >= 0 {
			t.undirty(i)
			if t.sharing && s.grown > 0 && len(t.gone) < t.maxIdle {
				t.gone = append(t.gone, goneFlow[S]{s.ref, s.grown, s.s})
			}
		}
		if t.onForget != nil {
			t.onForget(&s.s)
		}
		delete(t.index, s.ref)
		*s = slot[S]{ref: freeRef, dpos: -1}
		t.free = append(t.free, i)
	}
}

// undirty takes slot i off the dirty list. O(1).
func (t *table[S]) undirty(i int32) {
	p := t.slots[i].dpos
	last := t.dirty[len(t.dirty)-1]
	t.dirty[p] = last
	t.slots[last].dpos = p
	t.dirty = t.dirty[:len(t.dirty)-1]
	t.slots[i].dpos = -1
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

// deltaRef is the flow another replica's delta names.
func deltaRef(d *peer.UsageDelta) flowRef { return flowRef{flowcontrol.FlowID(d.Flow), d.Band} }
