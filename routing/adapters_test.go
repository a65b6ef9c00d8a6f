package routing

import (
	"hash/maphash"
	"testing"
)

func TestAdapterTableFull(t *testing.T) {
	tb := adapterTable{seed: maphash.MakeSeed()}
	h := tb.hash("x")
	i0, _ := adapterSlot(h, 0)
	// Other pairs hold every word of the pair's window: it is not counted.
	for k := range adapterProbe {
		tb.words[(i0+k)&(adapterWords-1)].Store(0xdead<<32 | 1)
	}
	if j := tb.add(h, 0); j != -1 || tb.count(h, 0) != 0 {
		t.Errorf("full window: add = %d, count %d, want -1 and 0", j, tb.count(h, 0))
	}
	tb.release(int32((i0 + 3) & (adapterWords - 1)))
	j := tb.add(h, 0)
	if j != int32((i0+3)&(adapterWords-1)) || tb.count(h, 0) != 1 {
		t.Fatalf("one word free: add = %d, count %d, want word %d and 1", j, tb.count(h, 0), (i0+3)&(adapterWords-1))
	}
	if k := tb.add(h, 0); k != j || tb.count(h, 0) != 2 {
		t.Errorf("second request: add = %d, count %d, want the same word and 2", k, tb.count(h, 0))
	}
	tb.release(j)
	tb.release(j)
	if tb.count(h, 0) != 0 {
		t.Errorf("count after release = %d", tb.count(h, 0))
	}
}
