package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{3}, Spread{3, 3, 3}},
		{[]float64{3, 1, 2}, Spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4}}, // even count: mean of the middle two
		{[]float64{5, 5, 1, 9, 5}, Spread{5, 1, 9}},
		{[]float64{-2, 10, 0}, Spread{0, -2, 10}},
	} {
		in := slices.Clone(tc.xs)
		if got := SpreadOf(tc.xs); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("SpreadOf modified its input: %v, was %v", tc.xs, in)
		}
	}
}

func TestVersus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		u, p   Spread
		higher bool
		tol    float64
		want   verdict
	}{
		{"apart, higher wins", Spread{10, 9, 11}, Spread{7, 6, 8}, true, 0, won},
		{"apart, higher loses", Spread{7, 6, 8}, Spread{10, 9, 11}, true, 0, lost},
		{"apart, lower wins", Spread{7, 6, 8}, Spread{10, 9, 11}, false, 0, won},
		{"apart, lower loses", Spread{10, 9, 11}, Spread{7, 6, 8}, false, 0, lost},
		{"overlap: tie though the median is better", Spread{10, 7.5, 11}, Spread{7, 6, 8}, true, 0, tie},
		{"overlap: tie though the median is worse", Spread{7, 6, 8}, Spread{10, 7.9, 11}, true, 0, tie},
		{"touching ends tie", Spread{10, 8, 11}, Spread{7, 6, 8}, true, 0, tie},
		{"one seed each, equal", Spread{5, 5, 5}, Spread{5, 5, 5}, true, 0, tie},
		{"one seed each, differ", Spread{5, 5, 5}, Spread{4.99, 4.99, 4.99}, true, 0, won},
		{"within the tolerance", Spread{13.61, 13.61, 13.61}, Spread{13.62, 13.62, 13.62}, true, 0.001, tie},
		{"beyond the tolerance", Spread{13.50, 13.50, 13.50}, Spread{13.62, 13.62, 13.62}, true, 0.001, lost},
	} {
		if got := versus(tc.u, tc.p, tc.higher, tc.tol); got != tc.want {
			t.Errorf("%s: versus(%+v, %+v, higher %v) = %v, want %v", tc.name, tc.u, tc.p, tc.higher, got, tc.want)
		}
	}
}

func TestFmtSpread(t *testing.T) {
	for _, tc := range []struct {
		s    Spread
		want string
	}{
		{Spread{2, 1, 3}, "2.00 (1.00–3.00)"},
		{Spread{2, 2, 2}, "2.00"},
		{Spread{2, 1.999, 2.001}, "2.00"}, // below the printed precision
	} {
		if got := fmtSpread(tc.s, f2); got != tc.want {
			t.Errorf("fmtSpread(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestGoalOverSeeds runs the goal check on hand-made results of three seeds per
// configuration: the best configurations are chosen by median, overlapping ranges tie, ranges
// apart decide, thresholds are judged on the median with a note when the seeds disagree, and
// the seed-by-seed counts are reported.
func TestGoalOverSeeds(t *testing.T) {
	type run struct {
		seed     uint64
		reqs     float64
		p99      time.Duration
		hit, imb float64
	}
	var results []*Result
	add := func(router string, runs ...run) {
		for _, x := range runs {
			results = append(results, &Result{
				Workload: "w", Rate: 4, Policy: "fcfs", Router: router, Seed: x.seed,
				Sent: 100, Completed: 100, ReqPerSec: x.reqs, TTFT: Percentiles{P99: x.p99},
				HitRate: x.hit, IdealHitRate: 0.5, LoadImbalance: x.imb,
			})
		}
	}
	// usher: throughput overlaps the peer's, p99 lower on every seed, hit/ideal 0.92 median
	// but 0.86 on one seed, balance fine on every seed.
	add("usher",
		run{1, 10.0, 5 * time.Second, 0.46, 1.10},
		run{2, 12.0, 6 * time.Second, 0.43, 1.20},
		run{3, 11.0, 4 * time.Second, 0.47, 1.15})
	// usher-default: a higher best seed, a lower median: not usher's best.
	add("usher-default",
		run{1, 9.0, 3 * time.Second, 0.5, 1.0},
		run{2, 13.0, 3 * time.Second, 0.5, 1.0},
		run{3, 9.5, 3 * time.Second, 0.5, 1.0})
	add("sglang",
		run{1, 10.5, 8 * time.Second, 0.3, 1.3},
		run{2, 11.5, 9 * time.Second, 0.3, 1.3},
		run{3, 10.8, 7 * time.Second, 0.3, 1.3})
	add("dynamo", // fewer requests on the median: not the best peer
		run{1, 9.0, time.Second, 0.3, 1.0},
		run{2, 9.2, time.Second, 0.3, 1.0},
		run{3, 9.1, time.Second, 0.3, 1.0})
	if cs := Cells(results); len(cs) != 4 || len(cs[0].Runs) != 3 || cs[0].Router != "usher" || cs[3].Router != "dynamo" {
		t.Fatalf("Cells: %d cells, first %q with %d runs", len(cs), cs[0].Router, len(cs[0].Runs))
	}
	var b strings.Builder
	if err := WriteGoal(&b, results); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| usher's best | fcfs | usher | 11.00 (10.00–12.00) | 5.00s (4.00s–6.00s) | 0.92 (0.86–0.94) | 1.15 (1.10–1.20) |",
		"| best peer | fcfs | sglang | 10.80 (10.50–11.50) | 8.00s (7.00s–9.00s) |",
		"Medians over 3 seeds",
		"throughput ≥ best peer's (11.00 (10.00–12.00) vs 10.80 (10.50–11.50) req/s; by seed usher ahead 2, level 0, behind 1): **tie**",
		"lower p99 TTFT (5.00s (4.00s–6.00s) vs 8.00s (7.00s–9.00s); by seed usher ahead 3, level 0, behind 0): **met**",
		"hit rate ≥ 90% of ideal (46.0% of 50.0%: 0.92): **met** on the median, not on every seed (0.86–0.94)",
		"max/mean load ≤ 1.25 (1.15 (1.10–1.20)): **met**\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("goal check lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteTables(&b, results); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{
		"median over 3 seeds (1, 2, 3)",
		"| fcfs | usher | 11.00 (10.00–12.00) |",
		"| fcfs | dynamo | 9.10 (9.00–9.20) |",
		"| fcfs | usher | 100 | 100 | 0 |", // admission counts equal on every seed: no range
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "| fcfs | usher |"); got != 3 {
		t.Errorf("tables have %d rows for fcfs × usher, want 3 (one per table, seeds merged)", got)
	}
}
