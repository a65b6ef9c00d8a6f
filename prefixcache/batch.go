package prefixcache

import (
	"math/bits"
	"sync/atomic"
)

// A writer updates pairs in rounds of up to batch keys. Each round first touches every key's
// home slot without locking, so that the round's cache misses overlap instead of queuing one
// by one behind lock instructions, then takes each shard's lock once for all of the round's
// keys in that shard. The two hot updates, Insert's touch and the CLOCK hand's visit, have
// loops of their own (touchBatch, visitBatch); the others go through applyBatch.

// round is one backend's scratch space for a round of pair updates: the round's table keys,
// the pairs' previous states and the keys' order by shard. It is used only under the
// backend's mu, so nothing in it is zeroed per round. states and perm are indexed by a uint8
// and keys by one masked to batch-1, so their loops need no bounds checks.
type round struct {
	keys   [batch]uint64
	states [256]uint8
	order  shardOrder
}

// shardOrder is a round's keys in the order a writer applies them: grouped by shard, shards
// ascending, each shard's keys in their order in the round (so a key repeated in one round
// behaves as it would one at a time). Shard s's keys are keys[j] for j in
// perm[bound[s]:bound[s+1]].
type shardOrder struct {
	bound [257]uint8
	perm  [256]uint8
}

// A tally counts a round's pairs by previous state, one byte per state (a round has at most
// batch = 128 pairs), so that the loops under a shard's lock keep one counter, not four.
type tally uint64

// tallyOne[st] is a tally of one pair in state st.
var tallyOne = [4]tally{1, 1 << 8, 1 << 16, 1 << 24}

// of returns how many pairs of the tally were in state st.
func (c tally) of(st uint8) int { return int(c >> (8 * (st & 3)) & 0xff) }

// group touches the home slot of the first r keys of rd without locking and fills rd.order
// with their order by shard (a stable counting sort). It returns the number of shards.
// r <= batch. O(r + shards).
func (ix *Index) group(rd *round, r int) int {
	shards, mask := ix.shards, uint8(ix.mask)
	ns := len(shards)
	o := &rd.order
	clear(o.bound[:ns])
	for _, k := range rd.keys[:r] {
		s := uint8(k) & mask
		o.bound[s]++
		if t := shards[s].tab.Load(); t != nil {
			_ = t.touchHome(k)
		}
	}
	for s := 1; s < ns; s++ {
		o.bound[s] += o.bound[s-1]
	}
	o.bound[ns] = uint8(r)
	// Filled from the back, each bound[s] moves down from the end of shard s to its start.
	for j := r - 1; j >= 0; j-- {
		s := uint8(rd.keys[j&(batch-1)]) & mask
		o.bound[s]--
		o.perm[o.bound[s]] = uint8(j)
	}
	return ns
}

// touchBatch holds, for the backend whose bit is bit, the block of each of the first r table
// keys of rd: a new pair starts unreferenced, a held or stale one is (again) held and
// referenced. It stores each pair's previous state in rd.states and returns their tally.
// r <= batch; O(r) probes and one lock per shard with keys.
func (ix *Index) touchBatch(rd *round, r int, bit uint64) tally {
	var c tally
	ns := ix.group(rd, r)
	for s := range ns {
		lo, hi := rd.order.bound[s], rd.order.bound[s+1]
		if lo == hi {
			continue
		}
		sh := &ix.shards[s]
		sh.lock()
		c += ix.reserveLocked(sh, int(hi-lo)).touch(rd, lo, hi, bit)
		sh.unlock()
	}
	return c
}

// visitBatch moves the CLOCK hand of the backend whose bit is bit over the pairs of the
// first r table keys of rd: a referenced pair loses its reference bit, an unreferenced one is
// evicted, a stale one is dropped. It stores each pair's previous state in rd.states (absent,
// never for a queued pair, if its entry is missing) and returns their tally. r <= batch;
// O(r) probes and one lock per shard with keys.
func (ix *Index) visitBatch(rd *round, r int, bit uint64) tally {
	var c tally
	ns := ix.group(rd, r)
	for s := range ns {
		lo, hi := rd.order.bound[s], rd.order.bound[s+1]
		if lo == hi {
			continue
		}
		sh := &ix.shards[s]
		sh.lock()
		c += sh.tab.Load().visit(rd, lo, hi, bit)
		sh.unlock()
	}
	return c
}

// touch is touchBatch's update, in this table, of the pairs of rd's keys perm[lo:hi], for
// which it has room. Writer side.
func (t *table) touch(rd *round, lo, hi uint8, bit uint64) tally {
	slots := t.slots
	n := uint64(len(slots))
	var c tally
	claimed := 0
	for p := lo; p < hi; p++ {
		j := rd.order.perm[p]
		k := rd.keys[j&(batch-1)]
		i, _ := bits.Mul64(k, n)
		for {
			if key := slots[i].key; key == k || key == 0 {
				break
			}
			if i++; i == n {
				i = 0
			}
		}
		s := &slots[i]
		hold, aux := s.hold, s.aux
		if s.key == 0 {
			// Claimed: its words are its last occupant's, overwritten below.
			atomic.StoreUint64(&s.key, k)
			claimed++
			hold, aux = 0, 0
		}
		st := uint8(pairAbsent)
		if hold&bit != 0 {
			st = pairLive
		}
		if aux&bit != 0 {
			st |= 1 // pairLive becomes pairLiveRef, pairAbsent pairStale
		}
		rd.states[j] = st
		c += tallyOne[st&3]
		// Held from now on; referenced unless new.
		if h := hold | bit; s.hold != h {
			atomic.StoreUint64(&s.hold, h)
		}
		if a := aux | (hold|aux)&bit; s.aux != a {
			atomic.StoreUint64(&s.aux, a)
		}
	}
	t.count += claimed
	return c
}

// visit is visitBatch's update, in this table (nil if the shard has none), of the pairs of
// rd's keys perm[lo:hi]. Writer side.
func (t *table) visit(rd *round, lo, hi uint8, bit uint64) tally {
	var c tally
	if t == nil {
		for p := lo; p < hi; p++ {
			rd.states[rd.order.perm[p]] = pairAbsent
			c += tallyOne[pairAbsent]
		}
		return c
	}
	slots := t.slots
	n := uint64(len(slots))
	for p := lo; p < hi; p++ {
		j := rd.order.perm[p]
		k := rd.keys[j&(batch-1)]
		i, _ := bits.Mul64(k, n)
		for {
			if key := slots[i].key; key == k || key == 0 {
				break
			}
			if i++; i == n {
				i = 0
			}
		}
		s := &slots[i]
		if s.key == 0 {
			rd.states[j] = pairAbsent
			c += tallyOne[pairAbsent]
			continue
		}
		hold, aux := s.hold, s.aux
		st := uint8(pairStale)
		switch {
		case hold&bit != 0 && aux&bit != 0:
			st = pairLiveRef
			aux &^= bit
		case hold&bit != 0:
			st = pairLive
			hold &^= bit
		case aux&bit != 0:
			aux &^= bit
		default:
			panic("prefixcache: internal error: queued pair missing from its table")
		}
		rd.states[j] = st
		c += tallyOne[st&3]
		if hold|aux == 0 {
			t.del(int(i))
			continue
		}
		if s.hold != hold {
			atomic.StoreUint64(&s.hold, hold)
		}
		if s.aux != aux {
			atomic.StoreUint64(&s.aux, aux)
		}
	}
	return c
}

// A pairOp is one of the other updates of one (block, backend) pair in a table entry,
// applied under the entry's shard lock by applyLocked. Every op returns the pair's state
// before it.
type pairOp uint8

const (
	opUnhold    pairOp = iota // a held pair turns stale
	opDropStale               // drop the pair if stale
	opClear                   // forget the pair entirely
)

// applyBatch applies op for the backend whose bit is bit to the table entries of the first r
// keys of rd, storing each pair's previous state in rd.states, in a round as touchBatch does.
// r <= batch.
func (ix *Index) applyBatch(op pairOp, rd *round, r int, bit uint64) {
	ns := ix.group(rd, r)
	for s := range ns {
		lo, hi := rd.order.bound[s], rd.order.bound[s+1]
		if lo == hi {
			continue
		}
		sh := &ix.shards[s]
		sh.lock()
		t := sh.tab.Load()
		for _, j := range rd.order.perm[lo:hi] {
			rd.states[j] = applyLocked(t, op, rd.keys[j&(batch-1)], bit)
		}
		sh.unlock()
	}
}

// apply1 applies op to one pair, locking its shard.
func (ix *Index) apply1(op pairOp, k, bit uint64) uint8 {
	sh := ix.lockShard(k)
	st := applyLocked(sh.tab.Load(), op, k, bit)
	sh.unlock()
	return st
}

// applyLocked applies op to the pair (k, bit) in t, the table of k's shard (maybe nil), whose
// lock is held.
func applyLocked(t *table, op pairOp, k, bit uint64) uint8 {
	if t == nil {
		return pairAbsent
	}
	i := t.find(k)
	if i < 0 {
		return pairAbsent
	}
	hold, aux := t.slots[i].hold, t.slots[i].aux
	st := uint8(pairAbsent)
	switch {
	case hold&bit != 0 && aux&bit != 0:
		st = pairLiveRef
	case hold&bit != 0:
		st = pairLive
	case aux&bit != 0:
		st = pairStale
	}
	switch op {
	case opUnhold:
		if st == pairLive || st == pairLiveRef {
			hold &^= bit
			aux |= bit
		}
	case opDropStale:
		if st != pairStale {
			return st
		}
		aux &^= bit
	case opClear:
		hold &^= bit
		aux &^= bit
	}
	if hold == 0 && aux == 0 {
		t.del(i)
	} else {
		t.set(i, hold, aux)
	}
	return st
}
