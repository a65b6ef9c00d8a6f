package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSlowdown checks that a slowed server's steps take Factor times as long: one server,
// slowed twice over from the start, gives answers whose time per output token is twice as long.
func TestSlowdown(t *testing.T) {
	w := tiny()
	base, err := Run(w, Config{Servers: 1})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := Run(w, Config{Servers: 1, Slowdowns: []Slowdown{{Server: 0, Factor: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slow.TPOT.P50.Seconds(), 2*base.TPOT.P50.Seconds(); got < 0.9*want || got > 1.1*want {
		t.Errorf("TPOT p50 slowed twice over = %.4fs, want about %.4fs (twice %v)", got, want, base.TPOT.P50)
	}
	restored, err := Run(w, Config{Servers: 1, Slowdowns: []Slowdown{{Server: 0, Factor: 1, At: time.Second}, {Server: 0, Factor: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if restored.TPOT.P50 >= slow.TPOT.P50 {
		t.Errorf("TPOT p50 restored after 1s = %v, want below the slowed run's %v", restored.TPOT.P50, slow.TPOT.P50)
	}
}

// TestSlowdownInvalid checks that Run refuses slowdowns it cannot apply.
func TestSlowdownInvalid(t *testing.T) {
	for _, d := range []Slowdown{
		{Server: 2, Factor: 2},
		{Server: -1, Factor: 2},
		{Server: 0, Factor: 0},
		{Server: 0, Factor: 2, At: -time.Second},
	} {
		if _, err := Run(tiny(), Config{Servers: 2, Slowdowns: []Slowdown{d}}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("slowdown %+v: err = %v, want ErrInvalidConfig", d, err)
		}
	}
}

// TestPredictionError checks Result.Prediction: nil for a router without a latency model; for
// one with, a span of every completed request and one of the first ColdRequests picks, and
// with a slowdown the spans before and after it, which split the requests between them.
func TestPredictionError(t *testing.T) {
	w := tiny()
	res, err := Run(w, Config{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Prediction != nil {
		t.Errorf("usher's run has prediction errors %+v, want none (it has no latency model)", res.Prediction)
	}
	for _, r := range []Router{LatencyRouter(), UsherLatencyRouter(UsherLatencyWeight)} {
		res, err := Run(w, Config{Servers: 2, Router: r, Slowdowns: []Slowdown{{Server: 1, Factor: 3, At: 20 * time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		all, ok := res.PredictionOf(SpanAll)
		if !ok || all.N != res.Completed || all.TTFT.P50 <= 0 || all.TTFT.P90 < all.TTFT.P50 || all.TTFTRel <= 0 || all.NTPOT == 0 {
			t.Errorf("%s: span %q = %+v (found %v), want every one of %d completed requests, positive errors", r.Name, SpanAll, all, ok, res.Completed)
		}
		if cold, _ := res.PredictionOf(SpanCold); cold.N != min(ColdRequests, res.Completed) {
			t.Errorf("%s: span %q holds %d requests, want %d", r.Name, SpanCold, cold.N, min(ColdRequests, res.Completed))
		}
		before, _ := res.PredictionOf(SpanBeforeSlow)
		after, _ := res.PredictionOf(SpanAfterSlow)
		first, _ := res.PredictionOf(SpanSlowedFirst)
		later, _ := res.PredictionOf(SpanSlowedLater)
		if before.N+after.N != all.N || before.N == 0 || after.N == 0 || first.N+later.N > after.N || first.N > SlowedHead {
			t.Errorf("%s: before %d + after %d ≠ all %d, or slowed %d + %d not within after", r.Name, before.N, after.N, all.N, first.N, later.N)
		}
	}
}

// TestPredictionTable checks that WriteTables adds the prediction-error table for the routers
// with a latency model, and only for them.
func TestPredictionTable(t *testing.T) {
	w := tiny()
	var results []*Result
	for _, r := range []Router{UsherRouter(), LatencyRouter()} {
		res, err := Run(w, Config{Servers: 2, Router: r})
		if err != nil {
			t.Fatal(err)
		}
		res.Rate = 1
		results = append(results, res)
	}
	var b strings.Builder
	if err := WriteTables(&b, results); err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(b.String(), "latency prediction error")
	if !ok {
		t.Fatalf("no prediction-error table in\n%s", b.String())
	}
	for _, want := range []string{"| fcfs | usher-latency | all |", "| fcfs | usher-latency | first 200 |"} {
		if !strings.Contains(table, want) {
			t.Errorf("prediction-error table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "| usher |") {
		t.Errorf("prediction-error table has a row for usher, which has no model:\n%s", table)
	}
}
