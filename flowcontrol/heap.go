package flowcontrol

// Four small intrusive binary heaps. Each element carries its own index so that removal
// from the middle (cancellation, expiry of a non-head request, a flow emptied) costs
// O(log n). They are written out per type rather than through container/heap or generics:
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

// deadlineLess orders waiting requests by deadline, then enqueue sequence.
func deadlineLess(a, b *waiter) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.seq < b.seq
}

type deadlineHeap []*waiter

func (h *deadlineHeap) push(w *waiter) {
	*h = append(*h, w)
	w.dlIdx = len(*h) - 1
	h.up(w.dlIdx)
}

func (h *deadlineHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	w := s[i]
	if i != n {
		s[i] = s[n]
		s[i].dlIdx = i
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	w.dlIdx = -1
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !deadlineLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].dlIdx, h[p].dlIdx = i, p
		i = p
	}
}

func (h deadlineHeap) down(i int) bool {
	i0, n := i, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && deadlineLess(h[r], h[l]) {
			j = r
		}
		if !deadlineLess(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].dlIdx, h[j].dlIdx = i, j
		i = j
	}
	return i > i0
}

// flowLess orders non-empty flows within a band: flow key, then the enqueue sequence of
// the flow's head request.
func flowLess(a, b *flow) bool {
	if a.key != b.key {
		return a.key.Less(b.key)
	}
	return a.headSeq < b.headSeq
}

type flowHeap []*flow

func (h *flowHeap) push(f *flow) {
	*h = append(*h, f)
	f.bandIdx = len(*h) - 1
	h.up(f.bandIdx)
}

func (h *flowHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	f := s[i]
	if i != n {
		s[i] = s[n]
		s[i].bandIdx = i
	}
	s[n] = nil
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
	for i > 0 {
		p := (i - 1) / 2
		if !flowLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].bandIdx, h[p].bandIdx = i, p
		i = p
	}
}

func (h flowHeap) down(i int) bool {
	i0, n := i, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && flowLess(h[r], h[l]) {
			j = r
		}
		if !flowLess(h[j], h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].bandIdx, h[j].bandIdx = i, j
		i = j
	}
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
