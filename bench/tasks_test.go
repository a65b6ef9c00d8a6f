package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

// sessionTurns returns the number of turns of each session of w.
func sessionTurns(w *Workload) []int {
	n := make([]int, w.Sessions)
	for i := range w.Requests {
		if s := w.Requests[i].Session; s >= 0 {
			n[s]++
		}
	}
	return slices.DeleteFunc(n, func(k int) bool { return k == 0 })
}

// hazard returns h[k] = P(N = k | N ≥ k) of the session lengths n, for k from 1 while some
// session runs k turns (h[0] is unused).
func hazard(n []int) []float64 {
	longest := slices.Max(n)
	ended := make([]int, longest+1)
	for _, k := range n {
		ended[k]++
	}
	h := make([]float64, longest+1)
	atRisk := len(n)
	for k := 1; k <= longest; k++ {
		if atRisk > 0 {
			h[k] = float64(ended[k]) / float64(atRisk)
		}
		atRisk -= ended[k]
	}
	return h
}

// TestTraceSessions checks the shipped trace's session lengths (issue 45's figures) and that
// TraceSessions keeps every request, closing each later turn on its previous one.
func TestTraceSessions(t *testing.T) {
	w, err := TraceSessions(MooncakeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.validate(); err != nil {
		t.Fatal(err)
	}
	n := sessionTurns(w)
	total := 0
	for _, k := range n {
		total += k
	}
	sorted := slices.Sorted(slices.Values(n))
	p99 := sorted[int(math.Ceil(0.99*float64(len(sorted))))-1]
	mean := float64(total) / float64(len(n))
	h := hazard(n)
	t.Logf("trace-sessions: %d sessions, %d turns, mean %.2f turns, p99 %d, longest %d", len(n), total, mean, p99, sorted[len(sorted)-1])
	for k := 1; k <= 10; k++ {
		t.Logf("hazard h(%d) = %.2f", k, h[k])
	}
	if len(n) != 7373 || math.Abs(mean-1.63) > 0.005 || p99 != 8 {
		t.Errorf("%d sessions, mean %.3f turns, p99 %d: want 7373, 1.63, 8", len(n), mean, p99)
	}
	if math.Abs(h[1]-0.69) > 0.005 {
		t.Errorf("h(1) = %.3f, want 0.69", h[1])
	}
	// A falling hazard: 0.69, 0.58, 0.49, 0.41, 0.41, 0.33, 0.24 for k = 1 … 7 (past 7 turns
	// too few sessions remain for a steady figure: 0.31, 0.17, 0.33).
	for k := 2; k <= 7; k++ {
		if h[k] > h[k-1] {
			t.Errorf("h(%d) = %.2f after h(%d) = %.2f: want a falling hazard", k, h[k], k-1, h[k-1])
		}
	}
	if math.Abs(h[7]-0.24) > 0.005 {
		t.Errorf("h(7) = %.3f, want 0.24", h[7])
	}
	closed, open := 0, 0
	for i := range w.Requests {
		r := &w.Requests[i]
		switch {
		case r.Prev >= 0:
			closed++
			if p := &w.Requests[r.Prev]; p.Session != r.Session || p.Turn != r.Turn-1 {
				t.Fatalf("request %d (session %d turn %d) follows session %d turn %d", i, r.Session, r.Turn, p.Session, p.Turn)
			}
		case r.Session >= 0:
			open++
		}
	}
	if open != 7373 || closed != total-7373 {
		t.Errorf("%d open-loop first turns and %d closed-loop turns, want 7373 and %d", open, closed, total-7373)
	}
}

// TestHazardShapes checks the hazard of the generated session lengths: rising for
// IncreasingHazard (0 before 6 turns, then 1/5, 1/4, 1/3, 1/2, 1), about constant at 1/20 for
// Agentic's geometric turns, the control.
func TestHazardShapes(t *testing.T) {
	inc := hazard(sessionTurns(IncreasingHazard(AgenticOptions{Seed: 1})))
	t.Logf("increasing-hazard: h(1…10) = %.2f", inc[1:])
	if len(inc) != 11 {
		t.Fatalf("longest session %d turns, want 10", len(inc)-1)
	}
	for k := 1; k < 6; k++ {
		if inc[k] != 0 {
			t.Errorf("increasing-hazard h(%d) = %.2f, want 0", k, inc[k])
		}
	}
	for k := 6; k <= 10; k++ {
		want := 1 / float64(11-k)
		if math.Abs(inc[k]-want) > 0.1 || (k > 6 && inc[k] <= inc[k-1]) {
			t.Errorf("increasing-hazard h(%d) = %.2f after %.2f, want about %.2f and rising", k, inc[k], inc[k-1], want)
		}
	}
	geo := hazard(sessionTurns(Agentic(AgenticOptions{Seed: 1})))
	t.Logf("agentic: h(1…10) = %.2f", geo[1:11])
	for k := 1; k <= 10; k++ {
		if geo[k] < 0.01 || geo[k] > 0.11 {
			t.Errorf("agentic h(%d) = %.3f, want about 1/20", k, geo[k])
		}
	}
}

// TestTasks checks the sessions-as-tasks accounting on closed-loop chats: without sheds every
// session completes and its task time is its response times plus its think times, exactly; an
// overload abandons sessions; MaxTime censors them and keeps them out of the times; an idle
// limit shorter than the think times abandons every multi-turn session.
func TestTasks(t *testing.T) {
	w := small()
	think := make([]time.Duration, w.Sessions)
	for i := range w.Requests {
		if r := &w.Requests[i]; r.Prev >= 0 {
			think[r.Session] += r.At
		}
	}
	var thinkSum time.Duration
	for _, d := range think {
		thinkSum += d
	}
	sessions := len(sessionTurns(w))
	check := func(name string, ts TaskStats) {
		t.Helper()
		if ts.Completed+ts.Abandoned+ts.Censored != ts.Sessions {
			t.Errorf("%s: %d completed + %d abandoned + %d censored ≠ %d sessions", name, ts.Completed, ts.Abandoned, ts.Censored, ts.Sessions)
		}
		if ts.Completed > 0 && (ts.Time.P50 > ts.Time.P90 || ts.Response.P50 > ts.Response.P90 || ts.ResponseMean > ts.TimeMean) {
			t.Errorf("%s: task time %v/%v/%v, Σ response %v/%v/%v", name, ts.TimeMean, ts.Time.P50, ts.Time.P90, ts.ResponseMean, ts.Response.P50, ts.Response.P90)
		}
		if ts.Abandoned == 0 && ts.TimeMeanAll != ts.TimeMean {
			t.Errorf("%s: none abandoned, task time mean with the abandoned %v, want the completed sessions' %v", name, ts.TimeMeanAll, ts.TimeMean)
		}
	}

	res, err := Run(w, Config{Servers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ts := res.Tasks
	check("all served", ts)
	if ts.Sessions != sessions || ts.Completed != sessions {
		t.Errorf("all served: %d sessions, %d completed, want %d", ts.Sessions, ts.Completed, sessions)
	}
	if got, want := ts.TimeMean-ts.ResponseMean, thinkSum/time.Duration(sessions); (got - want).Abs() > time.Microsecond {
		t.Errorf("all served: mean task time − mean Σ response = %v, want the mean Σ think time %v", got, want)
	}
	if want := DefaultIdleFactor * w.LongestThink(); ts.IdleLimit != want || want == 0 {
		t.Errorf("idle limit %v, want %v", ts.IdleLimit, want)
	}

	over := Chat(ChatOptions{Sessions: 200, Rate: 20, Turns: 3, Think: time.Second, Seed: 3})
	res, err = Run(over, Config{Servers: 1, MaxInFlight: 2, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check("overload", res.Tasks)
	if res.Tasks.Abandoned == 0 || res.Tasks.Censored != 0 || res.Tasks.AbandonedShare() <= 0 {
		t.Errorf("overload: %d abandoned (share %.2f), %d censored: want some abandoned, none censored",
			res.Tasks.Abandoned, res.Tasks.AbandonedShare(), res.Tasks.Censored)
	}
	// An abandoned session counts as done at the end of the run: no session counts for more
	// than the run's length.
	if tm := res.Tasks.TimeMeanAll; tm <= 0 || tm > res.Duration {
		t.Errorf("overload: task time mean with the abandoned %v, want in (0, the run's %v]", tm, res.Duration)
	}

	const maxTime = 20 * time.Second
	res, err = Run(w, Config{Servers: 1, MaxInFlight: 2, MaxTime: maxTime})
	if err != nil {
		t.Fatal(err)
	}
	check("max-time", res.Tasks)
	if res.Tasks.Censored == 0 || res.Tasks.Time.P99 > maxTime {
		t.Errorf("max-time: %d censored, task time p99 %v: want some censored, every time within %v", res.Tasks.Censored, res.Tasks.Time.P99, maxTime)
	}

	res, err = Run(w, Config{Servers: 2, SessionIdle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	check("idle", res.Tasks)
	single := 0
	for _, k := range sessionTurns(w) {
		if k == 1 {
			single++
		}
	}
	if res.Tasks.Completed != single || res.Tasks.Abandoned != sessions-single {
		t.Errorf("idle 1 ms: %d completed, %d abandoned, want the %d single-turn sessions completed and %d abandoned",
			res.Tasks.Completed, res.Tasks.Abandoned, single, sessions-single)
	}
}

// TestSessionWorkloads: both workloads are registered under their names and run closed loop in
// the simulator (the first 600 requests of each, 200 under the race detector), every session
// accounted for.
func TestSessionWorkloads(t *testing.T) {
	head := 600
	if raceEnabled {
		head = 200
	}
	for _, name := range []string{"trace-sessions", "increasing-hazard"} {
		w, err := LoadWorkload(name, LoadOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if w.Name != name {
			t.Errorf("LoadWorkload(%q) is named %q", name, w.Name)
		}
		w = w.Head(head)
		res, err := Run(w, Config{Servers: 4})
		if err != nil {
			t.Fatal(err)
		}
		checkAccounting(t, name, w, res)
		ts := res.Tasks
		if ts.Sessions == 0 || ts.Completed+ts.Abandoned+ts.Censored != ts.Sessions || ts.TimeMean < ts.ResponseMean {
			t.Errorf("%s: %+v", name, ts)
		}
		t.Logf("%s: %d sessions, %d completed, task time mean %v, Σ response mean %v, idle limit %v",
			name, ts.Sessions, ts.Completed, ts.TimeMean, ts.ResponseMean, ts.IdleLimit)
	}
}

// TestGittinsIdle: the Gittins policies' idle limit is twice the 99th percentile of a
// workload's gaps between turns — above its median gap, at most LongestThink twice over —
// capped at ten minutes (the trace's gaps run to 50 minutes), and GittinsIdle without
// multi-turn sessions; the simulator builds them with it.
func TestGittinsIdle(t *testing.T) {
	for _, name := range []string{"agentic", "increasing-hazard", "trace-sessions"} {
		w, err := LoadWorkload(name, LoadOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		idle, longest := gittinsIdle(w), w.LongestThink()
		if idle <= 0 || idle > gittinsIdleCap || idle > 2*longest {
			t.Errorf("%s: idle %v, longest think %v", name, idle, longest)
		}
		if name == "trace-sessions" && idle != gittinsIdleCap {
			t.Errorf("trace-sessions: idle %v, want the cap %v", idle, gittinsIdleCap)
		}
		t.Logf("%s: Gittins idle limit %v (longest think %v)", name, idle, longest)
	}
	if idle := gittinsIdle(&Workload{Requests: []Request{{Session: -1, Prev: -1}}}); idle != GittinsIdle {
		t.Errorf("no sessions: idle %v, want %v", idle, GittinsIdle)
	}
	p := gittins(0)
	if p.forWorkload == nil || p.New() == nil {
		t.Fatal("gittins: no build for a workload, or none without")
	}
}
