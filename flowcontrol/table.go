package flowcontrol

import "hash/maphash"

// flowTable is a band's index of its flows by FlowID: an open-addressing hash table with
// linear probing whose slots hold each flow's hash next to its pointer. A lookup reads one
// slot, usually one cache line, and compares the id only in the flow record, which the
// caller reads next anyway; a Go map of 100,000 string keys costs two misses (its control
// word and its slot) before that. The hash is kept in the flow too, so that removal and
// growth never hash a string again.
//
// Removal shifts the following slots of the probe run back, so there are no tombstones and
// a lookup stops at the first empty slot. The table doubles when it is 3/4 full and never
// shrinks: its size is that of the most flows the band has held at once.
//
// Not safe for concurrent use; the queue guards it with its lock.
type flowTable struct {
	slots []flowSlot // len is a power of two, or 0
	n     int
}

type flowSlot struct {
	hash uint64
	f    *flow // nil: empty
}

// minTableSlots is the size of a table's first allocation.
const minTableSlots = 16

// flowHash hashes id with seed.
func flowHash(seed maphash.Seed, id FlowID) uint64 { return maphash.String(seed, string(id)) }

// get returns the flow of id, whose hash is h, or nil. O(1) expected.
func (t *flowTable) get(id FlowID, h uint64) *flow {
	if len(t.slots) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.f == nil {
			return nil
		}
		if s.hash == h && s.f.st.ID == id {
			return s.f
		}
	}
}

// add inserts f, whose id is not in the table and whose hash is f.hash. O(1) amortised.
func (t *flowTable) add(f *flow) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.put(f)
	t.n++
}

func (t *flowTable) put(f *flow) {
	mask := uint64(len(t.slots) - 1)
	i := f.hash & mask
	for t.slots[i].f != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = flowSlot{f.hash, f}
}

func (t *flowTable) grow() {
	old := t.slots
	t.slots = make([]flowSlot, max(2*len(old), minTableSlots))
	for _, s := range old {
		if s.f != nil {
			t.put(s.f)
		}
	}
}

// remove takes out f, which is in the table. O(1) expected.
func (t *flowTable) remove(f *flow) {
	mask := uint64(len(t.slots) - 1)
	i := f.hash & mask
	for t.slots[i].f != f {
		i = (i + 1) & mask
	}
	// Backward shift: move up each later slot of the run whose home is not in (i, j].
	for j := (i + 1) & mask; t.slots[j].f != nil; j = (j + 1) & mask {
		home := t.slots[j].hash & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = flowSlot{}
	t.n--
}
