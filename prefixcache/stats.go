package prefixcache

// Stats is a snapshot of an Index's counters. Counters are read one after another while the
// index may be changing, so they are individually accurate but not mutually consistent.
type Stats struct {
	// Blocks is the number of (block, backend) pairs held, over all media.
	Blocks int64
	// Stale is the number of removed pairs still queued in CLOCK rings (not yet compacted).
	Stale int64
	// Entries is the number of table entries; with at most 64 backends, the number of distinct
	// (block, medium) keys held by anyone.
	Entries int64
	// Bytes is the memory allocated for tables and rings.
	Bytes int64
	// BudgetBlocks is the most pairs the byte budget allows (Options.MaxBytes / PairBytes).
	BudgetBlocks int64
	// Evictions counts pairs evicted by capacity or budget (not explicit removals).
	Evictions int64
	// Hits and Misses count Match's blocks: for each call, the longest prefix any backend
	// matched is a hit, the rest of the chain misses.
	Hits, Misses int64
	// Backends has one element per registered backend, in id order.
	Backends []BackendStats
}

// BackendStats describes one backend.
type BackendStats struct {
	ID        BackendID
	Name      string
	Blocks    int64 // pairs held
	Capacity  int   // blocks
	Evictions int64 // pairs evicted by capacity or budget
}

// Stats returns a snapshot of the index's counters. It allocates the Backends slice, and is
// O(Shards + backends); it takes each lock briefly and is not meant for hot paths.
func (ix *Index) Stats() Stats {
	s := Stats{
		Bytes:        ix.bytes.Load(),
		BudgetBlocks: ix.maxPairs,
		Evictions:    ix.evictions.Load(),
	}
	for i := range ix.shards {
		sh := &ix.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		sh.lock()
		if t := sh.tab.Load(); t != nil {
			s.Entries += int64(t.count)
		}
		sh.unlock()
	}
	for i := range int(ix.bound.Load()) {
		b := ix.backends[i].Load()
		if b == nil {
			continue
		}
		b.mu.Lock()
		if !b.removed {
			s.Blocks += int64(b.live)
			s.Stale += int64(b.stale)
			s.Backends = append(s.Backends, BackendStats{
				ID: b.id, Name: b.name, Blocks: int64(b.live), Capacity: b.capacity, Evictions: b.evictions,
			})
		}
		b.mu.Unlock()
	}
	return s
}
