package bench

import (
	"strings"
	"testing"
	"time"
)

func TestWriteGoal(t *testing.T) {
	mk := func(rate float64, policy, router string, sent, done, shedFirst int, p99 time.Duration, hit float64) *Result {
		return &Result{
			Rate: rate, Policy: policy, Router: router, Sent: sent, Completed: done,
			ReqPerSec: float64(done), TTFT: Percentiles{P99: p99},
			HitRate: hit, IdealHitRate: 0.4, LoadImbalance: 1.1,
			First: TurnStats{Expired: shedFirst},
		}
	}
	results := []*Result{
		mk(4, "fcfs", "sglang", 100, 100, 0, 10*time.Second, 0.2),
		mk(4, "fcfs", "usher-default", 100, 100, 0, 12*time.Second, 0.39),
		mk(4, "fcfs", "usher", 100, 100, 0, 8*time.Second, 0.38),
		mk(8, "turn-priority", "sglang", 100, 90, 10, 30*time.Second, 0.2),
		mk(8, "bounded-wait", "sglang", 100, 100, 0, 20*time.Second, 0.2), // no usher run at ×8
	}
	var b strings.Builder
	if err := WriteGoal(&b, results); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"knee (load ×4)",                  // ×8 sheds: the knee is ×4
		"| usher's best | fcfs | usher |", // the better of usher's two
		"| best peer | fcfs | sglang |",
		"lower p99 TTFT (8.00s vs 10.0s): **met**",
		"hit rate ≥ 90% of ideal (38.0% of 40.0%: 0.95): **met**",
		"| ×8 | sglang | 10 | 0 | 20.0% | 20.0% | 1.00 | met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("goal check lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteTables(&b, results); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "| fcfs | usher |"); got != 3 {
		t.Errorf("tables have %d rows for fcfs × usher, want 3 (performance, admission, newcomers against later turns)", got)
	}
}

// TestWriteTaskTable: runs with sessions get a row of sessions as tasks, the median over seeds
// with its range.
func TestWriteTaskTable(t *testing.T) {
	mk := func(seed uint64, mean time.Duration, abandoned int) *Result {
		return &Result{
			Rate: 24, Policy: "las", Router: "usher", Seed: seed, Sent: 10, Completed: 10,
			Tasks: TaskStats{Sessions: 10, Completed: 10 - abandoned - 1, Abandoned: abandoned, Censored: 1,
				TimeMean: mean, Time: Percentiles{P50: mean / 2, P90: 2 * mean}, ResponseMean: mean / 4,
				Response: Percentiles{P50: mean / 8, P90: mean / 2}},
		}
	}
	var b strings.Builder
	if err := WriteTables(&b, []*Result{mk(1, 100*time.Second, 1), mk(2, 120*time.Second, 3), mk(3, 110*time.Second, 3)}); err != nil {
		t.Fatal(err)
	}
	want := "| las | usher | 10 | 6 (6–8) | 33.3% (11.1%–33.3%) | 1 | 110s (100s–120s) | 55.0s (50.0s–60.0s) | 220s (200s–240s) | 27.5s (25.0s–30.0s) | 13.8s (12.5s–15.0s) | 55.0s (50.0s–60.0s) |"
	if out := b.String(); !strings.Contains(out, "sessions as tasks") || !strings.Contains(out, want) {
		t.Errorf("tables lack the task row\n%s\n:\n%s", want, out)
	}
}
