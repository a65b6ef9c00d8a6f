package bench

import (
	"math"
	"testing"
	"time"
)

func TestGoalAttains(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name        string
		ttft, e2e   time.Duration
		output      int
		tight, relx bool
	}{
		{"both met", 900 * ms, 900*ms + 99*20*ms, 100, true, true},
		{"ttft at the target", time.Second, time.Second + 99*25*ms, 100, true, true},
		{"ttft just over tight", time.Second + 1, time.Second + 99*25*ms, 100, false, true},
		{"tpot just over tight", 500 * ms, 500*ms + 99*25*ms + 99, 100, false, true},
		{"tpot over relaxed", 500 * ms, 500*ms + 99*51*ms, 100, false, false},
		{"ttft over relaxed", 3*time.Second + 1, 3*time.Second + 1, 1, false, false},
		{"one token: no tpot", 200 * ms, 10 * time.Second, 1, true, true},
		{"two tokens", 200 * ms, 200*ms + 30*ms, 2, false, true},
	} {
		if got := TightGoal.Attains(c.ttft, c.e2e, c.output); got != c.tight {
			t.Errorf("%s: tight: got %v, want %v", c.name, got, c.tight)
		}
		if got := RelaxedGoal.Attains(c.ttft, c.e2e, c.output); got != c.relx {
			t.Errorf("%s: relaxed: got %v, want %v", c.name, got, c.relx)
		}
	}
	if got := (Goal{}).Attains(time.Hour, 2*time.Hour, 10); !got {
		t.Error("the zero Goal: got false, want true (no targets)")
	}
}

func TestSearchGoodput(t *testing.T) {
	for _, knee := range []float64{0.02, 0.1, 0.77, 1, 1.3, 4.2, 17, 63.9} {
		for _, smooth := range []bool{false, true} {
			calls := 0
			// Monotone: 1 up to the knee, then falling; the share of 0.9 is crossed exactly at
			// the knee.
			attain := func(r float64) (float64, error) {
				calls++
				if r <= knee {
					return 1, nil
				}
				if smooth {
					return 0.9 * knee / r, nil // just under the share past the knee
				}
				return 0, nil
			}
			got, pts, err := SearchGoodput(attain, GoodputOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got > knee || got < knee/1.025 {
				t.Errorf("knee %g (smooth %v): got %g, want in [%g, %g]", knee, smooth, got, knee/1.025, knee)
			}
			if len(pts) != calls || calls > 14 {
				t.Errorf("knee %g: %d points, %d calls: want equal and at most 14", knee, len(pts), calls)
			}
		}
	}
	// Out of range.
	never := func(float64) (float64, error) { return 0.5, nil }
	if got, _, _ := SearchGoodput(never, GoodputOptions{}); got != 0 {
		t.Errorf("never met: got %g, want 0", got)
	}
	always := func(float64) (float64, error) { return 0.95, nil }
	if got, _, _ := SearchGoodput(always, GoodputOptions{Start: 2, Max: 10}); got != 10 {
		t.Errorf("always met: got %g, want Max 10", got)
	}
	// A finer step.
	got, _, _ := SearchGoodput(func(r float64) (float64, error) { return math.Max(0, 1-r/10), nil }, GoodputOptions{Step: 0.001, Share: 0.5})
	if got > 5 || got < 5/1.001 {
		t.Errorf("linear: got %g, want 5 within 0.1%%", got)
	}
	if _, _, err := SearchGoodput(always, GoodputOptions{Share: 2}); err == nil {
		t.Error("share 2: got no error")
	}
}

func TestGoodputRuns(t *testing.T) {
	spec := GoodputSpec{
		Workload: func(seed uint64) *Workload { return Chat(ChatOptions{Seed: seed}).Head(150) },
		Config:   func(uint64) Config { return Config{Servers: 2, Profile: Qwen3Profile()} },
		Seeds:    []uint64{DefaultSeed},
		Options:  GoodputOptions{Step: 0.1},
	}
	res, err := Goodput(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Goal != TightGoal || res[1].Goal != RelaxedGoal {
		t.Fatalf("got %+v, want the tight and the relaxed goal", res)
	}
	if res[0].PerServer <= 0 || res[1].PerServer < res[0].PerServer {
		t.Errorf("goodput per server: tight %g, relaxed %g: want 0 < tight ≤ relaxed", res[0].PerServer, res[1].PerServer)
	}
	for _, p := range res[0].Points[0] {
		if p.Rate == res[0].Multipliers[0] && p.Attainment < 0.9 {
			t.Errorf("the goodput's multiplier %g attained %g, want ≥ 0.9", p.Rate, p.Attainment)
		}
	}
}
