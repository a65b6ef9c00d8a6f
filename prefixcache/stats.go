package prefixcache

// Stats is a snapshot of an Index's counters. Counters are read one after another while the
// index may be changing, so they are individually accurate but not mutually consistent.
type Stats struct {
	// Blocks is the number of (block, backend, medium) pairs held, over all media.
	Blocks int64
	// Stale is the number of removed pairs still queued in CLOCK rings (not yet compacted).
	Stale int64
	// Entries is the number of table entries; with at most 64 backends, the number of distinct
	// (block, medium) keys held by anyone.
	Entries int64
	// EngineHashes is the number of engine block hashes the exact mode remembers, over all
	// backends and media: one per block an engine reported stored in a medium and has not
	// removed, while the index holds that block there.
	EngineHashes int64
	// Bytes is the memory allocated for the block tables, the CLOCK rings and the exact mode's
	// engine→usher maps: nearly all of the index's memory (TestBytesPerBlock and
	// TestTieredExactMode compare it with the live heap).
	Bytes int64
	// BudgetBlocks is the most pairs the byte budget allows when no engine hash is remembered
	// (Options.MaxBytes / PairBytes).
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
	ID        HolderID
	Name      string
	Blocks    int64 // pairs held, over all media
	Capacity  int   // GPU capacity, blocks
	Evictions int64 // pairs evicted by capacity or budget, over all media
	// Media describes each medium of the backend, indexed by Medium.
	Media [NumMedia]MediumStats
}

// MediumStats describes one medium of a backend.
type MediumStats struct {
	Blocks       int64 // pairs held
	Capacity     int   // blocks; 0 when bounded only by the byte budget
	Evictions    int64 // pairs evicted by capacity or budget
	EngineHashes int64 // engine hashes remembered (exact mode)
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
			bs := BackendStats{ID: b.id, Name: b.name}
			for m := range NumMedia {
				t := &b.tiers[m]
				ms := MediumStats{Blocks: int64(t.live), Capacity: t.capacity, Evictions: t.evictions}
				if t.capacity == noLimit {
					ms.Capacity = 0
				}
				if t.eng != nil {
					ms.EngineHashes = int64(t.eng.names)
				}
				bs.Media[m] = ms
				bs.Blocks += ms.Blocks
				bs.Evictions += ms.Evictions
				s.Stale += int64(t.stale)
				s.EngineHashes += ms.EngineHashes
			}
			bs.Capacity = bs.Media[GPU].Capacity
			s.Blocks += bs.Blocks
			s.Backends = append(s.Backends, bs)
		}
		b.mu.Unlock()
	}
	return s
}
