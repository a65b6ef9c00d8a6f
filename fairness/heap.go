package fairness

import (
	"math"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/rekey"
)

// node is a flow (or, in a Hierarchy, a tenant) that a FlowPicker policy orders itself.
// It holds a copy of the flow's state as of the flow's latest event: the queue re-keys a
// flow only at its own events or when its key's validity ends, and between two events of
// a flow its state — including the head request, which stays queued — does not change,
// so the copy is exact whenever it is used.
type node struct {
	st    flowcontrol.FlowState
	key   flowcontrol.Key
	seq   uint64      // insertion order, the last tie-break
	rekey rekey.Timer // when the key must be recomputed
	idx   [2]int32

	parent *node    // a session's tenant (Hierarchy)
	kids   nodeHeap // a tenant's non-empty sessions (Hierarchy)
	first  bool     // the flow is at its first turn (BoundedWait)
	hint   int32    // the flow's slot in the inner policy's table, if it says (BoundedWait over Gittins)
}

func (n *node) reset() {
	kids := n.kids.a[:0]
	*n = node{idx: [2]int32{-1, -1}}
	n.kids.a = kids
}

func nodeLess(a, b *node) bool {
	if a.key != b.key {
		return a.key.Less(b.key)
	}
	return a.seq < b.seq
}

// nodeHeap is an intrusive binary min-heap of nodes by (key, seq); slot says which of a
// node's two heap positions it uses, so a node can sit in two heaps at once. Re-key times go
// in a rekey.Timers, on the time-ordered heap the queue uses; this order, by a
// Key, moves nodes in place, which that heap (with lazy removal) does not.
type nodeHeap struct {
	a    []*node
	slot uint8
}

func (h *nodeHeap) len() int { return len(h.a) }

func (h *nodeHeap) top() *node { return h.a[0] }

func (h *nodeHeap) has(n *node) bool { return n.idx[h.slot] >= 0 }

func (h *nodeHeap) push(n *node) {
	h.a = append(h.a, n)
	n.idx[h.slot] = int32(len(h.a) - 1)
	h.up(len(h.a) - 1)
}

// init restores the order after any number of keys changed. O(n).
func (h *nodeHeap) init() {
	for i := len(h.a)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// fix restores the order after n's key changed, pushing n if it is absent. O(log n).
func (h *nodeHeap) fix(n *node) {
	i := int(n.idx[h.slot])
	if i < 0 {
		h.push(n)
		return
	}
	if !h.down(i) {
		h.up(i)
	}
}

// remove takes n out if it is present. O(log n).
func (h *nodeHeap) remove(n *node) {
	i := int(n.idx[h.slot])
	if i < 0 {
		return
	}
	last := len(h.a) - 1
	if i != last {
		h.a[i] = h.a[last]
		h.a[i].idx[h.slot] = int32(i)
	}
	h.a[last] = nil
	h.a = h.a[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
	n.idx[h.slot] = -1
}

func (h *nodeHeap) swap(i, j int) {
	a := h.a
	a[i], a[j] = a[j], a[i]
	a[i].idx[h.slot], a[j].idx[h.slot] = int32(i), int32(j)
}

func (h *nodeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !nodeLess(h.a[i], h.a[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *nodeHeap) down(i int) bool {
	i0, n := i, len(h.a)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && nodeLess(h.a[r], h.a[l]) {
			j = r
		}
		if !nodeLess(h.a[j], h.a[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// nodePool recycles nodes so that steady-state picking does not allocate.
type nodePool struct{ free []*node }

func (p *nodePool) get() *node {
	if n := len(p.free); n > 0 {
		x := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return x
	}
	x := &node{}
	x.reset()
	return x
}

func (p *nodePool) put(x *node) {
	x.reset()
	if len(p.free) < 1<<12 {
		p.free = append(p.free, x)
	}
}

// sanitize maps a NaN key value to +Inf, as the queue does, so the order is a strict weak
// order.
func sanitizeKey(k flowcontrol.Key) flowcontrol.Key {
	if k.Value != k.Value {
		k.Value = math.Inf(1)
	}
	return k
}
