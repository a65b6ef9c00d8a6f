package prefixcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

func mustNew(t testing.TB, o Options) *Index {
	t.Helper()
	ix, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func mustAdd(t testing.TB, ix *Index, name string, capacity int) HolderID {
	t.Helper()
	id, err := ix.AddBackend(name, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func seq(from, n int) []BlockHash {
	c := make([]BlockHash, n)
	for i := range c {
		c[i] = BlockHash(from + i)
	}
	return c
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"zero value", Options{}, true},
		{"one shard", Options{Shards: 1}, true},
		{"256 shards", Options{Shards: 256}, true},
		{"shards not a power of two", Options{Shards: 3}, false},
		{"too many shards", Options{Shards: 512}, false},
		{"negative shards", Options{Shards: -1}, false},
		{"negative capacity", Options{DefaultCapacity: -1}, false},
		{"negative CPU capacity", Options{DefaultCPUCapacity: -1}, false},
		{"negative Remote capacity", Options{DefaultRemoteCapacity: -1}, false},
		{"medium capacities", Options{DefaultCPUCapacity: 10, DefaultRemoteCapacity: 20}, true},
		{"budget below one pair", Options{MaxBytes: PairBytes - 1}, false},
		{"negative chain", Options{MaxChainBlocks: -1}, false},
		{"max backends", Options{MaxBackends: MaxBackends}, true},
		{"too many backends", Options{MaxBackends: MaxBackends + 1}, false},
	} {
		_, err := New(tc.o)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: New error %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestBackendRegistry(t *testing.T) {
	ix := mustNew(t, Options{MaxBackends: 3, DefaultCapacity: 7})
	a := mustAdd(t, ix, "a", 0)
	b := mustAdd(t, ix, "b", 5)
	if a != 0 || b != 1 || int(ix.bound.Load()) != 2 {
		t.Fatalf("ids %d %d bound %d, want 0 1 2", a, b, int(ix.bound.Load()))
	}
	if id, ok := ix.Lookup("b"); !ok || id != b {
		t.Errorf("Lookup(b) = %d, %v", id, ok)
	}
	if _, ok := ix.Lookup("zzz"); ok {
		t.Errorf("Lookup(zzz) found")
	}
	if got := ix.Name(a); got != "a" {
		t.Errorf("Name(a) = %q", got)
	}
	// Adding a known name is idempotent and updates the capacity.
	if id, err := ix.AddBackend("a", 3); err != nil || id != a {
		t.Errorf("re-add a: %d, %v", id, err)
	}
	if st := ix.Stats(); st.Backends[0].Capacity != 3 || st.Backends[1].Capacity != 5 {
		t.Errorf("capacities %+v", st.Backends)
	}
	c := mustAdd(t, ix, "c", 0)
	if _, err := ix.AddBackend("d", 1); !errors.Is(err, ErrTooManyBackends) {
		t.Errorf("fourth backend: %v, want ErrTooManyBackends", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"empty name", func() error { _, err := ix.AddBackend("", 1); return err }(), ErrInvalidName},
		{"negative capacity", func() error { _, err := ix.AddBackend("x", -1); return err }(), ErrInvalidCapacity},
		{"set negative capacity", ix.SetCapacity(a, -2), ErrInvalidCapacity},
		{"set negative CPU capacity", ix.SetMediumCapacity(a, CPU, -2), ErrInvalidCapacity},
		{"set capacity of an unknown medium", ix.SetMediumCapacity(a, NumMedia, 5), ErrInvalidCapacity},
		{"set capacity unknown", ix.SetMediumCapacity(99, CPU, 5), ErrUnknownBackend},
		{"insert unknown", ix.Insert(99, seq(1, 3)), ErrUnknownBackend},
		{"remove unknown", ix.Remove(99, seq(1, 3)), ErrUnknownBackend},
		{"clear unknown", ix.ApplyCleared(99), ErrUnknownBackend},
		{"remove backend unknown", ix.RemoveBackend(99), ErrUnknownBackend},
		{"apply removed unknown", ix.ApplyRemovedFrom(99, "", []uint64{1}), ErrUnknownBackend},
		{"apply cleared unknown", ix.ApplyCleared(99), ErrUnknownBackend},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// Removing b frees id 1 (lowest first); removing c shrinks the bound.
	if err := ix.Insert(b, seq(1, 4)); err != nil {
		t.Fatal(err)
	}
	if err := ix.RemoveBackend(b); err != nil {
		t.Fatal(err)
	}
	if err := ix.Insert(b, seq(1, 4)); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("insert into removed backend: %v", err)
	}
	if got := ix.Match(nil, seq(1, 4)); !slices.Equal(got, []int32{0, 0, 0}) {
		t.Errorf("match after removal: %v", got)
	}
	if err := ix.RemoveBackend(c); err != nil {
		t.Fatal(err)
	}
	if int(ix.bound.Load()) != 1 {
		t.Errorf("bound after removals %d, want 1", int(ix.bound.Load()))
	}
	if id := mustAdd(t, ix, "e", 0); id != 1 {
		t.Errorf("reused id %d, want 1", id)
	}
	if got := ix.Match(nil, seq(1, 4)); !slices.Equal(got, []int32{0, 0}) {
		t.Errorf("a reused id inherits nothing: %v", got)
	}
}

// TestMatchSteps walks through Match's contract step by step.
func TestMatchSteps(t *testing.T) {
	ix := mustNew(t, Options{MaxChainBlocks: 6})
	a := mustAdd(t, ix, "a", 100)
	b := mustAdd(t, ix, "b", 100)
	c := mustAdd(t, ix, "c", 3)
	steps := []struct {
		do    func() error
		chain []BlockHash
		want  []int32
	}{
		{nil, seq(1, 4), []int32{0, 0, 0}},
		{func() error { return ix.Insert(a, seq(1, 4)) }, seq(1, 5), []int32{4, 0, 0}},
		{func() error { return ix.Insert(b, seq(1, 2)) }, seq(1, 5), []int32{4, 2, 0}},
		// c's capacity is 3: only the first 3 blocks of a longer chain go in.
		{func() error { return ix.Insert(c, seq(1, 5)) }, seq(1, 5), []int32{4, 2, 3}},
		// A chain starting elsewhere matches nothing.
		{nil, seq(50, 3), []int32{0, 0, 0}},
		// Remove a's third block: a matches 2.
		{func() error { return ix.Remove(a, seq(3, 1)) }, seq(1, 5), []int32{2, 2, 3}},
		// Chains past MaxChainBlocks (6) are truncated in Insert and Match.
		{func() error { return ix.Insert(b, seq(1, 10)) }, seq(1, 10), []int32{2, 6, 3}},
		{nil, nil, []int32{0, 0, 0}},
		{func() error { return ix.ApplyCleared(b) }, seq(1, 5), []int32{2, 0, 3}},
	}
	var dst []int32
	for i, s := range steps {
		if s.do != nil {
			if err := s.do(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		dst = ix.Match(dst, s.chain)
		if !slices.Equal(dst, s.want) {
			t.Errorf("step %d: Match = %v, want %v", i, dst, s.want)
		}
	}
	st := ix.Stats()
	if st.Hits == 0 || st.Misses == 0 {
		t.Errorf("hits %d misses %d, want both counted", st.Hits, st.Misses)
	}
}

// TestClockEviction checks the documented eviction order on a small backend.
func TestClockEviction(t *testing.T) {
	ix := mustNew(t, Options{})
	a := mustAdd(t, ix, "a", 4)
	// Insert 1..4: queued deepest first (4 3 2 1).
	_ = ix.Insert(a, seq(1, 4))
	if got := ix.snapshotRing(a, GPU); got[0].key != 4 || got[3].key != 1 {
		t.Fatalf("queue %v, want 4 3 2 1", got)
	}
	// Touch 4 (a chain of one block, 4) and add 5: the hand skips 4 (second chance) and
	// evicts 3.
	_ = ix.Insert(a, seq(4, 1))
	_ = ix.Insert(a, seq(5, 1))
	var keys []uint64
	for _, p := range ix.snapshotRing(a, GPU) {
		keys = append(keys, p.key)
	}
	if want := []uint64{2, 1, 5, 4}; !slices.Equal(keys, want) {
		t.Errorf("queue after eviction %v, want %v", keys, want)
	}
	if st := ix.Stats(); st.Evictions != 1 || st.Backends[0].Evictions != 1 || st.Blocks != 4 {
		t.Errorf("stats %+v", st)
	}
	// Shrinking the capacity evicts from the front.
	if err := ix.SetCapacity(a, 2); err != nil {
		t.Fatal(err)
	}
	keys = keys[:0]
	for _, p := range ix.snapshotRing(a, GPU) {
		keys = append(keys, p.key)
	}
	if want := []uint64{5, 4}; !slices.Equal(keys, want) {
		t.Errorf("queue after shrink %v, want %v", keys, want)
	}
}

// TestMediumCapacity checks that each medium of a backend has its own capacity and CLOCK.
func TestMediumCapacity(t *testing.T) {
	ix := mustNew(t, Options{DefaultCapacity: 4, DefaultRemoteCapacity: 2})
	a := mustAdd(t, ix, "a", 0)
	medium := func(m Medium) MediumStats { return ix.Stats().Backends[0].Media[m] }
	steps := []struct {
		do   func() error
		m    Medium
		want MediumStats
	}{
		{func() error { return ix.insert(a, seq(1, 4), GPU) }, GPU, MediumStats{Blocks: 4, Capacity: 4}},
		// CPU has no capacity of its own: only the byte budget bounds it.
		{func() error { return ix.insert(a, seq(100, 50), CPU) }, CPU, MediumStats{Blocks: 50}},
		{nil, GPU, MediumStats{Blocks: 4, Capacity: 4}},
		// Remote holds the first 2 blocks of a longer chain (its DefaultRemoteCapacity).
		{func() error { return ix.insert(a, seq(200, 5), Remote) }, Remote, MediumStats{Blocks: 2, Capacity: 2}},
		{func() error { return ix.SetMediumCapacity(a, CPU, 10) }, CPU, MediumStats{Blocks: 10, Capacity: 10, Evictions: 40}},
		{nil, GPU, MediumStats{Blocks: 4, Capacity: 4}},
		// 0 restores the medium's default: no limit for CPU.
		{func() error { return ix.SetMediumCapacity(a, CPU, 0) }, CPU, MediumStats{Blocks: 10, Evictions: 40}},
		{func() error { return ix.SetCapacity(a, 2) }, GPU, MediumStats{Blocks: 2, Capacity: 2, Evictions: 2}},
		{nil, CPU, MediumStats{Blocks: 10, Evictions: 40}},
	}
	for i, s := range steps {
		if s.do != nil {
			if err := s.do(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if got := medium(s.m); got != s.want {
			t.Errorf("step %d: %v %+v, want %+v", i, s.m, got, s.want)
		}
	}
	if got := ix.Match(nil, seq(1, 4)); got[a] != 2 {
		t.Errorf("GPU match %v, want 2", got)
	}
	if st := ix.Stats(); st.Blocks != 14 || st.Backends[0].Blocks != 14 || st.Backends[0].Capacity != 2 || st.Backends[0].Evictions != 42 {
		t.Errorf("totals %+v", st)
	}
}

func TestByteBudget(t *testing.T) {
	ix := mustNew(t, Options{MaxBytes: 10 * PairBytes})
	a := mustAdd(t, ix, "a", 100)
	b := mustAdd(t, ix, "b", 100)
	_ = ix.Insert(a, seq(1, 8))
	_ = ix.Insert(b, seq(100, 4)) // 12 pairs > 10: a, the largest, loses 2
	st := ix.Stats()
	if st.Blocks != 10 || st.Backends[0].Blocks != 6 || st.Backends[1].Blocks != 4 || st.BudgetBlocks != 10 {
		t.Errorf("after budget eviction: %+v", st)
	}
	if got := ix.Match(nil, seq(1, 8)); got[0] != 6 {
		t.Errorf("a matches %d, want 6 (its tail went first)", got[0])
	}
}

func TestExactMode(t *testing.T) {
	ix := mustNew(t, Options{})
	a := mustAdd(t, ix, "a", 100)
	seed := Seed("m", "", "")
	tokens := make([]uint32, 6*4)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	chain := HashTokens(nil, seed, tokens, 4)

	// Stored in two events; the second names the first's last block as its parent.
	if err := ix.ApplyStored(a, StoredBlocks{EngineHashes: []uint64{101, 102}, Tokens: tokens[:8], BlockSize: 4, Seed: seed, Medium: "GPU"}); err != nil {
		t.Fatal(err)
	}
	if err := ix.ApplyStored(a, StoredBlocks{EngineHashes: []uint64{103, 104, 105}, Parent: 102, HasParent: true, Tokens: tokens[8:20], BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	if got := ix.Match(nil, chain); got[0] != 5 {
		t.Errorf("after stored: match %v, want 5", got)
	}
	// Offloaded to CPU: the CPU copy of block 106 continues from the GPU parent.
	if err := ix.ApplyStored(a, StoredBlocks{EngineHashes: []uint64{106}, Parent: 105, HasParent: true, Tokens: tokens[20:24], BlockSize: 4, Medium: "CPU"}); err != nil {
		t.Fatal(err)
	}
	if got := ix.Match(nil, chain); got[0] != 5 {
		t.Errorf("GPU match %v, want 5", got)
	}
	if got := ix.MatchMedium(nil, chain, CPU); got[0] != 0 {
		t.Errorf("CPU match %v, want 0 (block 0 is not on CPU)", got)
	}
	if got := ix.MatchMedium(nil, chain[5:], CPU); got[0] != 1 {
		t.Errorf("CPU match from block 5 %v, want 1", got)
	}
	// Removed: the engine evicted block 103 from the GPU.
	if err := ix.ApplyRemovedFrom(a, "", []uint64{103, 999}); err != nil {
		t.Fatal(err)
	}
	if got := ix.Match(nil, chain); got[0] != 2 {
		t.Errorf("after removed: match %v, want 2", got)
	}
	// Removing 106 from the GPU is a no-op: it lives on the CPU.
	_ = ix.ApplyRemovedFrom(a, "", []uint64{106})
	if got := ix.MatchMedium(nil, chain[5:], CPU); got[0] != 1 {
		t.Errorf("CPU block removed by a GPU event: %v", got)
	}
	_ = ix.ApplyRemovedFrom(a, "cpu", []uint64{106})
	if got := ix.MatchMedium(nil, chain[5:], CPU); got[0] != 0 {
		t.Errorf("CPU block kept after a CPU removal: %v", got)
	}
	// A parent that was removed is unknown.
	err := ix.ApplyStored(a, StoredBlocks{EngineHashes: []uint64{107}, Parent: 103, HasParent: true, Tokens: tokens[:4], BlockSize: 4})
	if !errors.Is(err, ErrUnknownParent) {
		t.Errorf("stored after removed parent: %v", err)
	}
	// Bad events.
	for _, ev := range []StoredBlocks{
		{EngineHashes: []uint64{1}, Tokens: tokens[:4], BlockSize: 0},
		{EngineHashes: []uint64{1}, Tokens: tokens[:4], BlockSize: -4},
		{EngineHashes: nil, Tokens: tokens[:4], BlockSize: 4},
		{EngineHashes: []uint64{1}, Tokens: tokens[:5], BlockSize: 4},
		{EngineHashes: []uint64{1, 2}, Tokens: tokens[:4], BlockSize: 4},
	} {
		if err := ix.ApplyStored(a, ev); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("ApplyStored(%+v) = %v, want ErrInvalidEvent", ev, err)
		}
	}
	if err := ix.ApplyStored(7, StoredBlocks{EngineHashes: []uint64{1}, Tokens: tokens[:4], BlockSize: 4}); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("unknown backend: %v", err)
	}
	// Cleared: everything goes, including the engine map.
	if err := ix.ApplyCleared(a); err != nil {
		t.Fatal(err)
	}
	if got := ix.Match(nil, chain); got[0] != 0 {
		t.Errorf("after cleared: %v", got)
	}
	err = ix.ApplyStored(a, StoredBlocks{EngineHashes: []uint64{108}, Parent: 101, HasParent: true, Tokens: tokens[:4], BlockSize: 4})
	if !errors.Is(err, ErrUnknownParent) {
		t.Errorf("parent survived a clear: %v", err)
	}
	if st := ix.Stats(); st.Blocks != 0 || st.Entries != 0 {
		t.Errorf("stats after clear %+v", st)
	}
}

func TestMediumNames(t *testing.T) {
	for in, want := range map[string]Medium{"": GPU, "GPU": GPU, "gpu": GPU, "CPU": CPU, "cpu": CPU, "DISK": Remote, "LocalCPUBackend": Remote} {
		if got := ParseMedium(in); got != want {
			t.Errorf("ParseMedium(%q) = %v, want %v", in, got, want)
		}
	}
	if GPU.String() != "GPU" || CPU.String() != "CPU" || Remote.String() != "Remote" || Medium(9).String() != "Medium(9)" {
		t.Errorf("String: %v %v %v %v", GPU, CPU, Remote, Medium(9))
	}
}

func TestAllocs(t *testing.T) {
	ix := mustNew(t, Options{})
	ids := make([]HolderID, 64)
	for i := range ids {
		ids[i] = mustAdd(t, ix, fmt.Sprint(i), 1<<12)
	}
	chain := benchChain(rand.New(rand.NewPCG(1, 2)), 128)
	for _, id := range ids {
		_ = ix.Insert(id, chain)
	}
	dst := make([]int32, 0, int(ix.bound.Load()))
	if a := testing.AllocsPerRun(100, func() { dst = ix.Match(dst, chain) }); a != 0 {
		t.Errorf("Match: %v allocs/op, want 0", a)
	}
	if a := testing.AllocsPerRun(100, func() { _ = ix.Insert(ids[3], chain) }); a != 0 {
		t.Errorf("Insert of existing blocks: %v allocs/op, want 0", a)
	}
	// Exact mode: a store and the removal of the same blocks, in two media, once the engine
	// maps have grown.
	tokens := make([]uint32, 64*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	events := func() {
		for _, medium := range []string{"GPU", "CPU"} {
			_ = ix.ApplyStored(ids[5], StoredBlocks{EngineHashes: hashes, Tokens: tokens, BlockSize: 16, Medium: medium})
			_ = ix.ApplyRemovedFrom(ids[5], medium, hashes)
		}
	}
	events()
	if a := testing.AllocsPerRun(100, events); a != 0 {
		t.Errorf("ApplyStored and ApplyRemovedFrom: %v allocs/op, want 0", a)
	}
	// Wide path: ids past 64.
	for i := 64; i < 130; i++ {
		_ = ix.Insert(mustAdd(t, ix, fmt.Sprint(i), 1<<12), chain[:64])
	}
	dst = make([]int32, 0, int(ix.bound.Load()))
	if a := testing.AllocsPerRun(100, func() { dst = ix.Match(dst, chain) }); a != 0 {
		t.Errorf("Match, 130 backends: %v allocs/op, want 0", a)
	}
	if got := ix.Match(nil, chain); got[0] != 128 || got[129] != 64 {
		t.Errorf("wide match %v", got)
	}
}

// TestConcurrent runs writers (insert, remove, clear, KV events) and readers (Match, Stats) at
// once; run with -race. Afterwards the index must satisfy its invariants, and a quiescent
// Match must agree with the rings.
func TestConcurrent(t *testing.T) {
	ix := mustNew(t, Options{Shards: 4, MaxBytes: 3000 * PairBytes, MaxBackends: 80})
	ids := make([]HolderID, 70)
	for i := range ids {
		ids[i] = mustAdd(t, ix, fmt.Sprint(i), 200)
	}
	r := rand.New(rand.NewPCG(5, 5))
	chains := make([][]BlockHash, 40)
	for i := range chains {
		chains[i] = benchChain(r, 10+r.IntN(40))
		if i > 0 && i%2 == 0 {
			copy(chains[i], chains[i-1][:10]) // shared prefixes
		}
	}
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			lr := rand.New(rand.NewPCG(uint64(w), 1))
			for range iters {
				id := ids[[]int{0, 1, 2, 65, 66, lr.IntN(len(ids))}[lr.IntN(6)]]
				c := chains[lr.IntN(len(chains))]
				switch lr.IntN(20) {
				case 0:
					_ = ix.ApplyCleared(id)
				case 1, 2, 3:
					_ = ix.Remove(id, c[:lr.IntN(len(c))])
				default:
					_ = ix.Insert(id, c)
				}
			}
		})
	}
	// KV events from an engine with CPU offloading, into a backend the writers above also
	// insert into, remove from and clear (so some events fail: their parent was cleared).
	wg.Go(func() {
		lr := rand.New(rand.NewPCG(9, 3))
		eng := newToyEngine(2, 4, 200, 800)
		prompts := toyPrompts(lr, 100, 4, 20, 3)
		var evs []toyEvent
		for range iters {
			evs = eng.serve(prompts[lr.IntN(len(prompts))], evs[:0])
			for _, ev := range evs {
				_ = ev.apply(ix, ids[2])
			}
		}
	})
	for rd := range 2 {
		wg.Go(func() {
			lr := rand.New(rand.NewPCG(uint64(rd), 2))
			var dst []int32
			for i := range iters {
				c := chains[lr.IntN(len(chains))]
				dst = ix.Match(dst, c)
				for id, n := range dst {
					if n < 0 || int(n) > len(c) {
						t.Errorf("backend %d matched %d of %d", id, n, len(c))
						return
					}
				}
				if i%500 == 0 {
					_ = ix.Stats()
				}
			}
		})
	}
	wg.Wait()
	if err := ix.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if st := ix.Stats(); (st.Blocks+st.Stale)*PairBytes+st.EngineHashes*EngineHashBytes > 3000*PairBytes {
		t.Errorf("over budget: %+v", st)
	}
	for _, c := range chains {
		got := ix.Match(nil, c)
		for _, id := range ids {
			want := 0
			for _, h := range c {
				hold, _ := ix.peek(entryKey(blockKey(h, GPU), int(id>>6)))
				if hold&(1<<(id&63)) == 0 {
					break
				}
				want++
			}
			if int(got[id]) != want {
				t.Fatalf("backend %d: Match %d, tables say %d", id, got[id], want)
			}
		}
	}
}

// TestBytesPerBlock reports the live heap per stored block after inserting 10⁶ blocks into
// one backend (and per pair when 8 backends hold 125,000 blocks each). The target is
// PairBytes (64 B); the test fails only above it.
func TestBytesPerBlock(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector distorts heap figures and makes 10⁶ inserts slow")
	}
	const blocks = 1_000_000
	for _, backends := range []int{1, 8} {
		t.Run(fmt.Sprintf("backends=%d", backends), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ix := mustNew(t, Options{MaxBytes: 1 << 30})
			ids := make([]HolderID, backends)
			for i := range ids {
				ids[i] = mustAdd(t, ix, fmt.Sprint(i), blocks)
			}
			r := rand.New(rand.NewPCG(1, 1))
			chain := make([]BlockHash, 128)
			for n := 0; n < blocks; n += len(chain) {
				for i := range chain {
					chain[i] = BlockHash(r.Uint64())
				}
				_ = ix.Insert(ids[(n/len(chain))%backends], chain[:min(len(chain), blocks-n)])
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			st := ix.Stats()
			if st.Blocks != blocks {
				t.Fatalf("stored %d blocks, want %d", st.Blocks, blocks)
			}
			perBlock := float64(after.HeapAlloc-before.HeapAlloc) / blocks
			t.Logf("%.1f heap bytes per stored block (%d backends; Stats.Bytes %.1f per block)",
				perBlock, backends, float64(st.Bytes)/blocks)
			if perBlock > PairBytes {
				t.Errorf("%.1f bytes per block, want <= %d", perBlock, PairBytes)
			}
			runtime.KeepAlive(ix)
		})
	}
	// The same for the exact mode (see TestTieredExactMode), so that CI's memory step, which
	// runs this test without the race detector, checks its target too.
	t.Run("exact", func(t *testing.T) { exactBytesPerBlock(t, blocks, true) })
}

func TestAddBackendZeroKeepsCapacity(t *testing.T) {
	ix, err := New(Options{DefaultCapacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ix.AddBackend("a", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ix.AddBackend("a", 0); err != nil || again != id {
		t.Fatalf("AddBackend(a, 0) = %d, %v; want %d, nil", again, err, id)
	}
	if c := ix.Stats().Backends[0].Capacity; c != 4096 {
		t.Errorf("capacity after re-adding without one: %d, want 4096 (kept)", c)
	}
	if _, err := ix.AddBackend("a", 2048); err != nil {
		t.Fatal(err)
	}
	if c := ix.Stats().Backends[0].Capacity; c != 2048 {
		t.Errorf("capacity after re-adding with 2048: %d", c)
	}
}

// TestMatch2 checks Match's two-word path against the general one (matchWide) at every fleet
// size it serves, 65 to 128 ids, and both against a reference walk of readBits: chains share
// prefixes of random lengths, backends hold random prefixes of them, some ids are removed.
func TestMatch2(t *testing.T) {
	for _, n := range []int{65, 70, 100, 127, 128} {
		ix := mustNew(t, Options{Shards: 4, MaxBackends: 128})
		ids := make([]HolderID, n)
		for i := range ids {
			ids[i] = mustAdd(t, ix, fmt.Sprint(i), 1000)
		}
		r := rand.New(rand.NewPCG(uint64(n), 2))
		chains := make([][]BlockHash, 30)
		for c := range chains {
			chains[c] = benchChain(r, 1+r.IntN(40))
			if c > 0 && r.IntN(2) == 0 {
				prev := chains[r.IntN(c)]
				copy(chains[c], prev[:min(len(prev), len(chains[c]), r.IntN(20))])
			}
		}
		for range 400 {
			c := chains[r.IntN(len(chains))]
			if err := ix.Insert(ids[r.IntN(n)], c[:r.IntN(len(c)+1)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.RemoveBackend(ids[n/2]); err != nil {
			t.Fatal(err)
		}
		bound := int(ix.bound.Load())
		var low, high int // blocks matched by ids below and above 64: both words are exercised
		for _, c := range chains {
			two := make([]int32, bound)
			wide := make([]int32, bound)
			m2, mw := ix.match2(two, c, GPU, bound), ix.matchWide(wide, c, GPU, bound)
			if m2 != mw || !slices.Equal(two, wide) {
				t.Fatalf("%d ids: match2 %d %v, matchWide %d %v", n, m2, two, mw, wide)
			}
			for id := range bound {
				want := 0
				w, bit := id/64, uint64(1)<<(id%64)
				for _, h := range c {
					if hold, _ := ix.readBits(entryKey(blockKey(h, GPU), w)); hold&bit == 0 {
						break
					}
					want++
				}
				if int(two[id]) != want {
					t.Fatalf("%d ids: id %d matched %d, reference %d", n, id, two[id], want)
				}
				if id < 64 {
					low += want
				} else {
					high += want
				}
			}
			if got := ix.Match(nil, c); !slices.Equal(got, two) {
				t.Fatalf("%d ids: Match %v, match2 %v", n, got, two)
			}
		}
		if low == 0 || high == 0 {
			t.Fatalf("%d ids: blocks matched below 64 %d, above %d: a word went untested", n, low, high)
		}
		// A Match that read the bound before backends at and above it were added (a race
		// Match allows) must ignore them: the two paths agree at every smaller bound.
		for _, small := range []int{65, (65 + bound) / 2} {
			if small >= bound {
				continue
			}
			for _, c := range chains {
				two, wide := make([]int32, small), make([]int32, small)
				m2, mw := ix.match2(two, c, GPU, small), ix.matchWide(wide, c, GPU, small)
				if m2 != mw || !slices.Equal(two, wide) {
					t.Fatalf("%d ids read as %d: match2 %d %v, matchWide %d %v", n, small, m2, two, mw, wide)
				}
			}
		}
	}
}
