package prefixcache

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/usher-llm/usher/internal/benchcpu"
)

var sinkU64 uint64

func randTokens(r *rand.Rand, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = r.Uint32N(152064)
	}
	return t
}

func BenchmarkHashTokens(b *testing.B) {
	const blockSize = 16
	sizes := []int{2048, 32768}
	r := rand.New(rand.NewPCG(1, 2))
	seed := Seed("model", "", "")
	for _, n := range sizes {
		tokens := randTokens(r, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dst := make([]BlockHash, 0, n/blockSize)
			b.SetBytes(int64(n * 4))
			b.ReportAllocs()
			cpu := benchcpu.StartProcess()
			for b.Loop() {
				dst = HashTokens(dst[:0], seed, tokens, blockSize)
			}
			cpu.Stop(b)
		})
	}
	// The baseline: xxhash.Sum64 over the same bytes, block by block, with nothing chained.
	for _, n := range sizes {
		tokens := randTokens(r, n)
		buf := make([]byte, n*4)
		for i, t := range tokens {
			binary.LittleEndian.PutUint32(buf[i*4:], t)
		}
		b.Run("xxhash-baseline/"+fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			b.ReportAllocs()
			cpu := benchcpu.StartProcess()
			for b.Loop() {
				var acc uint64
				for off := 0; off < len(buf); off += blockSize * 4 {
					acc += xxhash.Sum64(buf[off : off+blockSize*4])
				}
				sinkU64 = acc
			}
			cpu.Stop(b)
		})
	}
}

// benchChain returns n pseudo-random block hashes drawn from r.
func benchChain(r *rand.Rand, n int) []BlockHash {
	c := make([]BlockHash, n)
	for i := range c {
		c[i] = BlockHash(r.Uint64())
	}
	return c
}

// benchIndex returns an index with the given number of backends, each holding
// background pairs of random blocks, so that probes miss the CPU caches as they would in a
// full index.
func benchIndex(tb testing.TB, backends, background int) (*Index, []HolderID) {
	ix, err := New(Options{MaxBytes: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]HolderID, backends)
	for i := range ids {
		if ids[i], err = ix.AddBackend(fmt.Sprintf("b%d", i), 1<<20); err != nil {
			tb.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	chain := make([]BlockHash, 128)
	for n := 0; n < background; n += len(chain) {
		for i := range chain {
			chain[i] = BlockHash(r.Uint64())
		}
		if err := ix.Insert(ids[(n/len(chain))%backends], chain); err != nil {
			tb.Fatal(err)
		}
	}
	return ix, ids
}

// BenchmarkMatch matches a 128-block chain at 8, 64 and 100 backends (100 takes the path for
// more than 64). all-hit, half-hit and miss match one chain over and over, so its entries stay
// in the CPU caches: every backend holds all of it, its first half, or none of it. cold
// matches coldChains distinct chains in turn, as traffic spread over many prompts does, in an
// index whose tables are far larger than the caches: each chain is held whole by two
// backends (half the ids apart, so at 100 backends usually in different words) and its first
// half by a third.
func BenchmarkMatch(b *testing.B) {
	const blocks = 128
	for _, backends := range []int{8, 64, 100} {
		ix, ids := benchIndex(b, backends, 1<<18)
		r := rand.New(rand.NewPCG(3, 4))
		all := benchChain(r, blocks)
		half := benchChain(r, blocks)
		miss := benchChain(r, blocks)
		for _, id := range ids {
			_ = ix.Insert(id, all)
			_ = ix.Insert(id, half[:blocks/2])
		}
		for _, c := range []struct {
			name  string
			chain []BlockHash
		}{{"all-hit", all}, {"half-hit", half}, {"miss", miss}} {
			b.Run(fmt.Sprintf("backends=%d/%s", backends, c.name), func(b *testing.B) {
				dst := make([]int32, 0, int(ix.bound.Load()))
				b.ReportAllocs()
				cpu := benchcpu.StartProcess()
				for b.Loop() {
					dst = ix.Match(dst, c.chain)
				}
				cpu.Stop(b)
			})
		}
		ix = nil
		b.Run(fmt.Sprintf("backends=%d/cold", backends), func(b *testing.B) {
			ix, chains := coldIndex(b, backends, blocks)
			dst := make([]int32, 0, int(ix.bound.Load()))
			b.ReportAllocs()
			cpu := benchcpu.StartProcess()
			n := 0
			for b.Loop() {
				dst = ix.Match(dst, chains[n%len(chains)])
				n++
			}
			cpu.Stop(b)
		})
	}
}

// coldChains is how many distinct chains the cold benchmarks cycle through: 4,096 chains of
// 128 blocks are 524,288 blocks, some 20 MiB of tables.
const coldChains = 4096

// coldIndex returns an index of the given number of backends holding coldChains random chains
// of the given length (see BenchmarkMatch), and the chains.
func coldIndex(tb testing.TB, backends, blocks int) (*Index, [][]BlockHash) {
	ix, ids := benchIndex(tb, backends, 0)
	r := rand.New(rand.NewPCG(13, 14))
	chains := make([][]BlockHash, coldChains)
	for c := range chains {
		chains[c] = benchChain(r, blocks)
		_ = ix.Insert(ids[c%backends], chains[c])
		_ = ix.Insert(ids[(c+backends/2)%backends], chains[c])
		_ = ix.Insert(ids[(c+1)%backends], chains[c][:blocks/2])
	}
	return ix, chains
}

func BenchmarkInsert(b *testing.B) {
	const blocks = 128
	b.Run("new", func(b *testing.B) {
		// 128 new blocks (a chain never seen) into a backend at its capacity of 65,536 blocks,
		// so that every timed insert also evicts 128 blocks: the steady state of a busy server.
		// It is the only backend holding blocks, so the tables (about 2.5 MiB) stay warm in a
		// large L2; new-cold is the same with eight times the tables.
		ix, ids := benchIndex(b, 8, 0)
		_ = ix.SetCapacity(ids[0], 1<<16)
		r := rand.New(rand.NewPCG(5, 6))
		chain := make([]BlockHash, blocks)
		for range 2 * (1 << 16) / blocks {
			for i := range chain {
				chain[i] = BlockHash(r.Uint64())
			}
			_ = ix.Insert(ids[0], chain)
		}
		b.ReportAllocs()
		cpu := benchcpu.StartProcess()
		for b.Loop() {
			for i := range chain {
				chain[i] = BlockHash(r.Uint64())
			}
			_ = ix.Insert(ids[0], chain)
		}
		cpu.Stop(b)
	})
	b.Run("new-cold", func(b *testing.B) {
		// new over 8 backends, each at its capacity of 65,536 blocks, taken in turn: every op
		// inserts a chain never seen and evicts 128 blocks, in tables of 524,288 entries (some
		// 20 MiB), far larger than the CPU caches.
		const backends = 8
		ix, ids := benchIndex(b, backends, 0)
		r := rand.New(rand.NewPCG(5, 6))
		chain := make([]BlockHash, blocks)
		for _, id := range ids {
			_ = ix.SetCapacity(id, 1<<16)
		}
		for n := range backends * 2 * (1 << 16) / blocks {
			for i := range chain {
				chain[i] = BlockHash(r.Uint64())
			}
			_ = ix.Insert(ids[n%backends], chain)
		}
		b.ReportAllocs()
		cpu := benchcpu.StartProcess()
		n := 0
		for b.Loop() {
			for i := range chain {
				chain[i] = BlockHash(r.Uint64())
			}
			_ = ix.Insert(ids[n%backends], chain)
			n++
		}
		cpu.Stop(b)
	})
	b.Run("new-below-capacity", func(b *testing.B) {
		// 128 new blocks into a backend far below its capacity, so nothing is evicted: the
		// insert alone. Every 512 inserts (65,536 blocks) the backend is cleared outside the
		// timer and the CPU meter, so the index stays at a realistic size. One such round runs
		// before the timer, so the tables and the ring (which ApplyCleared keeps) have grown
		// to their size: growth is amortised O(1) per block, but a benchmark loop of a few
		// thousand inserts would charge it all to itself.
		ix, ids := benchIndex(b, 8, 0)
		r := rand.New(rand.NewPCG(5, 6))
		chain := make([]BlockHash, blocks)
		fill := func() {
			for i := range chain {
				chain[i] = BlockHash(r.Uint64())
			}
			_ = ix.Insert(ids[0], chain)
		}
		for range 511 {
			fill()
		}
		_ = ix.ApplyCleared(ids[0])
		b.ReportAllocs()
		cpu := benchcpu.StartProcess()
		n := 0
		for b.Loop() {
			if n++; n%512 == 0 {
				b.StopTimer()
				cpu.Exclude(func() { _ = ix.ApplyCleared(ids[0]) })
				b.StartTimer()
			}
			fill()
		}
		cpu.Stop(b)
	})
	b.Run("existing", func(b *testing.B) {
		ix, ids := benchIndex(b, 8, 1<<16)
		chain := benchChain(rand.New(rand.NewPCG(5, 6)), blocks)
		_ = ix.Insert(ids[0], chain)
		b.ReportAllocs()
		cpu := benchcpu.StartProcess()
		for b.Loop() {
			_ = ix.Insert(ids[0], chain)
		}
		cpu.Stop(b)
	})
}

// BenchmarkMatchParallel mixes 90% Match with 10% Insert (recording a routed request) from
// every P. Each of 256 conversations is served by one of 4 backends (sticky routing), all
// recorded before the timer starts, so the timed inserts refresh existing blocks as they would
// in a steady state.
func BenchmarkMatchParallel(b *testing.B) {
	const blocks = 128
	ix, ids := benchIndex(b, 64, 1<<18)
	r := rand.New(rand.NewPCG(9, 10))
	chains := make([][]BlockHash, 256)
	home := func(c, k int) HolderID { return ids[(c+16*k)%len(ids)] }
	for i := range chains {
		chains[i] = benchChain(r, blocks)
		for k := range 4 {
			_ = ix.Insert(home(i, k), chains[i])
		}
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := benchcpu.StartProcess()
	b.RunParallel(func(pb *testing.PB) {
		lr := rand.New(rand.NewPCG(seq.Add(1), 11))
		dst := make([]int32, 0, int(ix.bound.Load()))
		for pb.Next() {
			c := lr.IntN(len(chains))
			if lr.IntN(10) == 0 {
				_ = ix.Insert(home(c, lr.IntN(4)), chains[c])
				continue
			}
			dst = ix.Match(dst, chains[c])
		}
	})
	cpu.Stop(b)
}

// BenchmarkApplyEvents applies a toy engine's KV events to an index in exact mode, one event
// per op: usher's hashes recomputed from the tokens, the engine→usher map updated, blocks
// inserted or removed. "gpu" is an engine without offloading; "mixed" one that copies every
// block to a CPU tier four times the GPU's, as vLLM's CPU offloading does, so that about half
// of the events are about CPU blocks. The engine serves 512 conversation-shaped prompts of up
// to 32 blocks of 16 tokens on 1,024 GPU blocks; the cycle ends with a clear, so the loop runs
// in steady state.
func BenchmarkApplyEvents(b *testing.B) {
	const blockSize, gpuBlocks, requests = 16, 1024, 512
	for _, c := range []struct {
		name      string
		cpuBlocks int
	}{{"gpu", 0}, {"mixed", 4 * gpuBlocks}} {
		r := rand.New(rand.NewPCG(5, 6))
		eng := newToyEngine(1, blockSize, gpuBlocks, c.cpuBlocks)
		var events []toyEvent
		for _, p := range toyPrompts(r, requests, blockSize, 32, 4) {
			events = eng.serve(p, events)
		}
		events = append(events, eng.clearAll())
		b.Run(c.name, func(b *testing.B) {
			ix, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			id, _ := ix.AddBackend("pod-0", gpuBlocks)
			for _, ev := range events { // warm the tables
				if err := ev.apply(ix, id); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu := benchcpu.StartProcess()
			i, blocks, errs := 0, 0, 0
			for b.Loop() {
				ev := events[i%len(events)]
				if ev.apply(ix, id) != nil {
					errs++
				}
				blocks += ev.blocks()
				i++
			}
			cpu.Stop(b)
			b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
			if errs != 0 {
				b.Fatalf("%d of %d events failed", errs, i)
			}
		})
	}
}
