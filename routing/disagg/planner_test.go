package disagg

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/benchcpu"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
)

// plannerFleet returns a router over n KVBoth servers and one ordinary aggregated server
// ("agg").
func plannerFleet(t testing.TB, p *Planner, n int, now func() time.Time) (*routing.Router, []routing.BackendState) {
	t.Helper()
	prof := routing.Profile{
		Name:    "planner",
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}},
		Picker:  pick.MaxScore(),
	}
	r, err := routing.New(routing.Options{Profile: prof, Now: now, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var fleet []routing.BackendState
	for i := range n {
		fleet = append(fleet, routing.BackendState{Name: fmt.Sprintf("kv-%d", i), KVBoth: true, Health: routing.Healthy, UpdatedAt: now()})
	}
	fleet = append(fleet, routing.BackendState{Name: "agg", Health: routing.Healthy, UpdatedAt: now()})
	if err := r.Update(fleet); err != nil {
		t.Fatal(err)
	}
	return r, fleet
}

// roleCount counts the planner's servers in each role.
func roleCount(p *Planner) (prefill, both int) {
	for _, r := range p.Stats().Roles {
		switch r {
		case routing.RolePrefill:
			prefill++
		case routing.RoleBoth:
			both++
		}
	}
	return prefill, both
}

// loadBoth refreshes fleet (plannerFleet's: the KVBoth servers, then "agg") at now and shares
// total out over the KVBoth servers in both: set gives each KVBoth server its part (0 for one in
// prefill; the remainder to the first servers in both). It updates r.
func loadBoth(t testing.TB, p *Planner, r *routing.Router, fleet []routing.BackendState, total int, now time.Time,
	set func(s *routing.BackendState, part int)) {
	t.Helper()
	roles := p.Stats().Roles
	kv := fleet[:len(fleet)-1]
	both := 0
	for i := range kv {
		if roles[kv[i].Name] != routing.RolePrefill {
			both++
		}
	}
	k := 0
	for i := range kv {
		kv[i].UpdatedAt = now
		part := 0
		if roles[kv[i].Name] != routing.RolePrefill {
			part = total / both
			if k < total%both {
				part++
			}
			k++
		}
		set(&kv[i], part)
	}
	fleet[len(fleet)-1].UpdatedAt = now
	if err := r.Update(fleet); err != nil {
		t.Fatal(err)
	}
}

// running sets a server's running answers for loadBoth.
func running(s *routing.BackendState, part int) { s.Known, s.Running = routing.SignalRunning, part }

// TestPlanner steps a planner through a burst of long prompts and its end: servers move into
// prefill as the demand rises (with no answers running, the work balance gives prefill every
// server but one), picks follow the roles, every prefill goes to the pool, and the servers
// come back once the demand is gone.
func TestPlanner(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	p, err := NewPlanner(PlannerOptions{PrefillRate: 10000})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := plannerFleet(t, p, 6, clock)
	if n := p.Plan(now, r); n != 0 {
		t.Fatalf("first plan without demand: %d changes, want 0", n)
	}
	if pf, both := roleCount(p); pf != 0 || both != 6 {
		t.Fatalf("roles: %d prefill, %d both; want 0, 6", pf, both)
	}
	// Without a prefill pool, every long prompt is prefilled where it is decoded.
	long := &routing.Result{UncachedTokens: 8000, Backend: &routing.BackendState{Known: routing.SignalRunning, Running: 4}}
	if p.Disaggregate(&routing.Request{}, long) {
		t.Error("no prefill server: Disaggregate = true")
	}
	// 30,000 uncached tokens a second for 20 s: three servers' worth at 10,000 a second, and
	// no decode work.
	for range 20 {
		for range 3 {
			p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 10000})
		}
		now = now.Add(time.Second)
		p.Plan(now, r)
	}
	agg, _ := r.Lookup("agg")
	pf, both := roleCount(p)
	if pf != 5 || both != 1 {
		t.Fatalf("after 20 s of 30k tokens/s and no answers: %d prefill, %d both; want 5, 1", pf, both)
	}
	// Picks follow the roles: decode picks never land on a server in prefill, prefill picks
	// only on one (or on the aggregated server, which the planner leaves alone).
	roles := p.Stats().Roles
	for range 20 {
		d, err := r.Pick(&routing.Request{PromptTokens: 100, Role: routing.RoleDecode})
		if err != nil {
			t.Fatal(err)
		}
		if roles[d.Backend.Name] == routing.RolePrefill {
			t.Errorf("decode pick on %s, in prefill", d.Backend.Name)
		}
		f, err := r.Pick(&routing.Request{PromptTokens: 100, Role: routing.RolePrefill})
		if err != nil {
			t.Fatal(err)
		}
		if f.Backend.Name != "agg" && roles[f.Backend.Name] != routing.RolePrefill {
			t.Errorf("prefill pick on %s, in %v", f.Backend.Name, roles[f.Backend.Name])
		}
		if !p.Disaggregate(&routing.Request{}, long) {
			t.Error("a busy decode server, an idle prefill pool: Disaggregate = false")
		}
		d.Done(routing.DoneInfo{})
		f.Done(routing.DoneInfo{})
	}
	idle := &routing.Result{UncachedTokens: 8000, Backend: &routing.BackendState{Known: routing.SignalRunning}}
	if !p.Disaggregate(&routing.Request{}, idle) {
		t.Error("an idle decode server, a prefill pool: Disaggregate = false (answers that come during a local prefill would stall)")
	}
	// 100,000 tokens queued on each prefill server: the prefill still goes to the pool, which
	// grows with its queue.
	var queued []routing.Result
	for range 2 * pf {
		f, err := r.Pick(&routing.Request{PromptTokens: 50000, Role: routing.RolePrefill, Exclude: []routing.BackendID{agg}})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, f)
	}
	p.Plan(now, r)
	if !p.Disaggregate(&routing.Request{}, long) {
		t.Error("10 s of prefill queued on every prefill server: Disaggregate = false")
	}
	for _, f := range queued {
		f.Done(routing.DoneInfo{})
	}
	// The demand stops (the decisions above counted 180,000 tokens more). Its moving average
	// (10 s) still holds the pool 10 s later; once it falls under a tenth of a server, the
	// servers leave prefill.
	for range 10 {
		now = now.Add(time.Second)
		p.Plan(now, r)
	}
	changes := p.Stats().Changes
	if pf, _ = roleCount(p); pf == 0 {
		t.Error("10 s after the burst every server left prefill: the demand's average is still there")
	}
	for range 60 {
		now = now.Add(time.Second)
		p.Plan(now, r)
	}
	if pf, both := roleCount(p); pf != 0 || both != 6 {
		t.Errorf("70 s after the burst: %d prefill, %d both; want 0, 6", pf, both)
	}
	if got := p.Stats().Changes - changes; got != uint64(pf) {
		t.Errorf("%d changes back, want %d (one per server that was in prefill)", got, pf)
	}
}

// TestPlannerDwell: under a demand that swings every few seconds (and no prefill queue), no
// server changes role twice within the dwell, its first change (out of the all-both start)
// excepted.
func TestPlannerDwell(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, err := NewPlanner(PlannerOptions{PrefillRate: 10000, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := plannerFleet(t, p, 8, func() time.Time { return now })
	last := map[string]time.Time{}
	count := map[string]int{}
	prev := p.Stats().Roles
	for step := range 600 {
		if step/5%2 == 0 {
			p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 30000})
		}
		now = now.Add(500 * time.Millisecond)
		p.Plan(now, r)
		roles := p.Stats().Roles
		for name, role := range roles {
			if role == prev[name] {
				continue
			}
			if at, ok := last[name]; ok && count[name] >= 2 && now.Sub(at) < 30*time.Second {
				t.Fatalf("%s changed role at %v and again %v later", name, at, now.Sub(at))
			}
			last[name] = now
			count[name]++
		}
		prev = roles
	}
	if len(last) == 0 {
		t.Error("no server ever changed role")
	}
}

// TestPlannerShare: the servers are shared out by the prefill and the decode work, each in
// servers (10,000 uncached tokens a second a server, 64 answers a server), with spare servers
// in prefill.
func TestPlannerShare(t *testing.T) {
	for _, c := range []struct {
		name            string
		tokens, answers int // uncached tokens a second, answers running on the servers in both
		prefill         int
		why             string
	}{
		// Two servers of prefill work and two of decode: of 8, the balance gives prefill 4
		// (the spare rule, 8 − 2·2, no more).
		{"balance", 20000, 128, 4, "2 servers of prefill work, 2 of decode"},
		// Half a server of prefill work and one of decode: the balance gives prefill 2.7 of
		// 8; the servers decode does not need twice over wait in prefill, 8 − 2·1 = 6.
		{"spare", 5000, 64, 6, "half a server of prefill work, one of decode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			p, err := NewPlanner(PlannerOptions{PrefillRate: 10000, DecodeBatch: 64})
			if err != nil {
				t.Fatal(err)
			}
			r, fleet := plannerFleet(t, p, 8, func() time.Time { return now })
			for range 120 {
				loadBoth(t, p, r, fleet, c.answers, now, running)
				p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: c.tokens})
				now = now.Add(time.Second)
				p.Plan(now, r)
			}
			if pf, both := roleCount(p); pf != c.prefill || both != 8-c.prefill {
				t.Errorf("%s: %d prefill, %d both; want %d, %d", c.why, pf, both, c.prefill, 8-c.prefill)
			}
		})
	}
}

// TestPlannerUrgent: a prefill queue over TTFT/3 moves a server into prefill even within its
// dwell; without the queue the dwell holds.
func TestPlannerUrgent(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, err := NewPlanner(PlannerOptions{PrefillRate: 10000, Dwell: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := plannerFleet(t, p, 3, func() time.Time { return now })
	agg, _ := r.Lookup("agg")
	tick := func(tokens int) {
		if tokens > 0 {
			p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: tokens})
		}
		now = now.Add(time.Second)
		p.Plan(now, r)
	}
	// Demand, no answers: two servers go into prefill (first moves, no dwell); the demand
	// stops and they come back (their second moves start their dwell).
	for range 20 {
		tick(30000)
	}
	if pf, _ := roleCount(p); pf != 2 {
		t.Fatalf("demand and no answers: %d in prefill, want 2 (one stays for decode)", pf)
	}
	for range 120 {
		tick(0)
	}
	if pf, _ := roleCount(p); pf != 0 {
		t.Fatalf("no demand for 120 s: %d in prefill, want 0", pf)
	}
	// Demand again: only the third server, never moved, may go; the dwell holds the others.
	for range 20 {
		tick(30000)
	}
	if pf, _ := roleCount(p); pf != 1 {
		t.Fatalf("demand again, two servers in their dwell: %d in prefill, want 1", pf)
	}
	// 150,000 tokens queued on the one prefill server: 15 s at its rate, over TTFT/3.
	var queued []routing.Result
	for range 3 {
		f, err := r.Pick(&routing.Request{PromptTokens: 50000, Role: routing.RolePrefill, Exclude: []routing.BackendID{agg}})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, f)
	}
	tick(30000)
	if pf, _ := roleCount(p); pf != 2 {
		t.Errorf("a 15 s prefill queue: %d in prefill, want 2 (the queue moves a server within its dwell)", pf)
	}
	for _, f := range queued {
		f.Done(routing.DoneInfo{})
	}
}

// TestPlannerRoomMargin: decode context that hovers at a server's room does not move a server
// back and forth. With 100,000 tokens a server and the context swinging between 190,000 and
// 210,000, the room is two servers or three; a move into prefill needs it with a fifth to
// spare (three), so once the room has pushed a server out, none comes back, even with no
// dwell to hold it.
func TestPlannerRoomMargin(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p, err := NewPlanner(PlannerOptions{PrefillRate: 10000, DecodeTokens: 100000, Dwell: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	r, fleet := plannerFleet(t, p, 5, func() time.Time { return now })
	var changes uint64
	for step := range 200 {
		if step == 100 {
			changes = p.Stats().Changes
		}
		context := 190000
		if step%2 == 1 {
			context = 210000
		}
		// 1,000,000 tokens of KV a server; the context on the servers in both.
		loadBoth(t, p, r, fleet, context, now, func(s *routing.BackendState, part int) {
			s.Known = routing.SignalKVUtilization | routing.SignalKVCapacity
			s.KVCapacityBlocks, s.BlockSize, s.KVUtilization = 10000, 100, float64(part)/1e6
		})
		p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 100000})
		now = now.Add(time.Second)
		p.Plan(now, r)
	}
	if got := p.Stats().Changes - changes; got != 0 {
		t.Errorf("%d role changes in 100 s of context swinging at the room, want 0", got)
	}
	if pf, _ := roleCount(p); pf != 2 {
		t.Errorf("%d servers in prefill, want 2 (three kept for decode room with its margin)", pf)
	}
}

func TestPlannerOptions(t *testing.T) {
	for _, o := range []PlannerOptions{{MinUncachedTokens: -1}, {TTFT: -1}, {Dwell: -1}, {PrefillRate: -1}} {
		if _, err := NewPlanner(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

// TestPlannerAllocs: the pick path with the planner's filter, and its decider, allocate nothing.
func TestPlannerAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector allocates")
	}
	now := time.Unix(1_700_000_000, 0)
	p, _ := NewPlanner(PlannerOptions{})
	r, _ := plannerFleet(t, p, 100, func() time.Time { return now })
	for range 10 {
		p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 1 << 20})
	}
	now = now.Add(time.Second)
	p.Plan(now, r)
	for range 10 {
		p.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 1 << 20})
	}
	now = now.Add(time.Second)
	p.Plan(now, r)
	if pf, _ := roleCount(p); pf == 0 {
		t.Fatal("no server in prefill")
	}
	res := new(routing.Result) // where a host keeps it: the decider's hooks make a local escape
	for _, role := range []routing.Role{routing.RoleDecode, routing.RolePrefill} {
		req := &routing.Request{PromptTokens: 4096, Role: role}
		n := testing.AllocsPerRun(1000, func() {
			*res, _ = r.Pick(req)
			p.Disaggregate(req, res)
			res.Done(routing.DoneInfo{})
		})
		if n != 0 {
			t.Errorf("%v pick + Disaggregate with the planner allocates %v times, want 0", role, n)
		}
	}
}

// BenchmarkPlannerPick measures a decode pick at 100 backends without a planner and with one
// (every server in both, and a quarter of them in prefill), with the planner's decider.
func BenchmarkPlannerPick(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	for _, c := range []struct {
		name   string
		with   bool
		demand int64
	}{{"without", false, 0}, {"planner-all-both", true, 0}, {"planner-quarter-prefill", true, 250000}} {
		with := c.with
		b.Run(c.name, func(b *testing.B) {
			p, _ := NewPlanner(PlannerOptions{PrefillRate: 10000})
			r, fleet := plannerFleet(b, p, 100, clock)
			if !with {
				var err error
				r, err = routing.New(routing.Options{Profile: routing.Profile{
					Name: "plain", Filters: []routing.Filter{outlier.HealthFilter()},
					Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}}, Picker: pick.MaxScore(),
				}, Now: clock, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Update(fleet); err != nil {
					b.Fatal(err)
				}
			}
			p.Plan(now, r)
			p.seen.Store(c.demand)
			p.Plan(now.Add(10*time.Second), r)
			req := &routing.Request{PromptTokens: 4096, Role: routing.RoleDecode}
			res := new(routing.Result)
			b.ReportAllocs()
			cpu := benchcpu.StartThread()
			for b.Loop() {
				var err error
				if *res, err = r.Pick(req); err != nil {
					b.Fatal(err)
				}
				if with {
					p.Disaggregate(req, res)
				}
				res.Done(routing.DoneInfo{})
			}
			// CPU time of this thread per pick: on a shared machine it measures the code
			// rather than the wait for a core.
			cpu.Stop(b)
		})
	}
}
