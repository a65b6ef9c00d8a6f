package flowcontrol

import "slices"

// Four heaps. In three of them (items, flows, re-key) each element carries its own index so
// that removal from the middle (cancellation, a flow emptied) costs O(log n); the deadline
// heap instead lets entries go stale (see deadlineHeap). They are written out per type
// rather than through container/heap or generics: the interface calls of container/heap and
// the dictionary calls of generic pointer shapes both cost more than the comparisons
// themselves on this path.

// itemLess orders requests within a flow: item key, then enqueue sequence.
func itemLess(a, b *waiter) bool {
	if a.key != b.key {
		return a.key.Less(b.key)
	}
	return a.seq < b.seq
}

type itemHeap []*waiter

func (h *itemHeap) push(w *waiter) {
	*h = append(*h, w)
	w.itemIdx = len(*h) - 1
	h.up(w.itemIdx)
}

func (h *itemHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	w := s[i]
	if i != n {
		s[i] = s[n]
		s[i].itemIdx = i
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	w.itemIdx = -1
}

func (h itemHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !itemLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].itemIdx, h[p].itemIdx = i, p
		i = p
	}
}

func (h itemHeap) down(i int) bool {
	i0, n := i, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && itemLess(h[r], h[l]) {
			j = r
		}
		if !itemLess(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].itemIdx, h[j].itemIdx = i, j
		i = j
	}
	return i > i0
}

// The deadline heap and the flow heaps are the large ones (every waiting request, every
// non-empty flow of a band), and at 100,000 entries most of their levels are out of the
// cache, so their layout is chosen for the misses rather than the comparisons:
//
//   - Entries hold the ordering fields inline: a sift compares neighbouring array entries
//     instead of chasing a pointer per comparison.
//   - They are 4-ary: half the levels of a binary heap, so half the dependent misses on the
//     way down, for three more comparisons per level among four children that lie next to
//     each other (two or three cache lines fetched together).
//   - A sift moves a hole rather than swapping, so each level writes one entry (and, in the
//     flow heap, one back-index). The entry to place is a parameter, not read back from
//     the hole, and a moved entry's back-pointer is read from where it was rather than where
//     it went: a read of an entry just written waits for the stores before it to drain, and
//     those include back-index writes that miss the cache.

// heapArity is the number of children of a node of the deadline and flow heaps: the
// children of i are arity·i+1 … arity·i+arity, its parent (i−1)/arity.
const heapArity = 4

// dlEntry is one request in the deadline heap, ordered by deadline, then enqueue sequence.
// It is live while its waiter is still queued as that request (see deadlineHeap).
type dlEntry struct {
	dl  int64 // unix ns
	seq uint64
	w   *waiter
}

func (e *dlEntry) live() bool { return e.w.state == stateQueued && e.w.seq == e.seq }

func dlLess(a, b *dlEntry) bool {
	if a.dl != b.dl {
		return a.dl < b.dl
	}
	return a.seq < b.seq
}

// deadlineHeap holds the waiting requests by deadline. A request that leaves the queue other
// than from the top of this heap (dispatched, cancelled) is not taken out: its entry goes
// stale, and is dropped when it reaches the top at its deadline (or Tick or Close pops it)
// or when stale entries outnumber live ones and the heap is compacted. Taking it out would
// cost a sift through the heap on every dispatch, a dependent chain of misses at 100,000
// waiting requests; a compaction is one pass over the heap, O(1) amortised per stale entry.
// The entries need no back-index either, so a sift writes into the heap alone.
type deadlineHeap struct {
	h     []dlEntry
	stale int // entries whose request has left the queue
	// limit is the most entries the heap can need, twice Options.Capacity.Requests (as
	// many stale entries as live ones) plus minCompact; set by New.
	limit int
}

// minCompact is the size below which the deadline heap is not compacted.
const minCompact = 64

// push adds w. O(log n), plus O(n) for a compaction once per n/2 stale entries.
func (d *deadlineHeap) push(w *waiter) {
	// Compact when the stale entries outnumber the live ones, which bounds the memory
	// they hold: each compaction reads every entry's waiter (a miss each, though not a
	// dependent chain of them like a sift's), so two per stale entry. When the slice must
	// grow first, it at least doubles and leaves room for as many stale entries as there
	// are live ones, so that a steady state compacts in the room it has; it never needs
	// more than limit, and goes to limit at once from a quarter of it.
	switch n := len(d.h); {
	case n >= minCompact && 2*d.stale > n:
		d.compact()
	case n == cap(d.h):
		c := max(2*n, 2*(n-d.stale)+minCompact)
		if d.limit > n && 4*c >= d.limit {
			c = d.limit // near it: take it all rather than grow again in a steady state
		}
		d.h = slices.Grow(d.h, c-n)
	}
	d.h = append(d.h, dlEntry{})
	dlUp(d.h, len(d.h)-1, dlEntry{w.deadline, w.seq, w})
}

// top returns the entry with the earliest deadline, live or stale, or nil. O(1).
func (d *deadlineHeap) top() *dlEntry {
	if len(d.h) == 0 {
		return nil
	}
	return &d.h[0]
}

// pop removes the top entry, which is stale. O(log n).
func (d *deadlineHeap) pop() {
	s := d.h
	n := len(s) - 1
	e := s[n]
	s[n] = dlEntry{}
	d.h = s[:n]
	d.stale--
	if n > 0 {
		dlDown(d.h, 0, e)
	}
}

// dropStale pops stale entries off the top, so that the top is live or the heap empty.
// O(log n) per entry dropped.
func (d *deadlineHeap) dropStale() {
	for len(d.h) > 0 && !d.h[0].live() {
		d.pop()
	}
}

// compact drops every stale entry and restores the heap order. O(n).
func (d *deadlineHeap) compact() {
	s := d.h
	j := 0
	for i := range s {
		if s[i].live() {
			s[j] = s[i]
			j++
		}
	}
	clear(s[j:])
	s = s[:j]
	if len(s) > 1 {
		for i := (len(s) - 2) / heapArity; i >= 0; i-- { // the last parent first
			dlDown(s, i, s[i])
		}
	}
	d.h, d.stale = s, 0
}

// dlUp places e, which belongs at i or above, into the hole at i.
func dlUp(h []dlEntry, i int, e dlEntry) {
	for i > 0 {
		p := (i - 1) / heapArity
		if !dlLess(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

// dlDown places e, which belongs at i or below, into the hole at i.
func dlDown(h []dlEntry, i int, e dlEntry) {
	n := len(h)
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		j := c // the smallest child
		for k, end := c+1, min(c+heapArity, n); k < end; k++ {
			if dlLess(&h[k], &h[j]) {
				j = k
			}
		}
		if !dlLess(&h[j], &e) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = e
}

// flowEntry is one non-empty flow in its band's heap, ordered by flow key, then the
// enqueue sequence of the flow's head request.
type flowEntry struct {
	key Key
	seq uint64
	f   *flow
}

func flowLess(a, b *flowEntry) bool {
	if a.key != b.key {
		return a.key.Less(b.key)
	}
	return a.seq < b.seq
}

type flowHeap []flowEntry

func (h *flowHeap) push(f *flow, k Key, seq uint64) {
	*h = append(*h, flowEntry{})
	h.up(len(*h)-1, flowEntry{k, seq, f})
}

// set changes the key of the entry at i and restores the heap.
func (h flowHeap) set(i int, k Key, seq uint64) {
	e := flowEntry{k, seq, h[i].f}
	if !h.down(i, e) {
		h.up(i, e)
	}
}

func (h *flowHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	f, e := s[i].f, s[n]
	s[n] = flowEntry{}
	s = s[:n]
	*h = s
	if i != n && !s.down(i, e) {
		s.up(i, e)
	}
	f.bandIdx = -1
}

// up places e, which belongs at i or above, into the hole at i.
func (h flowHeap) up(i int, e flowEntry) {
	for i > 0 {
		p := (i - 1) / heapArity
		if !flowLess(&e, &h[p]) {
			break
		}
		f := h[p].f
		h[i] = h[p]
		f.bandIdx = i
		i = p
	}
	h[i] = e
	e.f.bandIdx = i
}

// down places e, which belongs at i or below, into the hole at i, and reports whether it
// went below i.
func (h flowHeap) down(i0 int, e flowEntry) bool {
	n, i := len(h), i0
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		j := c // the smallest child
		for k, end := c+1, min(c+heapArity, n); k < end; k++ {
			if flowLess(&h[k], &h[j]) {
				j = k
			}
		}
		if !flowLess(&h[j], &e) {
			break
		}
		f := h[j].f
		h[i] = h[j]
		f.bandIdx = i
		i = j
	}
	h[i] = e
	e.f.bandIdx = i
	return i > i0
}

// rekeyHeap orders flows whose key has a validity limit by that limit.
type rekeyHeap []*flow

func (h *rekeyHeap) push(f *flow) {
	*h = append(*h, f)
	f.rekeyIdx = len(*h) - 1
	h.up(f.rekeyIdx)
}

func (h *rekeyHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	f := s[i]
	if i != n {
		s[i] = s[n]
		s[i].rekeyIdx = i
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		h.fix(i)
	}
	f.rekeyIdx = -1
}

func (h rekeyHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h rekeyHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[i].until >= h[p].until {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].rekeyIdx, h[p].rekeyIdx = i, p
		i = p
	}
}

func (h rekeyHeap) down(i int) bool {
	i0, n := i, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].until < h[l].until {
			j = r
		}
		if h[j].until >= h[i].until {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].rekeyIdx, h[j].rekeyIdx = i, j
		i = j
	}
	return i > i0
}
