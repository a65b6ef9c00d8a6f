package prefixcache

import "math/bits"

// engMap is the exact mode's map between an engine's block hashes and usher's, for one
// (backend, medium): the names under which the engine knows the blocks it holds there. It is
// written and read only under its backend's mutex.
//
// It holds two kinds of entry in the same tables. A forward entry, keyed by fwdKey(engine
// hash), holds the usher hash of the block the engine hash names: ApplyStored finds a parent
// and ApplyRemovedFrom a removed block through it. Reverse entries list a block's names: entry
// revKey(block, k) holds the forward key of the block's k-th name, for k = 0, 1, ... with no
// gap, so that a block leaving the index (evicted by CLOCK or the byte budget, removed, or
// cleared) takes exactly its own names with it, and a BlockRemoved knows whether the block
// still has another name (two engine hashes name one usher block when they differ only in
// what usher does not hash, e.g. vLLM's cache salt or multimodal inputs). A reverse entry's
// value also carries nextBit when entry k+1 exists, so that walking a list (for a block's only
// name, the common case, one probe) never ends on a probe that misses. Every name belongs to
// a block the medium holds, so the map is bounded by what bounds the blocks; it is emptied
// only when the backend is cleared.
//
// Each table is pointer-free (two integers a slot), so the garbage collector never scans it,
// and the map's memory is exactly its slots, which the index's byte counter includes. The
// entries are split over engParts tables by the key's low bits, so that a table that grows
// rebuilds a sixteenth of the map, not the whole of it, while the backend's mutex is held.
// The tables start at sizes spread evenly over one growth step (engFirstSlots), so they grow
// at different times: the map's load factor then stays near its mean over a step (about 0.62,
// some 52 bytes per single-named block) at every size, instead of swinging between 1/2 and 3/4
// as one table's does (64 to 43 bytes per block), and no two tables rebuild at once.
type engMap struct {
	parts  [engParts]engTable
	names  int   // forward entries
	blocks int   // blocks with at least one name (first reverse entries)
	copies int   // entries counting a name's extra copies
	bytes  int64 // bytes allocated to the tables
}

const engParts = 16

// engFirstSlots[p] is the first size of table p: minTableSlots·1.5^(p/engParts), rounded.
var engFirstSlots = [engParts]int{32, 33, 34, 35, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47}

// engSlotBytes is the size of an engSlot.
const engSlotBytes = 16

type engSlot struct{ key, val uint64 }

// engTable is a linear-probing table with backward-shift deletion, like a shard's table but
// private to one writer: plain loads and stores. The home slot of key k is the high word of
// k·len(slots); key 0 marks an empty slot.
type engTable struct {
	slots []engSlot
	count int
}

// Key derivation: murmur3's finaliser over the input XORed with a domain constant, so that
// forward and reverse keys (and the shard keys of the block tables) never share structure.
// Forward keys have nextBit cleared. The one input per domain that would give 0 is folded
// onto 1<<63 (a collision as likely as any other 64-bit one).
const (
	fwdK    = 0x6a09e667f3bcc909
	revK    = 0xbb67ae8584caa73b
	revStep = 0x3c6ef372fe94f82b
	copyK   = 0xa54ff53a5f1d36f1
)

func engKey(x uint64) uint64 {
	if k := baseKey(x); k != 0 {
		return k
	}
	return 1 << 63
}

// nextBit marks, in a reverse entry's value, that the block has a further name. Forward keys
// never have it set, so that a reverse entry's value is a forward key and the bit.
const nextBit = 1 << 40

func fwdKey(engineHash uint64) uint64 {
	if k := baseKey(engineHash^fwdK) &^ nextBit; k != 0 {
		return k
	}
	return 1 << 63
}

func revKey(u BlockHash, k int) uint64 { return engKey(uint64(u) ^ revK + uint64(k)*revStep) }

// copyKey is the key of the entry counting the extra copies of the block forward key fk names.
func copyKey(fk uint64) uint64 { return engKey(fk ^ copyK) }

// locate returns the table and slot index of key k; ok is false if k is absent.
func (m *engMap) locate(k uint64) (t *engTable, i uint64, ok bool) {
	t = &m.parts[k&(engParts-1)]
	n := uint64(len(t.slots))
	if n == 0 {
		return t, 0, false
	}
	i, _ = bits.Mul64(k, n)
	for {
		switch t.slots[i].key {
		case k:
			return t, i, true
		case 0:
			return t, i, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get returns the value stored under k.
func (m *engMap) get(k uint64) (uint64, bool) {
	if t, i, ok := m.locate(k); ok {
		return t.slots[i].val, true
	}
	return 0, false
}

// claim returns k's slot, adding an entry with value 0 if k is absent (added). The pointer is
// valid until the map next changes.
func (m *engMap) claim(k uint64) (s *engSlot, added bool) {
	p := k & (engParts - 1)
	t := &m.parts[p]
	if uint64(t.count+1)*maxLoadDen > uint64(len(t.slots))*maxLoadNum {
		m.grow(t, p)
	}
	n := uint64(len(t.slots))
	i, _ := bits.Mul64(k, n)
	for {
		s := &t.slots[i]
		switch s.key {
		case k:
			return s, false
		case 0:
			s.key = k
			t.count++
			return s, true
		}
		if i++; i == n {
			i = 0
		}
	}
}

// grow rebuilds t, table p, half as large again (at first, engFirstSlots[p]).
func (m *engMap) grow(t *engTable, p uint64) {
	old := t.slots
	size := len(old) + len(old)/2
	if size == 0 {
		size = engFirstSlots[p]
	}
	t.slots = make([]engSlot, size)
	m.bytes += int64(size-len(old)) * engSlotBytes
	n := uint64(size)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i, _ := bits.Mul64(s.key, n)
		for t.slots[i].key != 0 {
			if i++; i == n {
				i = 0
			}
		}
		t.slots[i] = s
	}
}

// reset empties the map, keeping its tables for the names to come.
func (m *engMap) reset() {
	for p := range m.parts {
		t := &m.parts[p]
		clear(t.slots)
		t.count = 0
	}
	m.names, m.blocks, m.copies = 0, 0, 0
}

// delAt empties slot hole by backward-shift deletion (see table.del).
func (t *engTable) delAt(hole uint64) {
	slots := t.slots
	n := uint64(len(slots))
	for j := hole; ; {
		if j++; j == n {
			j = 0
		}
		k := slots[j].key
		if k == 0 {
			break
		}
		h, _ := bits.Mul64(k, n)
		fromHome, fromHole := j-h, j-hole
		if j < h {
			fromHome += n
		}
		if j < hole {
			fromHole += n
		}
		if fromHome < fromHole {
			continue
		}
		slots[hole] = slots[j]
		hole = j
	}
	slots[hole] = engSlot{}
	t.count--
}

// lookup returns the usher hash of the block engine hash e names.
func (m *engMap) lookup(e uint64) (BlockHash, bool) {
	u, ok := m.get(fwdKey(e))
	return BlockHash(u), ok
}

// add records that engine hash e names block u. A name already given to u counts one more
// copy of the block: an engine may hold several (vLLM does, when two requests compute the same
// block at once) and reports each stored and each removed, so the name lasts until the last
// copy's removal. A name that named another block is moved to u (the other block keeps its
// pair, as one inserted by Insert does). O(names of u) probes: two for a block's first name.
func (m *engMap) add(e uint64, u BlockHash) {
	fk := fwdKey(e)
	s, added := m.claim(fk)
	old := BlockHash(s.val)
	s.val = uint64(u)
	if added {
		m.names++
	} else if old == u {
		c, added := m.claim(copyKey(fk))
		if added {
			m.copies++
		}
		c.val++
		return
	} else {
		m.forgetCopies(fk)
		m.unlink(old, fk)
	}
	// Append fk to u's list: claim entry 0, or walk to the last entry, mark it, and claim the
	// one after it.
	for k := 0; ; k++ {
		r, added := m.claim(revKey(u, k))
		if added {
			r.val = fk
			if k == 0 {
				m.blocks++
			}
			return
		}
		if r.val&nextBit == 0 {
			r.val |= nextBit
		}
	}
}

// remove forgets one copy of the block engine hash e names, and the name with its last copy.
// It returns the block e named and whether that block has no name left; ok is false if e was
// unknown. O(names of the block) probes: three for a block's only name.
func (m *engMap) remove(e uint64) (u BlockHash, last, ok bool) {
	fk := fwdKey(e)
	t, i, ok := m.locate(fk)
	if !ok {
		return 0, false, false
	}
	u = BlockHash(t.slots[i].val)
	if ct, ci, ok := m.locate(copyKey(fk)); ok {
		if ct.slots[ci].val--; ct.slots[ci].val == 0 {
			ct.delAt(ci)
			m.copies--
		}
		return u, false, true
	}
	t.delAt(i)
	m.names--
	return u, m.unlink(u, fk) == 0, true
}

// count returns how many names block u has. O(names of u) probes.
func (m *engMap) count(u BlockHash) int {
	for k := 0; ; k++ {
		t, i, ok := m.locate(revKey(u, k))
		if !ok {
			return k
		}
		if t.slots[i].val&nextBit == 0 {
			return k + 1
		}
	}
}

// unlink removes forward key fk from u's list of names, moving the last name into its place,
// and returns how many names u has left.
func (m *engMap) unlink(u BlockHash, fk uint64) int {
	var at, last, before *engSlot
	var lastT *engTable
	var lastI uint64
	n := 0
	for {
		t, i, ok := m.locate(revKey(u, n))
		if !ok {
			break
		}
		s := &t.slots[i]
		n++
		if s.val&^nextBit == fk {
			at = s
		}
		before, last, lastT, lastI = last, s, t, i
		if s.val&nextBit == 0 {
			break
		}
	}
	if at == nil { // not listed: only after a 64-bit key collision
		return n
	}
	at.val = last.val&^nextBit | at.val&nextBit
	if before != nil {
		before.val &^= nextBit
	}
	lastT.delAt(lastI)
	if n == 1 {
		m.blocks--
	}
	return n - 1
}

// forgetCopies deletes the count of extra copies of the block forward key fk names, if any.
func (m *engMap) forgetCopies(fk uint64) {
	if t, i, ok := m.locate(copyKey(fk)); ok {
		t.delAt(i)
		m.copies--
	}
}

// drop forgets every name of block u, with its copies, and returns how many names there were.
// O(names of u) probes: three for a block with one name.
func (m *engMap) drop(u BlockHash) int {
	dropped := 0
	for k := 0; ; k++ {
		t, i, ok := m.locate(revKey(u, k))
		if !ok {
			return dropped
		}
		if k == 0 {
			m.blocks--
		}
		v := t.slots[i].val
		t.delAt(i)
		if t, i, ok := m.locate(v &^ nextBit); ok && BlockHash(t.slots[i].val) == u {
			t.delAt(i)
			m.forgetCopies(v &^ nextBit)
			m.names--
			dropped++
		}
		if v&nextBit == 0 {
			return dropped
		}
	}
}
