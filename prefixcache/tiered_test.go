package prefixcache

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestTieredExactMode feeds the index the KV events of a toy engine with a small GPU cache
// and a CPU offload tier sixteen times larger, and checks after every request that the index
// mirrors the engine exactly in both media: every prompt's matched prefix on the GPU and on
// the CPU, the blocks held and the engine hashes remembered per medium. The GPU prefixes the
// engine holds (its system prompts above all) must match whatever the CPU traffic, and
// removals of blocks stored thousands of events earlier must be applied.
func TestTieredExactMode(t *testing.T) {
	const blockSize, gpuBlocks, cpuBlocks = 4, 64, 1024
	for _, tc := range []struct {
		name        string
		cpuCapacity int // the index's CPU capacity; 0: bounded by the byte budget alone
	}{{"cpu-capacity", cpuBlocks}, {"cpu-unbounded", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			requests := 3000
			if testing.Short() || raceEnabled {
				requests = 800
			}
			r := rand.New(rand.NewPCG(13, 14))
			prompts := toyPrompts(r, 400, blockSize, 24, 6)
			eng := newToyEngine(3, blockSize, gpuBlocks, cpuBlocks)
			ix := mustNew(t, Options{Shards: 4})
			id := mustAdd(t, ix, "pod-0", gpuBlocks)
			if err := ix.SetMediumCapacity(id, CPU, tc.cpuCapacity); err != nil {
				t.Fatal(err)
			}
			stored := map[uint64]int{} // engine hash (GPU or CPU) → event number when stored
			events, oldest := 0, 0
			var evs []toyEvent
			var dst []int32
			for req := range requests {
				evs = eng.serve(prompts[r.IntN(len(prompts))], evs[:0])
				for _, ev := range evs {
					if err := ev.apply(ix, id); err != nil {
						t.Fatalf("request %d: applying %+v: %v", req, ev, err)
					}
					events++
					if ev.stored != nil {
						for _, h := range ev.stored.EngineHashes {
							stored[h^uint64(ParseMedium(ev.stored.Medium))<<63] = events
						}
					}
					for _, h := range ev.removed {
						oldest = max(oldest, events-stored[h^uint64(ParseMedium(ev.medium))<<63])
					}
				}
				// Check the system prompts and a few random prompts every request, everything
				// now and then.
				check := prompts[:8]
				if req%100 == 99 || req == requests-1 {
					check = prompts
				}
				for i, p := range check {
					chain := HashTokens(nil, eng.seed, p, blockSize)
					for _, m := range []Medium{GPU, CPU} {
						dst = ix.MatchMedium(dst, chain, m)
						if got, want := int(dst[id]), eng.matched(m, p); got != want {
							t.Fatalf("request %d, prompt %d, %v: index matches %d blocks, engine holds %d", req, i, m, got, want)
						}
					}
				}
				st := ix.Stats().Backends[0]
				for _, m := range []Medium{GPU, CPU} {
					held := int64(len(eng.held[m]))
					if ms := st.Media[m]; ms.Blocks != held || ms.EngineHashes != held || ms.Evictions != 0 {
						t.Fatalf("request %d, %v: index holds %d blocks under %d engine hashes (%d evicted), engine %d",
							req, m, ms.Blocks, ms.EngineHashes, ms.Evictions, held)
					}
				}
			}
			if err := ix.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			// The old engine map was reset past 2·capacity+1024 entries; removals older than
			// that many events must have been applied above.
			if oldest < 2*gpuBlocks+1024 {
				t.Errorf("oldest block removed was stored %d events earlier; the test wants removals older than %d", oldest, 2*gpuBlocks+1024)
			}
			t.Logf("%d events; oldest block removed was stored %d events earlier", events, oldest)
		})
	}
	t.Run("bytes-per-block", func(t *testing.T) {
		blocks := 1_000_000
		if testing.Short() || raceEnabled {
			blocks = 50_000 // figures only: the race detector distorts the heap
		}
		exactBytesPerBlock(t, blocks, !raceEnabled)
	})
}

// exactBytesPerBlock stores blocks blocks on one backend's GPU by ApplyStored (chains of 128
// blocks with random tokens and engine hashes), and reports the live heap per block and the
// index's own account of it (Stats.Bytes). If check, it fails when the heap exceeds 110 bytes
// per block or Stats.Bytes is more than 10% off the heap.
func exactBytesPerBlock(t *testing.T, blocks int, check bool) {
	const blockSize, perEvent = 16, 128
	r := rand.New(rand.NewPCG(1, 1))
	tokens := make([]uint32, perEvent*blockSize)
	hashes := make([]uint64, perEvent)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix := mustNew(t, Options{MaxBytes: 1 << 30})
	id := mustAdd(t, ix, "pod-0", blocks)
	seed := Seed("m", "", "")
	for n := 0; n < blocks; n += perEvent {
		k := min(perEvent, blocks-n)
		for i := range tokens[:k*blockSize] {
			tokens[i] = r.Uint32N(150000)
		}
		for i := range hashes[:k] {
			hashes[i] = r.Uint64()
		}
		if err := ix.ApplyStored(id, StoredBlocks{EngineHashes: hashes[:k], Tokens: tokens[:k*blockSize], BlockSize: blockSize, Seed: seed}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := ix.Stats()
	if st.Blocks != int64(blocks) || st.EngineHashes != int64(blocks) {
		t.Fatalf("stored %d blocks under %d engine hashes, want %d", st.Blocks, st.EngineHashes, blocks)
	}
	heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	off := (float64(st.Bytes) - heap) / heap
	t.Logf("exact mode, %d blocks: %.1f heap bytes per block; Stats.Bytes %.1f per block (%+.1f%%); budget charge %d",
		blocks, heap/float64(blocks), float64(st.Bytes)/float64(blocks), 100*off, PairBytes+EngineHashBytes)
	if check {
		if heap/float64(blocks) > 110 {
			t.Errorf("%.1f heap bytes per block, want <= 110", heap/float64(blocks))
		}
		if off < -0.10 || off > 0.10 {
			t.Errorf("Stats.Bytes %d is %+.1f%% off the heap's %.0f, want within 10%%", st.Bytes, 100*off, heap)
		}
	}
	runtime.KeepAlive(ix)
}

// TestExactModeRegressions pins the failures found with tiered caches (issue 13): each case
// failed before the exact mode kept a capacity, a CLOCK and an engine map per medium.
func TestExactModeRegressions(t *testing.T) {
	seed := Seed("m", "", "")
	const bs = 4
	toks := func(first, blocks int) []uint32 {
		out := make([]uint32, blocks*bs)
		for i := range out {
			out[i] = uint32(first + i)
		}
		return out
	}
	hashes := func(first, n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(first + i)
		}
		return out
	}
	stored := func(t *testing.T, ix *Index, id HolderID, ev StoredBlocks) {
		t.Helper()
		ev.BlockSize, ev.Seed = bs, seed
		if err := ix.ApplyStored(id, ev); err != nil {
			t.Fatal(err)
		}
	}
	removed := func(t *testing.T, ix *Index, id HolderID, medium string, hs ...uint64) {
		t.Helper()
		if err := ix.ApplyRemovedFrom(id, medium, hs); err != nil {
			t.Fatal(err)
		}
	}
	match := func(ix *Index, id HolderID, m Medium, tokens []uint32) int32 {
		return ix.MatchMedium(nil, HashTokens(nil, seed, tokens, bs), m)[id]
	}
	system := toks(0, 8) // an 8-block GPU system prompt

	t.Run("cpu-events-keep-gpu-prefix", func(t *testing.T) {
		// 1,200 CPU-tier BlockStored events used to evict a GPU system prompt the engine
		// still held, as they counted against the GPU's capacity: 0 of 8 blocks matched.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 100)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system, Medium: "GPU"})
		for i := range 1200 {
			stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1000+i, 1), Tokens: toks(10000+i*bs, 1), Medium: "CPU"})
		}
		if got := match(ix, id, GPU, system); got != 8 {
			t.Errorf("GPU system prompt matches %d of 8 blocks after 1,200 CPU events", got)
		}
		if ms := ix.Stats().Backends[0].Media; ms[GPU].Blocks != 8 || ms[CPU].Blocks != 1200 || ms[GPU].Evictions != 0 {
			t.Errorf("per medium: %+v", ms)
		}
	})
	// churn stores and removes n one-block GPU prompts, as a busy engine does around a hot
	// prefix it keeps: far more than the old engine map's 2·capacity+1024 entries.
	churn := func(t *testing.T, ix *Index, id HolderID, n int) {
		for i := range n {
			h := uint64(1_000_000 + i)
			stored(t, ix, id, StoredBlocks{EngineHashes: []uint64{h}, Tokens: toks(100000+i*bs, 1)})
			removed(t, ix, id, "GPU", h)
		}
	}
	t.Run("hot-prefix-continued", func(t *testing.T) {
		// Once the engine map was reset, continuations of a hot prefix failed with
		// ErrUnknownParent.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 64)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system})
		churn(t, ix, id, 5000)
		turn := append(append([]uint32{}, system...), toks(5000, 2)...)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(9, 2), Parent: 8, HasParent: true, Tokens: turn[8*bs:]})
		if got := match(ix, id, GPU, turn); got != 10 {
			t.Errorf("continued hot prefix matches %d of 10 blocks", got)
		}
	})
	t.Run("removed-long-ago", func(t *testing.T) {
		// Once the engine map was reset, BlockRemoved for older blocks was ignored, leaving
		// stale entries.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 64)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system})
		churn(t, ix, id, 5000)
		removed(t, ix, id, "GPU", 5, 6, 7, 8)
		if got := match(ix, id, GPU, system); got != 4 {
			t.Errorf("after removing blocks 5-8 stored 10,000 events earlier: matches %d, want 4", got)
		}
		if st := ix.Stats(); st.Blocks != 4 || st.EngineHashes != 4 {
			t.Errorf("blocks %d, engine hashes %d, want 4 and 4", st.Blocks, st.EngineHashes)
		}
	})
	t.Run("block-in-two-media", func(t *testing.T) {
		// One engine hash names a block on the GPU and its offloaded CPU copy: removing it
		// from one medium leaves the other, which still continues the chain.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 64)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system, Medium: "GPU"})
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system, Medium: "CPU"})
		removed(t, ix, id, "GPU", hashes(1, 8)...)
		if g, c := match(ix, id, GPU, system), match(ix, id, CPU, system); g != 0 || c != 8 {
			t.Errorf("after the GPU removal: GPU %d, CPU %d; want 0, 8", g, c)
		}
		turn := append(append([]uint32{}, system...), toks(5000, 1)...)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(9, 1), Parent: 8, HasParent: true, Tokens: turn[8*bs:], Medium: "CPU"})
		if got := match(ix, id, CPU, turn); got != 9 {
			t.Errorf("continuation from the CPU copy matches %d of 9", got)
		}
		removed(t, ix, id, "CPU", hashes(1, 9)...)
		if st := ix.Stats(); st.Blocks != 0 || st.EngineHashes != 0 {
			t.Errorf("after both removals: %d blocks, %d engine hashes", st.Blocks, st.EngineHashes)
		}
	})
	t.Run("block-with-two-names", func(t *testing.T) {
		// Two engine hashes name one usher block (say, two cache salts usher does not hash):
		// the block stays until the engine has removed both, and an eviction forgets both.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 8)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system})
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(101, 8), Tokens: system})
		if st := ix.Stats(); st.Blocks != 8 || st.EngineHashes != 16 {
			t.Fatalf("%d blocks, %d engine hashes; want 8, 16", st.Blocks, st.EngineHashes)
		}
		removed(t, ix, id, "GPU", 8)
		if got := match(ix, id, GPU, system); got != 8 {
			t.Errorf("after removing one of two names: matches %d, want 8", got)
		}
		removed(t, ix, id, "GPU", 108)
		if got := match(ix, id, GPU, system); got != 7 {
			t.Errorf("after removing both names: matches %d, want 7", got)
		}
		// Shrinking the capacity to 3 evicts blocks 4-7 (the chain's tail), and their 8 names.
		if err := ix.SetCapacity(id, 3); err != nil {
			t.Fatal(err)
		}
		if st := ix.Stats(); st.Blocks != 3 || st.EngineHashes != 6 || st.Evictions != 4 {
			t.Errorf("%d blocks, %d engine hashes, %d evicted; want 3, 6, 4", st.Blocks, st.EngineHashes, st.Evictions)
		}
		for _, c := range []struct {
			parent uint64
			ok     bool
		}{{107, false}, {4, false}, {103, true}} {
			err := ix.ApplyStored(id, StoredBlocks{EngineHashes: []uint64{c.parent + 1000}, Parent: c.parent, HasParent: true, Tokens: toks(0, 1), BlockSize: bs})
			if (err == nil) != c.ok {
				t.Errorf("continuation from engine hash %d: %v, want ok=%v", c.parent, err, c.ok)
			}
		}
	})
	t.Run("predictions-keep-engine-blocks", func(t *testing.T) {
		// A gateway that learns at pick and follows the engine's events: the engine reports
		// a conversation's 4 blocks, then predictions of other prompts fill the capacity (8).
		// They may evict each other, never the engine's blocks, so the engine's next
		// BlockStored continuing the conversation finds its parent; and retracting a failed
		// prediction (Remove) takes away only what no engine reported. Before the fix the
		// predictions' CLOCK victims included the engine's blocks and the continuation failed
		// with ErrUnknownParent.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 8)
		conv := toks(0, 4)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 4), Tokens: conv})
		for i := range 6 {
			chain := HashTokens(nil, seed, toks(1000+i*100, 3), bs)
			if err := ix.Insert(id, chain); err != nil {
				t.Fatal(err)
			}
		}
		if got := match(ix, id, GPU, conv); got != 4 {
			t.Errorf("after predictions over capacity: the engine's chain matches %d blocks, want 4", got)
		}
		if st := ix.Stats(); st.Blocks != 8 {
			t.Errorf("%d blocks held, want the capacity, 8", st.Blocks)
		}
		stored(t, ix, id, StoredBlocks{EngineHashes: []uint64{5}, Parent: 4, HasParent: true, Tokens: toks(16, 1)})
		if got := match(ix, id, GPU, toks(0, 5)); got != 5 {
			t.Errorf("continuation: matches %d blocks, want 5", got)
		}
		// A prediction over the engine's blocks and one more, retracted.
		both := HashTokens(nil, seed, toks(0, 6), bs)
		if err := ix.Insert(id, both); err != nil {
			t.Fatal(err)
		}
		if err := ix.Remove(id, both); err != nil {
			t.Fatal(err)
		}
		if got := match(ix, id, GPU, toks(0, 6)); got != 5 {
			t.Errorf("after a retraction: matches %d blocks, want the engine's 5", got)
		}
		// The engine's own removal still removes its block.
		removed(t, ix, id, "GPU", 5)
		if got := match(ix, id, GPU, toks(0, 6)); got != 4 {
			t.Errorf("after the engine removed block 5: matches %d blocks, want 4", got)
		}
	})
	t.Run("two-copies-of-a-block", func(t *testing.T) {
		// vLLM keeps both copies when two requests compute the same block at once, and
		// reports each stored and each removed: the block stays until the last copy goes (the
		// shared opening, computed by concurrent first turns, is the usual case).
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 16)
		opening := toks(0, 2)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 2), Tokens: opening})
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 2), Tokens: opening})
		removed(t, ix, id, "GPU", 2)
		if got := match(ix, id, GPU, opening); got != 2 {
			t.Errorf("one of two copies removed: matches %d blocks, want 2", got)
		}
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(3, 1), Parent: 2, HasParent: true, Tokens: toks(8, 1)})
		removed(t, ix, id, "GPU", 2)
		if got := match(ix, id, GPU, opening); got != 1 {
			t.Errorf("both copies removed: matches %d blocks, want 1", got)
		}
		if st := ix.Stats(); st.EngineHashes != 2 {
			t.Errorf("%d engine hashes, want 2 (blocks 1 and 3)", st.EngineHashes)
		}
	})
	t.Run("predictions-survive-a-full-engine", func(t *testing.T) {
		// A warm engine's cache is always full: it evicts only when it needs room, and says
		// so. A prediction made then must last until the engine's events arrive, not be
		// evicted at once for want of room the engine's blocks take.
		ix := mustNew(t, Options{})
		id := mustAdd(t, ix, "pod", 16)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 16), Tokens: toks(0, 16)})
		next := toks(5000, 3)
		if err := ix.Insert(id, HashTokens(nil, seed, next, bs)); err != nil {
			t.Fatal(err)
		}
		if got := match(ix, id, GPU, next); got != 3 {
			t.Errorf("a prediction on a full engine matches %d blocks, want 3", got)
		}
		if got := match(ix, id, GPU, toks(0, 16)); got != 16 {
			t.Errorf("the engine's blocks match %d, want 16", got)
		}
		// Predictions beyond a quarter of the capacity evict each other, oldest first.
		for i := range 4 {
			if err := ix.Insert(id, HashTokens(nil, seed, toks(6000+i*100, 3), bs)); err != nil {
				t.Fatal(err)
			}
		}
		if st := ix.Stats(); st.Blocks != 16+4 {
			t.Errorf("%d blocks held, want the engine's 16 and 4 predicted", st.Blocks)
		}
		if got := match(ix, id, GPU, toks(6300, 3)); got != 3 {
			t.Errorf("the newest prediction matches %d blocks, want 3", got)
		}
	})
	t.Run("budget-evicts-offload-first", func(t *testing.T) {
		// Over the byte budget, CPU blocks go before any GPU block.
		ix := mustNew(t, Options{MaxBytes: 40 * (PairBytes + EngineHashBytes)})
		id := mustAdd(t, ix, "pod", 100)
		stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1, 8), Tokens: system, Medium: "GPU"})
		for i := range 100 {
			stored(t, ix, id, StoredBlocks{EngineHashes: hashes(1000+i, 1), Tokens: toks(10000+i*bs, 1), Medium: "CPU"})
		}
		ms := ix.Stats().Backends[0].Media
		if got := match(ix, id, GPU, system); got != 8 || ms[GPU].Blocks != 8 || ms[CPU].Blocks != 32 {
			t.Errorf("GPU matches %d of 8; per medium %+v; want 8 GPU and 32 CPU blocks", got, ms)
		}
		if err := ix.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEngMap drives one engine map through random names, removals and drops, comparing it
// with a naive map after every step; the universe is large enough for its tables to grow.
func TestEngMap(t *testing.T) {
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 5))
		var e engMap
		want := map[uint64]BlockHash{} // engine hash → block
		copies := map[uint64]int{}     // engine hash → copies of its block beyond the first
		blocks := []BlockHash{0, 1, 1 << 63, BlockHash(r.Uint64())}
		for range 300 {
			blocks = append(blocks, BlockHash(r.Uint64()))
		}
		names := func(u BlockHash) int {
			n := 0
			for _, v := range want {
				if v == u {
					n++
				}
			}
			return n
		}
		for step := range 20000 {
			eh := uint64(r.IntN(3000))
			u := blocks[r.IntN(len(blocks))]
			switch r.IntN(10) {
			case 0, 1, 2, 3, 4:
				e.add(eh, u)
				if old, ok := want[eh]; ok && old == u {
					copies[eh]++
				} else {
					delete(copies, eh)
				}
				want[eh] = u
			case 5, 6, 7:
				gu, last, ok := e.remove(eh)
				wu, wok := want[eh]
				if copies[eh] > 0 {
					copies[eh]--
				} else {
					delete(want, eh)
					delete(copies, eh)
				}
				if ok != wok || gu != wu || (ok && last != (names(wu) == 0)) {
					t.Fatalf("seed %d step %d: remove(%d) = %#x, %v, %v; want %#x, %v, %v", seed, step, eh, gu, last, ok, wu, names(wu) == 0, wok)
				}
			default:
				got := e.drop(u)
				n := 0
				for k, v := range want {
					if v == u {
						delete(want, k)
						delete(copies, k)
						n++
					}
				}
				if got != n {
					t.Fatalf("seed %d step %d: drop(%#x) = %d, want %d", seed, step, u, got, n)
				}
			}
			if e.names != len(want) {
				t.Fatalf("seed %d step %d: %d names, want %d", seed, step, e.names, len(want))
			}
			if step%97 != 0 {
				continue
			}
			for k, v := range want {
				if got, ok := e.lookup(k); !ok || got != v {
					t.Fatalf("seed %d step %d: lookup(%d) = %#x, %v; want %#x", seed, step, k, got, ok, v)
				}
			}
			for _, b := range blocks {
				if got, want := e.count(b), names(b); got != want {
					t.Fatalf("seed %d step %d: block %#x has %d names, want %d", seed, step, b, got, want)
				}
				// Lists have no gaps, and an entry has nextBit exactly when one follows it.
				for k := 0; ; k++ {
					v, ok := e.get(revKey(b, k))
					if !ok {
						break
					}
					if _, more := e.get(revKey(b, k+1)); more != (v&nextBit != 0) {
						t.Fatalf("seed %d step %d: block %#x name %d: next bit %v, next entry %v", seed, step, b, k, v&nextBit != 0, more)
					}
				}
			}
			entries, slots := 0, 0
			for p := range e.parts {
				entries += e.parts[p].count
				slots += len(e.parts[p].slots)
			}
			if entries != 2*len(want)+e.copies || int64(slots)*engSlotBytes != e.bytes {
				t.Fatalf("seed %d step %d: %d entries for %d names; %d bytes for %d slots", seed, step, entries, len(want), e.bytes, slots)
			}
		}
	}
}
