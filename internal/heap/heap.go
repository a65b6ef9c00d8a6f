// Package heap is the one time-ordered min-heap usher's queue, its policies and its simulator
// share: the queue's deadlines, the re-key timers of the queue and of the policies that keep
// their own order, and the simulator's events.
//
// Entries are ordered by (At, Seq) and hold those fields inline, so a sift compares
// neighbouring array entries instead of chasing a pointer per comparison; the heap is 4-ary
// (half the levels of a binary heap, so half the dependent cache misses on the way down, for
// three more comparisons among children that lie next to each other); a sift moves a hole
// rather than swapping, writing one entry per level. The ordering fields are concrete types, not
// a type parameter's method: a comparison through a generic method is an indirect call that
// measured ~1.75× the cost of a sift over 100,000 entries.
//
// Removal is lazy: an entry whose owner no longer wants it is not searched for and taken out
// but reported stale (Heap.Stale) and dropped when it reaches the top or when stale entries
// outnumber live ones and the heap is compacted, in one pass, O(1) amortised per stale entry.
// So entries need no back-index and a sift writes into the heap alone. flowcontrol.Timers
// builds on this the re-key timers of the queue and of the policies that keep their own order.
//
// The heaps ordered by a flowcontrol.Key (a flow's requests, a band's flows, a policy's nodes)
// are written in their packages: their elements move in place and carry their index.
//
// Nothing here is safe for concurrent use; each heap belongs to one owner, which serialises
// access to it (the queue's lock, the simulator's loop).
package heap

import "slices"

// Entry is one element: ordered by At, then Seq. Val is the owner's payload.
type Entry[T any] struct {
	At  int64
	Seq uint64
	Val T
}

func less[T any](a, b *Entry[T]) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	return a.Seq < b.Seq
}

// arity is the number of children of a node: the children of i are arity·i+1 … arity·i+arity,
// its parent (i−1)/arity.
const arity = 4

// minCompact is the size below which a heap is not compacted.
const minCompact = 64

// Heap is a 4-ary min-heap of entries by (At, Seq) with lazy removal. The zero value is an empty
// heap in which every entry is live; set Live before marking any entry stale.
//
// Invariant the owner keeps: the number of Stale calls, less the stale entries dropped, equals
// the number of entries for which Live reports false. That is, call Stale exactly once when an
// entry stops being live, and never make a stale entry live again.
type Heap[T any] struct {
	// Live reports whether an entry still stands. It is called only when an entry is
	// popped, dropped or compacted, never during a sift. Nil means every entry is live.
	Live func(*Entry[T]) bool
	// MaxLive, if positive, is the most live entries the owner will hold at once. The heap
	// then never needs more than limit = 2·MaxLive + 64 entries, live and stale (it compacts
	// before that), and a heap that must grow to within a quarter of limit takes all of it
	// at once rather than grow again in a steady state.
	MaxLive int

	h     []Entry[T]
	stale int
}

// Len returns the number of entries, live and stale. O(1).
func (h *Heap[T]) Len() int { return len(h.h) }

// Stale records that one entry has stopped being live (see the invariant on Heap). O(1).
func (h *Heap[T]) Stale() { h.stale++ }

// Push adds an entry. O(log n), plus O(n) for a compaction once per n/2 stale entries.
func (h *Heap[T]) Push(at int64, seq uint64, v T) {
	// Compact when the stale entries outnumber the live ones, which bounds the memory they
	// hold. When the slice must grow first, it at least doubles and leaves room for as many
	// stale entries as there are live ones, so that a steady state compacts in the room it
	// has.
	switch n := len(h.h); {
	case n >= minCompact && 2*h.stale > n:
		h.compact()
	case n == cap(h.h):
		c := max(2*n, 2*(n-h.stale)+minCompact)
		if limit := 2*h.MaxLive + minCompact; h.MaxLive > 0 && limit > n && 4*c >= limit {
			c = limit
		}
		h.h = slices.Grow(h.h, c-n)
	}
	h.h = append(h.h, Entry[T]{})
	up(h.h, len(h.h)-1, Entry[T]{at, seq, v})
}

// Top returns the earliest entry, live or stale, or nil when the heap is empty. The pointer is
// valid until the heap next changes. O(1).
func (h *Heap[T]) Top() *Entry[T] {
	if len(h.h) == 0 {
		return nil
	}
	return &h.h[0]
}

// Pop removes and returns the earliest entry; a stale one leaves the stale count. The heap must
// not be empty. O(log n).
func (h *Heap[T]) Pop() Entry[T] {
	s := h.h
	if h.Live != nil && !h.Live(&s[0]) {
		h.stale--
	}
	top := s[0]
	n := len(s) - 1
	last := s[n]
	s[n] = Entry[T]{}
	h.h = s[:n]
	if n > 0 {
		down(h.h, 0, last)
	}
	return top
}

// DropStale pops stale entries off the top, so that the top is live or the heap empty.
// O(log n) per entry dropped.
func (h *Heap[T]) DropStale() {
	for len(h.h) > 0 && h.Live != nil && !h.Live(&h.h[0]) {
		h.Pop()
	}
}

// Clear removes every entry, keeping the memory. O(n).
func (h *Heap[T]) Clear() {
	clear(h.h)
	h.h, h.stale = h.h[:0], 0
}

// compact drops every stale entry and restores the heap order. O(n).
func (h *Heap[T]) compact() {
	s := h.h
	j := 0
	for i := range s {
		if h.Live(&s[i]) {
			s[j] = s[i]
			j++
		}
	}
	clear(s[j:])
	s = s[:j]
	if len(s) > 1 {
		for i := (len(s) - 2) / arity; i >= 0; i-- { // the last parent first
			down(s, i, s[i])
		}
	}
	h.h, h.stale = s, 0
}

// up places e, which belongs at i or above, into the hole at i.
func up[T any](h []Entry[T], i int, e Entry[T]) {
	for i > 0 {
		p := (i - 1) / arity
		if !less(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

// down places e, which belongs at i or below, into the hole at i.
func down[T any](h []Entry[T], i int, e Entry[T]) {
	n := len(h)
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		j := c // the smallest child
		for k, end := c+1, min(c+arity, n); k < end; k++ {
			if less(&h[k], &h[j]) {
				j = k
			}
		}
		if !less(&h[j], &e) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = e
}
