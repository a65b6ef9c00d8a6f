package rekey

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
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
					if !(set) {
						t.Fatalf("seed %d op %d: owner %d due but not set: false, want true", seed, op, v.id)
					}
					if at.After(now) {
						t.Fatalf("seed %d op %d: owner %d due early: true, want false", seed, op, v.id)
					}
					if at.Before(last) {
						t.Fatalf("seed %d op %d: owner %d out of time order: true, want false", seed, op, v.id)
					}
					if !(v.tm.At().IsZero()) {
						t.Fatalf("a due timer is cleared: false, want true")
					}
					last = at
					delete(want, v.id)
				}
				for id, a := range want {
					if !(a.After(now)) {
						t.Fatalf("seed %d op %d: owner %d left due: false, want true", seed, op, id)
					}
				}
			}
			for id, a := range want {
				if !(a.Equal(owners[id].tm.At())) {
					t.Fatalf("seed %d op %d: owner %d's At %v, want %v: false, want true", seed, op, id, owners[id].tm.At(), a)
				}
			}
			if ts.Len() > 2*len(want)+65 {
				t.Fatalf("seed %d op %d: stale entries unbounded: got %v, want at most %v", seed, op, ts.Len(), 2*len(want)+65)
			}
		}
	}
}

func TestRekeyTimersEdges(t *testing.T) {
	var ts Timers[int]
	var tm Timer
	at := time.Unix(100, 0)
	ts.Set(&tm, at, 1)
	ts.Set(&tm, at, 1)
	if !reflect.DeepEqual(ts.Len(), 1) {
		t.Fatalf("setting the same time again pushes nothing: got %v, want %v", ts.Len(), 1)
	}
	_, ok := ts.Due(at.Add(-time.Nanosecond))
	if ok {
		t.Fatalf("not due before its time: true, want false")
	}
	v, ok := ts.Due(at)
	if !(ok) {
		t.Fatalf("false, want true")
	}
	if !reflect.DeepEqual(v, 1) {
		t.Fatalf("got %v, want %v", v, 1)
	}
	_, ok = ts.Due(at.Add(time.Hour))
	if ok {
		t.Fatalf("a taken timer does not fire twice: true, want false")
	}

	ts.Set(&tm, time.Unix(0, 0).Add(1<<63-1).Add(time.Hour), 2) // past UnixNano's range: no limit
	if !(tm.At().IsZero()) {
		t.Fatalf("false, want true")
	}
	ts.Set(&tm, time.Unix(-5, 0), 3) // before the epoch is a time like any other
	v, ok = ts.Due(time.Unix(0, 0))
	if !(ok) {
		t.Fatalf("false, want true")
	}
	if !reflect.DeepEqual(v, 3) {
		t.Fatalf("got %v, want %v", v, 3)
	}
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
	if testing.AllocsPerRun(50, cycle) != 0 {
		t.Fatalf("timers allocate once grown: got %v, want 0", testing.AllocsPerRun(50, cycle))
	}
}
