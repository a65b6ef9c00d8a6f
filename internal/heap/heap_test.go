package heap

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
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
					require.Zero(t, h.Len(), "seed %d op %d: heap holds entries with nothing live", seed, op)
					continue
				}
				m := r.min()
				got := h.Pop()
				require.Equal(t, r.live[m], got, "seed %d op %d: pop", seed, op)
				r.live = slices.Delete(r.live, m, m+1)
			default: // the top, after dropping stale entries, is the minimum
				h.DropStale()
				if len(r.live) > 0 {
					require.Equal(t, r.live[r.min()], *h.Top(), "seed %d op %d: top", seed, op)
				} else {
					require.Nil(t, h.Top(), "seed %d op %d: top of an empty heap", seed, op)
				}
			}
			require.LessOrEqual(t, h.Len(), 2*len(r.live)+minCompact+1, "seed %d op %d: stale entries unbounded", seed, op)
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
	require.LessOrEqual(t, cap(h.h), 1000*5/4, "capacity past the limit")
	for i := range 1000 {
		require.Equal(t, i, h.Pop().Val, "pop %d", i)
	}
}

// TestTimersModel runs random sets, moves, clears and due-takes against a map of owner → time.
func TestTimersModel(t *testing.T) {
	type owner struct {
		id int
		tm Timer
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		owners := make([]*owner, 200)
		for i := range owners {
			owners[i] = &owner{id: i}
		}
		want := map[int]int64{}
		var ts Timers[*owner]
		now := int64(0)
		for op := range 5000 {
			o := owners[rng.IntN(len(owners))]
			switch c := rng.IntN(10); {
			case c < 5:
				at := now + rng.Int64N(100) - 10 // some already due, some ≤ 0 early on
				ts.Set(&o.tm, at, o)
				if at > 0 {
					want[o.id] = at
				} else {
					delete(want, o.id)
				}
			case c < 6:
				ts.Clear(&o.tm)
				delete(want, o.id)
			default:
				now += rng.Int64N(5)
				for {
					v, ok := ts.Due(now)
					if !ok {
						break
					}
					at, set := want[v.id]
					require.True(t, set, "seed %d op %d: owner %d due but not set", seed, op, v.id)
					require.LessOrEqual(t, at, now, "seed %d op %d: owner %d due early", seed, op, v.id)
					for id, a := range want { // nothing set earlier stays behind
						require.False(t, a < at, "seed %d op %d: owner %d (at %d) came before %d (at %d)", seed, op, v.id, at, id, a)
					}
					require.Zero(t, v.tm.At(), "a due timer is cleared")
					delete(want, v.id)
				}
				for id, a := range want {
					require.Greater(t, a, now, "seed %d op %d: owner %d left due", seed, op, id)
				}
			}
			for id, a := range want {
				require.Equal(t, a, owners[id].tm.At(), "seed %d op %d: owner %d's At", seed, op, id)
			}
			require.LessOrEqual(t, ts.Len(), 2*len(want)+minCompact+1, "seed %d op %d: stale entries unbounded", seed, op)
		}
	}
}

func TestTimersResetSameTime(t *testing.T) {
	var ts Timers[int]
	var tm Timer
	ts.Set(&tm, 5, 1)
	ts.Set(&tm, 5, 1)
	require.Equal(t, 1, ts.Len(), "setting the same time again pushes nothing")
	v, ok := ts.Due(4)
	require.False(t, ok, "not due before its time: got %d", v)
	v, ok = ts.Due(5)
	require.True(t, ok)
	require.Equal(t, 1, v)
	_, ok = ts.Due(100)
	require.False(t, ok, "a taken timer does not fire twice")
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
	require.Zero(t, allocs, "push and pop within capacity allocate")
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
