package heap

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// ref is the naive reference: the live entries in a slice, the earliest found by a scan.
type ref struct{ live []Entry[int] }

func (r *ref) min() int {
	m := 0
	for i := range r.live {
		if less(&r.live[i], &r.live[m]) {
			m = i
		}
	}
	return m
}

// TestHeapModel runs random pushes, stale marks, pops and drops against the reference: after
// dropping stale entries the top is the reference's minimum, pops come out in order, and the
// heap never holds more than about twice the live entries.
func TestHeapModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		dead := map[int]bool{} // payload → stale
		var h Heap[int]
		h.Live = func(e *Entry[int]) bool { return !dead[e.Val] }
		var r ref
		next, seq := 0, uint64(0)
		for op := range 5000 {
			switch c := rng.IntN(10); {
			case c < 5: // push; few distinct times, so Seq breaks many ties
				seq++
				e := Entry[int]{At: rng.Int64N(50), Seq: seq, Val: next}
				next++
				h.Push(e.At, e.Seq, e.Val)
				r.live = append(r.live, e)
			case c < 7 && len(r.live) > 0: // an entry goes stale from anywhere
				i := rng.IntN(len(r.live))
				dead[r.live[i].Val] = true
				h.Stale()
				r.live = slices.Delete(r.live, i, i+1)
			case c < 9: // pop the earliest live entry
				h.DropStale()
				if len(r.live) == 0 {
					if h.Len() != 0 {
						t.Fatalf("seed %d op %d: heap holds entries with nothing live: got %v, want 0", seed, op, h.Len())
					}
					continue
				}
				m := r.min()
				got := h.Pop()
				if !reflect.DeepEqual(got, r.live[m]) {
					t.Fatalf("seed %d op %d: pop: got %v, want %v", seed, op, got, r.live[m])
				}
				r.live = slices.Delete(r.live, m, m+1)
			default: // the top, after dropping stale entries, is the minimum
				h.DropStale()
				if len(r.live) > 0 {
					if !reflect.DeepEqual(*h.Top(), r.live[r.min()]) {
						t.Fatalf("seed %d op %d: top: got %v, want %v", seed, op, *h.Top(), r.live[r.min()])
					}
				} else {
					if h.Top() != nil {
						t.Fatalf("seed %d op %d: top of an empty heap: got %v, want nil", seed, op, h.Top())
					}
				}
			}
			if h.Len() > 2*len(r.live)+minCompact+1 {
				t.Fatalf("seed %d op %d: stale entries unbounded: got %v, want at most %v", seed, op, h.Len(), 2*len(r.live)+minCompact+1)
			}
		}
	}
}

// TestHeapLimit checks that growth takes the whole limit once it is near, and never more.
func TestHeapLimit(t *testing.T) {
	h := Heap[int]{MaxLive: 468} // a limit of 1,000 entries
	for i := range 1000 {
		h.Push(int64(i), 0, i)
	}
	// Doubling from the last size below would overshoot by half; taking the limit at once
	// overshoots only by the allocator's rounding.
	if cap(h.h) > 1000*5/4 {
		t.Fatalf("capacity past the limit: got %v, want at most %v", cap(h.h), 1000*5/4)
	}
	for i := range 1000 {
		if !reflect.DeepEqual(h.Pop().Val, i) {
			t.Fatalf("pop %d: got %v, want %v", i, h.Pop().Val, i)
		}
	}
}

func TestPushPopAllocs(t *testing.T) {
	var h Heap[int]
	for i := range 1024 {
		h.Push(int64(i), 0, i)
	}
	for range 1024 {
		h.Pop()
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 512 {
			h.Push(int64(i*7919%512), uint64(i), i)
		}
		for range 512 {
			h.Pop()
		}
	})
	if allocs != 0 {
		t.Fatalf("push and pop within capacity allocate: got %v, want 0", allocs)
	}
}

func BenchmarkPushPop(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var h Heap[*int]
			x := uint64(1)
			rnd := func() int64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int64(x >> 20) }
			p := new(int)
			for i := range n {
				h.Push(rnd(), uint64(i), p)
			}
			seq := uint64(n)
			b.ReportAllocs()
			for b.Loop() {
				e := h.Pop()
				seq++
				h.Push(e.At+rnd()%1_000_000_000, seq, e.Val)
			}
		})
	}
}
