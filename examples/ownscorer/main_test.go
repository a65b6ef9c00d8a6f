package main

import (
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
)

// TestIdleBonusChangesPicks blends fewest-streams with a queue scorer over two backends: "idle"
// has nothing of this gateway's in flight but a queue of 4, "busy" one request in flight and an
// empty queue. Without the bonus the queue scorer wins (busy: 0.5 + 0.6 against idle: 1); with
// idle_bonus 1 the idle backend does (1 against 0.25 + 0.6).
func TestIdleBonusChangesPicks(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		bonus float64
		want  string
	}{{0, "busy"}, {1, "idle"}} {
		s, err := newFewestStreams(tc.bonus)
		if err != nil {
			t.Fatal(err)
		}
		r, err := routing.New(routing.Options{
			Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: s, Weight: 1}, {Scorer: load.QueueDepth(), Weight: 0.6}}},
			Now:     func() time.Time { return now },
			Seed:    1,
		})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Update([]routing.BackendState{
			{Name: "idle", Health: routing.Healthy, Known: routing.SignalQueued, Queued: 4, UpdatedAt: now},
			{Name: "busy", Health: routing.Healthy, Known: routing.SignalQueued, Queued: 0, UpdatedAt: now},
		})
		if err != nil {
			t.Fatal(err)
		}
		idle, _ := r.Lookup("idle")
		held, err := r.Pick(&routing.Request{Exclude: []routing.BackendID{idle}})
		if err != nil || held.Backend.Name != "busy" {
			t.Fatalf("bonus %v: the first pick went to %v (%v), want busy", tc.bonus, held.Backend, err)
		}
		got, err := r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Backend.Name != tc.want {
			t.Errorf("idle_bonus %v: picked %s (score %.3f), want %s", tc.bonus, got.Backend.Name, got.Score, tc.want)
		}
		got.Done(routing.DoneInfo{})
		held.Done(routing.DoneInfo{})
	}
}

func TestScoresStayInUnitRange(t *testing.T) {
	for _, bonus := range []float64{0, 0.5, 3} {
		s, err := newFewestStreams(bonus)
		if err != nil {
			t.Fatal(err)
		}
		cands := []routing.Candidate{{InFlight: routing.InFlight{Requests: 0}}, {InFlight: routing.InFlight{Requests: 1}}, {InFlight: routing.InFlight{Requests: 9}}}
		dst := make([]float64, len(cands))
		s.Score(&routing.Request{}, cands, dst)
		for i, v := range dst {
			if !(v >= 0 && v <= 1) {
				t.Errorf("idle_bonus %v: candidate %d scores %v, want it in [0, 1]", bonus, i, v)
			}
		}
		if dst[0] != 1 {
			t.Errorf("idle_bonus %v: an idle backend scores %v, want 1", bonus, dst[0])
		}
	}
	if _, err := newFewestStreams(-1); err == nil {
		t.Error("idle_bonus -1 accepted")
	}
}
