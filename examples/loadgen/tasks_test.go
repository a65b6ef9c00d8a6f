package main

import (
	"testing"
	"time"
)

// TestTaskStats walks sessions through each way a task ends, on a fixed clock: completed
// (its times counted), abandoned by a shed turn, a failed turn or a think time past the idle
// limit, censored by the run's end (a turn cut short, or the next turn not sent with its idle
// limit not yet passed), and not started (not counted).
func TestTaskStats(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	session := func(thinks ...time.Duration) Session {
		s := Session{Turns: []Turn{{}}}
		for _, th := range thinks {
			s.Turns = append(s.Turns, Turn{Think: th})
		}
		return s
	}
	ok := func(sess int32, pos int, sent, done float64) result {
		return result{sess: sess, pos: pos, sent: at(sent), finished: at(done)}
	}
	shed := func(sess int32, pos int, sent, done float64) result {
		r := ok(sess, pos, sent, done)
		r.err, r.status, r.rej503 = "HTTP 503: expired", 503, 1
		return r
	}
	failed := func(sess int32, pos int, sent, done float64) result {
		r := ok(sess, pos, sent, done)
		r.err = "stream ended without [DONE]: EOF"
		return r
	}
	cut := func(sess int32, pos int, sent, done float64) result {
		r := ok(sess, pos, sent, done)
		r.err, r.cut = "cancelled: context canceled", true
		return r
	}
	const idle = 10 * time.Second
	sessions := []Session{
		0: session(2*time.Second, 3*time.Second), // completed: 0–1, 3–5, 8–10
		1: session(time.Second, time.Second),     // completed: 1–4, 5–7, 8–9
		2: session(time.Second),                  // abandoned: its second turn shed
		3: session(time.Second),                  // abandoned: its first turn failed
		4: session(20 * time.Second),             // abandoned: its think time is past the limit
		5: session(time.Second, time.Second),     // censored: its third turn cut short
		6: session(5 * time.Second),              // censored: its second turn not sent, due before the run's end
		7: session(30 * time.Second),             // censored: the limit had not passed at the end (95 + 10 > 100)
		8: session(time.Second),                  // not started
		9: session(30 * time.Second),             // abandoned: not sent, the limit passed before the end (50 + 10 ≤ 100)
	}
	results := []result{
		ok(0, 0, 0, 1), ok(0, 1, 3, 5), ok(0, 2, 8, 10),
		ok(1, 0, 1, 4), ok(1, 1, 5, 7), ok(1, 2, 8, 9),
		ok(2, 0, 2, 3), shed(2, 1, 4, 24),
		failed(3, 0, 3, 4),
		ok(4, 0, 4, 5), ok(4, 1, 25, 26),
		ok(5, 0, 90, 91), ok(5, 1, 92, 93), cut(5, 2, 94, 100),
		ok(6, 0, 96, 97),
		ok(7, 0, 90, 95),
		ok(9, 0, 40, 50),
	}
	got := taskStats(sessions, results, idle, runEnd(results))
	want := TaskStats{Sessions: 9, Completed: 2, Abandoned: 4, Censored: 3, AbandonedShare: 4.0 / 6, IdleLimitMs: 10000}
	if got.Sessions != want.Sessions || got.Completed != want.Completed || got.Abandoned != want.Abandoned ||
		got.Censored != want.Censored || got.AbandonedShare != want.AbandonedShare || got.IdleLimitMs != want.IdleLimitMs {
		t.Errorf("taskStats = %+v\nwant counts %+v", got, want)
	}
	// Task times 10 s and 8 s; sums of response times 1+2+2 = 5 s and 3+2+1 = 6 s.
	if got.Time.Count != 2 || got.Time.Mean != 9000 || got.Time.Max != 10000 || got.Response.Mean != 5500 || got.Response.Max != 6000 {
		t.Errorf("times %+v, responses %+v; want task times 8 s and 10 s, sums 5 s and 6 s", got.Time, got.Response)
	}
	// Without an idle limit session 4 completes (its second turn answered), and 9, never
	// sent, is censored.
	got = taskStats(sessions, results, 0, runEnd(results))
	if got.Completed != 3 || got.Abandoned != 2 || got.Censored != 4 {
		t.Errorf("no idle limit: %+v, want 3 completed, 2 abandoned, 4 censored", got)
	}
}

// The default idle limit is twice the longest think time, as the simulator's.
func TestDefaultIdle(t *testing.T) {
	s := []Session{
		{Turns: []Turn{{Think: time.Hour}, {Think: 2 * time.Second}}}, // a first turn's think is ignored
		{Turns: []Turn{{}, {Think: 3 * time.Second}, {Think: time.Second}}},
		{},
	}
	if got := defaultIdle(s); got != 6*time.Second {
		t.Errorf("defaultIdle = %v, want 6s", got)
	}
}
