package prefixcache

// A pairOp is an update of one (block, backend) pair in a table entry, applied under the
// entry's shard lock by applyLocked. Every op returns the pair's state before it.
type pairOp uint8

const (
	opTouch     pairOp = iota // hold the block; set the reference bit of a pair already held
	opUnhold                  // a held pair turns stale
	opVisit                   // the CLOCK hand: clear a reference bit, evict, or drop a stale pair
	opDropStale               // drop the pair if stale
	opClear                   // forget the pair entirely
)

// applyBatch applies op for the backend whose bit is bit to the table entry of every key in
// keys, storing each pair's previous state in out. It first touches every key's home slot
// without locking, so the round's cache misses overlap instead of queuing behind lock
// instructions, then takes each shard's lock once and applies that shard's keys in their
// order in keys (so a key repeated in one round behaves as it would one at a time).
// len(keys) <= batch.
func (ix *Index) applyBatch(op pairOp, keys []uint64, bit uint64, out []uint8) {
	for _, k := range keys {
		if t := ix.shards[k&ix.mask].tab.Load(); t != nil {
			_ = t.touchHome(k)
		}
	}
	if len(keys) == 1 {
		out[0] = ix.apply1(op, keys[0], bit)
		return
	}
	if ix.mask == 0 {
		sh := &ix.shards[0]
		sh.lock()
		t := ix.tableLocked(sh, op, len(keys))
		for j, k := range keys {
			out[j] = ix.applyLocked(t, op, k, bit)
		}
		sh.unlock()
		return
	}
	// A stable counting sort of the round by shard.
	var start [257]uint16
	for _, k := range keys {
		start[k&ix.mask+1]++
	}
	shards := len(ix.shards)
	for s := 1; s <= shards; s++ {
		start[s] += start[s-1]
	}
	var order [batch]uint8
	next := start
	for j, k := range keys {
		s := k & ix.mask
		order[next[s]] = uint8(j)
		next[s]++
	}
	for s := range shards {
		lo, hi := start[s], start[s+1]
		if lo == hi {
			continue
		}
		sh := &ix.shards[s]
		sh.lock()
		t := ix.tableLocked(sh, op, int(hi-lo))
		for _, j := range order[lo:hi] {
			out[j] = ix.applyLocked(t, op, keys[j], bit)
		}
		sh.unlock()
	}
}

// apply1 applies op to one pair, locking its shard.
func (ix *Index) apply1(op pairOp, k, bit uint64) uint8 {
	sh := ix.lockShard(k)
	st := ix.applyLocked(ix.tableLocked(sh, op, 1), op, k, bit)
	sh.unlock()
	return st
}

// tableLocked returns the table that n applications of op will use in sh, whose lock is
// held: for opTouch one with room for n more entries, otherwise the current one (maybe nil).
func (ix *Index) tableLocked(sh *shard, op pairOp, n int) *table {
	if op == opTouch {
		return ix.reserveLocked(sh, n)
	}
	return sh.tab.Load()
}

// applyLocked applies op to the pair (k, bit) in t, the table of k's shard, whose lock is
// held (see tableLocked).
func (ix *Index) applyLocked(t *table, op pairOp, k, bit uint64) uint8 {
	var i int
	var hold, aux uint64
	if op == opTouch {
		var added bool
		if i, added = t.findOrAdd(k); !added {
			hold, aux = t.slots[i].hold, t.slots[i].aux
		}
	} else if t == nil {
		return pairAbsent
	} else if i = t.find(k); i < 0 {
		return pairAbsent
	} else {
		hold, aux = t.slots[i].hold, t.slots[i].aux
	}
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
	case opTouch:
		// A new pair starts unreferenced; a held or stale one is (again) held and referenced.
		if st != pairAbsent {
			aux |= bit
		}
		hold |= bit
	case opUnhold:
		if st == pairLive || st == pairLiveRef {
			hold &^= bit
			aux |= bit
		}
	case opVisit:
		switch st {
		case pairLiveRef:
			aux &^= bit
		case pairLive:
			hold &^= bit
		case pairStale:
			aux &^= bit
		default:
			panic("prefixcache: internal error: queued pair missing from its table")
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
