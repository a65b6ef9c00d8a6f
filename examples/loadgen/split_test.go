package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/bench"
)

// TestSplitStats splits a run at 30 s on a fixed clock: turns go to the phase in which they
// were sent (an answer after the split stays before it), cut turns are left out, and a
// session is over at the split when its last answer before the split came an idle limit
// before it.
func TestSplitStats(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	res := func(sess int32, turn int, sent, ttft, done float64) result {
		return result{sess: sess, turn: turn, pos: turn, sent: at(sent), ttft: time.Duration(ttft * float64(time.Second)), finished: at(done)}
	}
	shed := res(4, 0, 31, 0, 32)
	shed.err, shed.status, shed.rej429 = "HTTP 429", 429, 1
	cut := res(5, 1, 35, 0, 40)
	cut.err, cut.cut = "cancelled", true
	results := []result{
		res(0, 0, 1, 1, 2), res(0, 1, 3, 2, 5), // over at 15 s: over by the split
		res(1, 0, 10, 1, 12), res(1, 1, 25, 4, 31), // answered after the split: before it, not over
		res(2, 0, 15, 1, 21), // answered at 21 s: over at 31 s, after the split
		res(3, 0, 29, 2, 33), res(3, 1, 40, 6, 50),
		shed,
		res(5, 0, 33, 1, 34), cut,
	}
	got := splitStats(results, t0, 30*time.Second, 10*time.Second)
	want := SplitStats{AtMs: 30000, Ended: 1,
		Before: Phase{FirstSent: 4, LaterSent: 2},
		After:  Phase{FirstSent: 2, FirstShed: 1, LaterSent: 1},
	}
	if got.AtMs != want.AtMs || got.Ended != want.Ended ||
		got.Before.FirstSent != want.Before.FirstSent || got.Before.LaterSent != want.Before.LaterSent || got.Before.FirstShed != 0 ||
		got.After.FirstSent != want.After.FirstSent || got.After.FirstShed != want.After.FirstShed || got.After.LaterSent != want.After.LaterSent {
		t.Errorf("splitStats = %+v\nwant counts %+v", got, want)
	}
	if b, a := got.Before, got.After; b.FirstTTFT.Count != 4 || b.FirstTTFT.Max != 2000 || b.LaterTTFT.Max != 4000 ||
		a.FirstTTFT.Count != 1 || a.FirstTTFT.Max != 1000 || a.LaterTTFT.Count != 1 || a.LaterTTFT.Max != 6000 {
		t.Errorf("TTFTs before %+v / %+v, after %+v / %+v", b.FirstTTFT, b.LaterTTFT, a.FirstTTFT, a.LaterTTFT)
	}
	if got := splitStats(results, t0, 30*time.Second, 0); got.Ended != 0 {
		t.Errorf("no idle limit: %d sessions over, want 0", got.Ended)
	}

	// The frontier prints the split table only when a run has a split.
	rep := &Report{Split: &got}
	var b bytes.Buffer
	writeSplitTable(&b, []frontierRun{{label: "gittins", rep: rep}, {label: "gittins", rep: rep}, {label: "fcfs", rep: &Report{}}})
	if s := b.String(); !strings.Contains(s, "| gittins | 2 | 30s | 1 | 0 → 1 | 1.97s → 1.00s |") || strings.Contains(s, "fcfs") {
		t.Errorf("split table:\n%s", s)
	}
	b.Reset()
	writeSplitTable(&b, []frontierRun{{label: "fcfs", rep: &Report{}}})
	if b.Len() != 0 {
		t.Errorf("split table without a split:\n%s", b.String())
	}
}

// TestThinkScale replays the simulator's trace sessions with their think times halved: every
// later turn's think time is half the unscaled one, and nothing else changes.
func TestThinkScale(t *testing.T) {
	w, err := bench.LoadWorkload("trace-sessions", bench.LoadOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	opts := TraceOptions{Speed: 10, Window: time.Minute}
	plain, err := TraceSessions(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.ThinkScale = 0.5
	half, err := TraceSessions(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(half) != len(plain) {
		t.Fatalf("%d sessions scaled, %d not", len(half), len(plain))
	}
	later := 0
	for i := range plain {
		p, h := plain[i], half[i]
		if h.Start != p.Start || len(h.Turns) != len(p.Turns) {
			t.Fatalf("session %d: start %v, %d turns; unscaled %v, %d", i, h.Start, len(h.Turns), p.Start, len(p.Turns))
		}
		for k := 1; k < len(p.Turns); k++ {
			later++
			if got, want := h.Turns[k].Think, time.Duration(float64(p.Turns[k].Think)*0.5); got != want {
				t.Fatalf("session %d turn %d: think %v, want %v", i, k, got, want)
			}
		}
	}
	if later == 0 {
		t.Fatal("no later turn in the window")
	}
}
