package prefixpeer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/usher-llm/usher/internal/benchcpu"
	"github.com/usher-llm/usher/prefixcache"
)

// benchIndexWith returns an index with the given number of backends, each holding
// background pairs of random blocks, so that probes miss the CPU caches as they would in a
// full index, and feed as Options.Feed, told of the background inserts too.
func benchIndexWith(tb testing.TB, backends, background int, feed prefixcache.Feed) (*prefixcache.Index, []prefixcache.HolderID) {
	ix, err := prefixcache.New(prefixcache.Options{MaxBytes: 1 << 30, Feed: feed})
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]prefixcache.HolderID, backends)
	for i := range ids {
		if ids[i], err = ix.AddBackend(fmt.Sprintf("b%d", i), 1<<20); err != nil {
			tb.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	chain := make([]prefixcache.BlockHash, 128)
	for n := 0; n < background; n += len(chain) {
		for i := range chain {
			chain[i] = prefixcache.BlockHash(r.Uint64())
		}
		if err := ix.Insert(ids[(n/len(chain))%backends], chain); err != nil {
			tb.Fatal(err)
		}
	}
	return ix, ids
}

// BenchmarkInsertFeed is prefixcache's BenchmarkInsert "existing" case without a Feed and with a
// Buffer as prefixcache.Options.Feed, drained every 64 inserts by the benchmark's own goroutine (a
// replication goroutine would drain it elsewhere): what reporting every insert for other
// gateway replicas adds, side by side.
func BenchmarkInsertFeed(b *testing.B) {
	const blocks = 128
	for _, withFeed := range []bool{false, true} {
		name := "feed=none"
		var fb *Buffer
		if withFeed {
			name, fb = "feed=buffer", NewBuffer(0)
		}
		b.Run(name, func(b *testing.B) {
			var feed prefixcache.Feed
			if fb != nil {
				feed = fb
			}
			ix, ids := benchIndexWith(b, 8, 1<<16, feed)
			chain := benchChain(rand.New(rand.NewPCG(5, 6)), blocks)
			_ = ix.Insert(ids[0], chain)
			discard := func(string, []prefixcache.BlockHash, bool) {}
			b.ReportAllocs()
			cpu := benchcpu.StartProcess()
			n := 0
			for b.Loop() {
				_ = ix.Insert(ids[0], chain)
				if n++; fb != nil && n%64 == 0 {
					fb.Drain(discard)
				}
			}
			cpu.Stop(b)
			if fb.Dropped() != 0 {
				b.Fatalf("dropped %d", fb.Dropped())
			}
		})
	}
}
