package flowcontrol

import "github.com/usher-llm/usher/internal/heap"

// The queue's heaps. Its deadlines and re-key timers are ordered by time and live in
// internal/heap, shared with the policies and the simulator; the two here are ordered by a
// Key and their elements carry their own index, so that removal from the middle (a
// cancellation, a flow emptied) and a re-key in place cost O(log n). They are written out per
// type rather than through container/heap or generics: the interface calls of container/heap
// and the dictionary calls of generic comparisons both cost more than the comparisons
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

// The flow heaps are large (every non-empty flow of a band), and at 100,000 entries most of
// their levels are out of the cache, so their layout is internal/heap's, chosen for the misses
// rather than the comparisons (see its package doc): entries hold the ordering fields inline,
// the heap is 4-ary, and a sift moves a hole rather than swapping, so each level writes one
// entry and one back-index. The entry to place is a parameter, not read back from the hole,
// and a moved entry's back-pointer is read from where it was rather than where it went: a read
// of an entry just written waits for the stores before it to drain, and those include
// back-index writes that miss the cache.

// heapArity is the number of children of a node of the flow heaps: the children of i are
// arity·i+1 … arity·i+arity, its parent (i−1)/arity.
const heapArity = 4

// dlLive reports whether a deadline entry still stands: its waiter is queued as the request
// the entry was pushed for. A request that leaves the queue other than from the top of the
// deadline heap (dispatched, cancelled) is not taken out: its entry goes stale (Heap.Stale)
// and is dropped when it reaches the top or at a compaction. Taking it out would cost a sift
// through the heap on every dispatch, a dependent chain of misses at 100,000 waiting requests.
func dlLive(e *heap.Entry[*waiter]) bool {
	return e.Val.state == stateQueued && e.Val.seq == e.Seq
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
		h.move(i, p)
		i = p
	}
	h.place(i, e)
}

// move fills the hole at i with the entry at j, whose place becomes the hole. The flow is
// read from j, where the entry was, not from i, where it has just been written.
func (h flowHeap) move(i, j int) {
	f := h[j].f
	h[i] = h[j]
	f.bandIdx = i
}

// place puts e into the hole at i.
func (h flowHeap) place(i int, e flowEntry) {
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
		var j int // the smallest child
		if kids := h[c:min(c+heapArity, n)]; len(kids) == heapArity {
			// A full family, as a tournament: two independent comparisons, then their winners.
			a, b := 0, 2
			if flowLess(&kids[1], &kids[0]) {
				a = 1
			}
			if flowLess(&kids[3], &kids[2]) {
				b = 3
			}
			if flowLess(&kids[b], &kids[a]) {
				a = b
			}
			j = c + a
		} else {
			j = c
			for k := c + 1; k < n; k++ {
				if flowLess(&h[k], &h[j]) {
					j = k
				}
			}
		}
		if !flowLess(&h[j], &e) {
			break
		}
		h.move(i, j)
		i = j
	}
	h.place(i, e)
	return i > i0
}
