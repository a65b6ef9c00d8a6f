package rekey

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRekeyTimersModel runs random sets, moves, clears and due-takes against a map of owner →
// time: owners come out in time order, none early, none left behind, a taken timer is clear,
// and stale entries stay bounded.
func TestRekeyTimersModel(t *testing.T) {
	type owner struct {
		id int
		tm Timer
	}
	t0 := time.Unix(1_700_000_000, 0)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		owners := make([]*owner, 200)
		for i := range owners {
			owners[i] = &owner{id: i}
		}
		want := map[int]time.Time{}
		var ts Timers[*owner]
		now := t0
		for op := range 5000 {
			o := owners[rng.IntN(len(owners))]
			switch c := rng.IntN(10); {
			case c < 5: // set or move; some already due
				at := now.Add(time.Duration(rng.Int64N(100)-10) * time.Millisecond)
				ts.Set(&o.tm, at, o)
				want[o.id] = at
			case c < 6:
				if rng.IntN(2) == 0 {
					ts.Clear(&o.tm)
				} else {
					ts.Set(&o.tm, time.Time{}, o) // the zero Time clears too
				}
				delete(want, o.id)
			default:
				now = now.Add(time.Duration(rng.Int64N(5)) * time.Millisecond)
				last := time.Time{}
				for {
					v, ok := ts.Due(now)
					if !ok {
						break
					}
					at, set := want[v.id]
					require.True(t, set, "seed %d op %d: owner %d due but not set", seed, op, v.id)
					require.False(t, at.After(now), "seed %d op %d: owner %d due early", seed, op, v.id)
					require.False(t, at.Before(last), "seed %d op %d: owner %d out of time order", seed, op, v.id)
					require.True(t, v.tm.At().IsZero(), "a due timer is cleared")
					last = at
					delete(want, v.id)
				}
				for id, a := range want {
					require.True(t, a.After(now), "seed %d op %d: owner %d left due", seed, op, id)
				}
			}
			for id, a := range want {
				require.True(t, a.Equal(owners[id].tm.At()), "seed %d op %d: owner %d's At %v, want %v", seed, op, id, owners[id].tm.At(), a)
			}
			require.LessOrEqual(t, ts.Len(), 2*len(want)+65, "seed %d op %d: stale entries unbounded", seed, op)
		}
	}
}

func TestRekeyTimersEdges(t *testing.T) {
	var ts Timers[int]
	var tm Timer
	at := time.Unix(100, 0)
	ts.Set(&tm, at, 1)
	ts.Set(&tm, at, 1)
	require.Equal(t, 1, ts.Len(), "setting the same time again pushes nothing")
	_, ok := ts.Due(at.Add(-time.Nanosecond))
	require.False(t, ok, "not due before its time")
	v, ok := ts.Due(at)
	require.True(t, ok)
	require.Equal(t, 1, v)
	_, ok = ts.Due(at.Add(time.Hour))
	require.False(t, ok, "a taken timer does not fire twice")

	ts.Set(&tm, time.Unix(0, 0).Add(1<<63-1).Add(time.Hour), 2) // past UnixNano's range: no limit
	require.True(t, tm.At().IsZero())
	ts.Set(&tm, time.Unix(-5, 0), 3) // before the epoch is a time like any other
	v, ok = ts.Due(time.Unix(0, 0))
	require.True(t, ok)
	require.Equal(t, 3, v)
}

func TestRekeyTimersAllocs(t *testing.T) {
	var ts Timers[int]
	tms := make([]Timer, 256)
	t0 := time.Unix(1_700_000_000, 0)
	cycle := func() {
		for i := range tms {
			ts.Set(&tms[i], t0.Add(time.Duration(i*7919%256)*time.Millisecond), i)
		}
		for i := range tms { // move every one: the old entries go stale
			ts.Set(&tms[i], t0.Add(time.Duration(i)*time.Millisecond), i)
		}
		for _, ok := ts.Due(t0.Add(time.Second)); ok; _, ok = ts.Due(t0.Add(time.Second)) {
		}
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(50, cycle), "timers allocate once grown")
}
