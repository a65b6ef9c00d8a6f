package prefixcache

import (
	"math/bits"
	"sync/atomic"
)

// slot is one entry of a shard's open-addressing table: three plain integers, so a table is
// a single pointer-free allocation the garbage collector never scans.
//
// key is the mixed entry key (never 0; 0 marks an empty slot, whose hold and aux words are
// left as its last occupant had them: readers never read them, and the writer that claims the
// slot sets them). The entry describes one 64-id
// "word" of one block: bit j of hold is set when backend 64·word+j holds the block; bit j of aux
// is that pair's CLOCK reference bit while the bit in hold is set, and marks a stale pair
// (removed, but still queued in the backend's ring) while it is clear. See doc.go, "Memory
// layout".
type slot struct {
	key  uint64
	hold uint64
	aux  uint64
}

// slotBytes is the size of a slot.
const slotBytes = 24

// table is a linear-probing hash table with backward-shift deletion (no tombstones). Its size
// need not be a power of two: the home slot of key k is the high word of k·n ("fastrange"),
// which uses the key's high bits while the shard is chosen by its low bits.
//
// A table is written only by the writer holding its shard and read concurrently by lock-free
// readers that validate what they read with the shard's sequence counter. So every store a
// reader can observe is atomic and every read by a lock-free reader is an atomic load. A grown
// table is built privately (plain stores) and then published through shard.tab.
type table struct {
	slots []slot
	n     uint64 // len(slots)
	count int    // occupied slots; written only by the shard's writer
}

func newTable(n int) *table {
	return &table{slots: make([]slot, n), n: uint64(n)}
}

func (t *table) home(k uint64) uint64 {
	hi, _ := bits.Mul64(k, t.n)
	return hi
}

// readHold returns the hold word stored under k, or 0. It may run concurrently with a writer;
// the caller validates the result with the shard's sequence counter. It never loops more than
// n times, even over a table a writer is rearranging.
func (t *table) readHold(k uint64) uint64 {
	slots := t.slots // locals: the atomic loads would otherwise make every pass reload t
	n := uint64(len(slots))
	i, _ := bits.Mul64(k, n)
	for probes := n; probes > 0; probes-- {
		s := &slots[i]
		switch atomic.LoadUint64(&s.key) {
		case k:
			return atomic.LoadUint64(&s.hold)
		case 0:
			return 0
		}
		if i++; i == n {
			i = 0
		}
	}
	return 0
}

// readBits is readHold returning the aux word too.
func (t *table) readBits(k uint64) (hold, aux uint64) {
	i := t.home(k)
	for probes := t.n; probes > 0; probes-- {
		s := &t.slots[i]
		switch atomic.LoadUint64(&s.key) {
		case k:
			return atomic.LoadUint64(&s.hold), atomic.LoadUint64(&s.aux)
		case 0:
			return 0, 0
		}
		if i++; i == t.n {
			i = 0
		}
	}
	return 0, 0
}

// touchHome loads k's home slot, so that a later update under the shard's lock finds it in
// cache: a prefetch, issued before any lock is taken so that the cache misses of a whole batch
// overlap instead of queuing one by one behind lock instructions.
func (t *table) touchHome(k uint64) uint64 {
	return atomic.LoadUint64(&t.slots[t.home(k)].key)
}

// find returns the index of k's slot, or -1. Writer side.
func (t *table) find(k uint64) int {
	slots := t.slots
	n := uint64(len(slots))
	i, _ := bits.Mul64(k, n)
	for {
		switch slots[i].key {
		case k:
			return int(i)
		case 0:
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// findOrAdd returns the index of k's slot and false, or, if k is absent, claims a free slot for
// it and returns its index and true; a claimed slot's hold and aux words are whatever its last
// occupant left there (the caller sets them, see del). The caller guarantees a free slot exists
// (see Index.reserveLocked). Writer side.
func (t *table) findOrAdd(k uint64) (int, bool) {
	slots := t.slots
	n := uint64(len(slots))
	i, _ := bits.Mul64(k, n)
	for {
		switch slots[i].key {
		case k:
			return int(i), false
		case 0:
			atomic.StoreUint64(&slots[i].key, k)
			t.count++
			return int(i), true
		}
		if i++; i == n {
			i = 0
		}
	}
}

// set stores a slot's words, skipping stores that change nothing. Writer side.
func (t *table) set(i int, hold, aux uint64) {
	s := &t.slots[i]
	if s.hold != hold {
		atomic.StoreUint64(&s.hold, hold)
	}
	if s.aux != aux {
		atomic.StoreUint64(&s.aux, aux)
	}
}

// del empties slot i by backward-shift deletion: later members of the probe run move back
// so that no lookup ever needs a tombstone. Every store is atomic, and so costs a locked
// instruction on amd64, so it stores only what changes: a moved entry's hold and aux words
// only where they differ from those already in its new slot (entries held by the same
// backends often share them), and of the slot left empty only its key (readers never look
// past an empty key, and the writer that claims the slot sets the rest). O(the probe run
// after i). Writer side.
func (t *table) del(i int) {
	slots := t.slots // locals: the atomic stores would otherwise make every pass reload t
	n := uint64(len(slots))
	hole := uint64(i)
	j := hole + 1
	// Until the scan passes the end of the table, hole < j < n, and the entry at j stays
	// unless the hole lies on its probe path, i.e. unless its home h is in (hole, j]; h > j
	// means its probe path wrapped past the end, through the hole. One unsigned comparison
	// tests both.
	for ; j < n; j++ {
		s := &slots[j]
		k := s.key
		if k == 0 {
			t.vacate(hole)
			return
		}
		if h, _ := bits.Mul64(k, n); h-hole-1 < j-hole {
			continue
		}
		move(&slots[hole], s)
		hole = j
	}
	// The same past the end, with cyclic distances.
	for j = 0; ; {
		s := &slots[j]
		k := s.key
		if k == 0 {
			break
		}
		// The entry at j stays unless the hole lies on its probe path, i.e. unless its home is
		// at least as far behind j as the hole is.
		h, _ := bits.Mul64(k, n)
		fromHome, fromHole := j-h, j-hole
		if j < h {
			fromHome += n
		}
		if j < hole {
			fromHole += n
		}
		if fromHome >= fromHole {
			move(&slots[hole], s)
			hole = j
		}
		if j++; j == n {
			j = 0
		}
	}
	t.vacate(hole)
}

// move moves the entry s into the empty slot d, as del does. Writer side.
func move(d, s *slot) {
	atomic.StoreUint64(&d.key, s.key)
	if d.hold != s.hold {
		atomic.StoreUint64(&d.hold, s.hold)
	}
	if d.aux != s.aux {
		atomic.StoreUint64(&d.aux, s.aux)
	}
}

// vacate ends del: slot hole is left empty.
func (t *table) vacate(hole uint64) {
	atomic.StoreUint64(&t.slots[hole].key, 0)
	t.count--
}

// rehashInto copies every entry of t into the empty table u, which no reader can see yet,
// so plain stores are enough.
func (t *table) rehashInto(u *table) {
	for _, s := range t.slots {
		if s.key == 0 {
			continue
		}
		i := u.home(s.key)
		for u.slots[i].key != 0 {
			if i++; i == u.n {
				i = 0
			}
		}
		u.slots[i] = s
		u.count++
	}
}

// Load factor bounds: a table grows by half when an insert would push it past 3/4 full, so
// its load stays between 1/2 and 3/4 (expected probes: under 2.5 for a hit, 8.5 for a miss).
const (
	minTableSlots = 32
	maxLoadNum    = 3
	maxLoadDen    = 4
)
