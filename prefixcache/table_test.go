package prefixcache

import (
	"math/rand/v2"
	"testing"
)

// TestTableModel drives one table through random inserts, updates and deletes (with
// rebuilds, as a shard does) and compares it with a map after every step.
func TestTableModel(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 3))
		ix := mustNew(t, Options{Shards: 1})
		sh := &ix.shards[0]
		want := map[uint64]uint64{}
		universe := 10 + r.IntN(300)
		for step := range 3000 {
			k := entryKey(uint64(r.IntN(universe)), 0)
			if r.IntN(2) == 0 {
				tb := ix.reserveLocked(sh, 1)
				i, added := tb.findOrAdd(k)
				if _, ok := want[k]; ok == added {
					t.Fatalf("seed %d step %d: findOrAdd(%#x) added %v, present before %v", seed, step, k, added, ok)
				}
				v := r.Uint64() | 1
				tb.set(i, v, v>>1)
				want[k] = v
			} else if tb := sh.tab.Load(); tb != nil {
				if i := tb.find(k); i >= 0 {
					tb.del(i)
				}
				delete(want, k)
			}
			tb := sh.tab.Load()
			if tb == nil {
				continue
			}
			if tb.count != len(want) {
				t.Fatalf("seed %d step %d: count %d, want %d", seed, step, tb.count, len(want))
			}
			for k, v := range want {
				if got := tb.readHold(k); got != v {
					t.Fatalf("seed %d step %d: key %#x hold %#x, want %#x", seed, step, k, got, v)
				}
			}
		}
	}
}
