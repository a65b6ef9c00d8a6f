package flowcontrol

// Four intrusive binary heaps. Each element carries its own index so that removal from
// the middle (cancellation, expiry of a non-head request, a flow emptied) costs O(log n). They are written out per type rather than through container/heap or generics:
// the interface calls of container/heap and the dictionary calls of generic pointer shapes
// both cost more than the comparisons themselves on this path.

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
// non-empty flow of a band), so their entries hold the ordering fields inline: a sift
// compares neighbouring array entries instead of chasing a pointer per comparison, and
// moves a hole down or up so that each level writes one back-index.

// dlEntry is one waiting request in the deadline heap, ordered by deadline, then enqueue
// sequence.
type dlEntry struct {
	dl  int64 // unix ns
	seq uint64
	w   *waiter
}

func dlLess(a, b *dlEntry) bool {
	if a.dl != b.dl {
		return a.dl < b.dl
	}
	return a.seq < b.seq
}

type deadlineHeap []dlEntry

func (h *deadlineHeap) push(w *waiter) {
	*h = append(*h, dlEntry{w.deadline, w.seq, w})
	h.up(len(*h) - 1)
}

func (h *deadlineHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	w := s[i].w
	if i != n {
		s[i] = s[n]
		s[i].w.dlIdx = i
	}
	s[n] = dlEntry{}
	*h = s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	w.dlIdx = -1
}

func (h deadlineHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !dlLess(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		h[i].w.dlIdx = i
		i = p
	}
	h[i] = e
	e.w.dlIdx = i
}

func (h deadlineHeap) down(i0 int) bool {
	n, i := len(h), i0
	e := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && dlLess(&h[r], &h[l]) {
			j = r
		}
		if !dlLess(&h[j], &e) {
			break
		}
		h[i] = h[j]
		h[i].w.dlIdx = i
		i = j
	}
	h[i] = e
	e.w.dlIdx = i
	return i > i0
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
	*h = append(*h, flowEntry{k, seq, f})
	h.up(len(*h) - 1)
}

// set changes the key of the entry at i and restores the heap.
func (h flowHeap) set(i int, k Key, seq uint64) {
	h[i].key, h[i].seq = k, seq
	h.fix(i)
}

func (h *flowHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	f := s[i].f
	if i != n {
		s[i] = s[n]
		s[i].f.bandIdx = i
	}
	s[n] = flowEntry{}
	*h = s[:n]
	if i != n {
		h.fix(i)
	}
	f.bandIdx = -1
}

func (h flowHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h flowHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !flowLess(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		h[i].f.bandIdx = i
		i = p
	}
	h[i] = e
	e.f.bandIdx = i
}

func (h flowHeap) down(i0 int) bool {
	n, i := len(h), i0
	e := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && flowLess(&h[r], &h[l]) {
			j = r
		}
		if !flowLess(&h[j], &e) {
			break
		}
		h[i] = h[j]
		h[i].f.bandIdx = i
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
