package fairness_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// feed tells p about one event of flow f.
func feed(p flowcontrol.Policy, kind flowcontrol.EventKind, f *flowcontrol.FlowState, r *flowcontrol.Request, now time.Time, u flowcontrol.Usage) {
	p.Observe(&flowcontrol.Event{Kind: kind, Now: now, Flow: f, Request: r, Usage: u})
}

// served runs one request of f through enqueue, dispatch and (if done) completion at now.
func served(p flowcontrol.Policy, f *flowcontrol.FlowState, now time.Time, done bool) {
	r := &flowcontrol.Request{Flow: f.ID, Arrival: now, Deadline: now.Add(time.Minute), PromptTokens: 100, OutputTokens: 10}
	p.ItemKey(r, f, now)
	f.Queued++
	feed(p, flowcontrol.EventEnqueue, f, r, now, flowcontrol.Usage{})
	f.Queued--
	f.InFlight++
	feed(p, flowcontrol.EventDispatch, f, r, now, flowcontrol.Usage{})
	if done {
		f.InFlight--
		feed(p, flowcontrol.EventDone, f, r, now, flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
	}
}

func TestTurnPriorityMatchesScore(t *testing.T) {
	// Model-based: the key order must equal llm-d's score order (turn + 0.05·wait, higher
	// first, ties to the longer wait) for any turns and arrival times.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		p, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
		now := simStart.Add(10 * time.Minute)
		type fl struct {
			st      flowcontrol.FlowState
			turn    int
			arrival time.Time
		}
		flows := make([]*fl, 6)
		for i := range flows {
			x := &fl{st: flowcontrol.FlowState{ID: flowcontrol.FlowID(rune('a' + i))}, turn: 1 + rng.IntN(6)}
			for range x.turn - 1 {
				served(p, &x.st, simStart, false) // in flight: no reset
			}
			x.arrival = now.Add(-time.Duration(rng.IntN(80)) * time.Second)
			x.st.Queued = 1
			x.st.Head = &flowcontrol.Request{Flow: x.st.ID, Arrival: x.arrival}
			flows[i] = x
		}
		score := func(x *fl) float64 { return float64(x.turn) + 0.05*now.Sub(x.arrival).Seconds() }
		want := append([]*fl(nil), flows...)
		sort.SliceStable(want, func(i, j int) bool {
			si, sj := score(want[i]), score(want[j])
			if math.Abs(si-sj) > 1e-9 {
				return si > sj
			}
			return want[i].arrival.Before(want[j].arrival)
		})
		got := append([]*fl(nil), flows...)
		sort.SliceStable(got, func(i, j int) bool {
			ki, _ := p.FlowKey(&got[i].st, now)
			kj, _ := p.FlowKey(&got[j].st, now)
			return ki.Less(kj)
		})
		for i := range want {
			if score(got[i]) != score(want[i]) || !got[i].arrival.Equal(want[i].arrival) {
				t.Fatalf("trial %d position %d: got flow %s (score %.3f), want %s (score %.3f)",
					trial, i, got[i].st.ID, score(got[i]), want[i].st.ID, score(want[i]))
			}
		}
	}
}

func TestTurnPriorityReset(t *testing.T) {
	p, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	f := &flowcontrol.FlowState{ID: "s"}
	t0 := simStart
	for range 3 {
		served(p, f, t0, true) // three turns, last completion at t0
	}
	f.Queued = 1
	f.Head = &flowcontrol.Request{Flow: "s", Arrival: t0}
	turnOf := func(now time.Time) (float64, time.Time) {
		k, until := p.FlowKey(f, now)
		return -(k.Value - 0.05*t0.Sub(t0).Seconds()) + 0.05*0, until // head arrival at t0 → Value = −turn + const
	}
	base, _ := p.FlowKey(&flowcontrol.FlowState{ID: "fresh", Queued: 1, Head: &flowcontrol.Request{Arrival: t0}}, t0)
	steps := []struct {
		at        time.Duration
		wantTurn  float64
		wantUntil time.Duration // 0: no limit
	}{
		{0, 4, 120*time.Second + 1},
		{120 * time.Second, 4, 120*time.Second + 1}, // exactly 120 s: not yet "more than"
		{120*time.Second + 1, 1, 0},
		{200 * time.Second, 1, 0},
	}
	for _, s := range steps {
		k, until := p.FlowKey(f, t0.Add(s.at))
		gotTurn := 1 - (k.Value - base.Value) // base is a turn-1 flow with the same head arrival
		if math.Abs(gotTurn-s.wantTurn) > 1e-9 {
			t.Errorf("at +%v: turn %.0f, want %.0f", s.at, gotTurn, s.wantTurn)
		}
		var wantUntil time.Time
		if s.wantUntil != 0 {
			wantUntil = t0.Add(s.wantUntil)
		}
		if !until.Equal(wantUntil) {
			t.Errorf("at +%v: until %v, want %v", s.at, until, wantUntil)
		}
	}
	_ = turnOf
	// With a request in flight the turn never resets.
	p2, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	g := &flowcontrol.FlowState{ID: "g"}
	served(p2, g, t0, true)
	served(p2, g, t0, false)
	g.Queued, g.Head = 1, &flowcontrol.Request{Arrival: t0}
	k, until := p2.FlowKey(g, t0.Add(time.Hour))
	if got := 1 - (k.Value - base.Value); got != 3 || !until.IsZero() {
		t.Errorf("in flight for an hour: turn %.0f until %v, want 3 and no limit", got, until)
	}
}

func TestLASKeyOrdersByDecayedService(t *testing.T) {
	// Model-based: LAS keys computed at different times must order flows exactly as their
	// decayed service at any later time, computed naively from the charges.
	const h = 60.0
	rng := rand.New(rand.NewPCG(3, 4))
	p, _ := fairness.NewLAS(fairness.LASOptions{})
	type charge struct {
		at   time.Time
		cost float64
	}
	const n = 8
	flows := make([]*flowcontrol.FlowState, n)
	charges := make([][]charge, n)
	for i := range flows {
		flows[i] = &flowcontrol.FlowState{ID: flowcontrol.FlowID(rune('a' + i)), InFlight: 1}
	}
	p.ItemKey(&flowcontrol.Request{Arrival: simStart}, flows[0], simStart)
	now := simStart
	for range 300 {
		now = now.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
		i := rng.IntN(n)
		r := &flowcontrol.Request{PromptTokens: flowcontrol.Tokens(rng.IntN(3000))}
		out := flowcontrol.Tokens(rng.IntN(500))
		if rng.IntN(2) == 0 {
			feed(p, flowcontrol.EventDispatch, flows[i], r, now, flowcontrol.Usage{})
			charges[i] = append(charges[i], charge{now, float64(r.PromptTokens)})
		} else {
			feed(p, flowcontrol.EventDone, flows[i], r, now, flowcontrol.Usage{PromptTokens: r.PromptTokens, OutputTokens: out})
			charges[i] = append(charges[i], charge{now, 2 * float64(out)})
		}
		naive := func(i int, at time.Time) float64 {
			var s float64
			for _, c := range charges[i] {
				s += c.cost * math.Exp2(-at.Sub(c.at).Seconds()/h)
			}
			return s
		}
		later := now.Add(time.Duration(rng.IntN(600)) * time.Second)
		for a := range n {
			got, _ := fairness.Service(p, flows[a].ID, 0, later)
			if want := naive(a, later); math.Abs(got-want) > 1e-6*math.Max(1, want) {
				t.Fatalf("flow %d service at +%v: %.6f, want %.6f", a, later.Sub(now), got, want)
			}
			for b := range n {
				sa, sb := naive(a, later), naive(b, later)
				if math.Abs(sa-sb) < 1e-6*math.Max(1, sa) {
					continue
				}
				flows[a].Head = &flowcontrol.Request{Arrival: now}
				flows[b].Head = &flowcontrol.Request{Arrival: now}
				ka, _ := p.FlowKey(flows[a], now)
				kb, _ := p.FlowKey(flows[b], now)
				if ka.Less(kb) != (sa < sb) {
					t.Fatalf("flows %d, %d: key order %v, decayed service %.3f vs %.3f", a, b, ka.Less(kb), sa, sb)
				}
			}
		}
	}
}

func TestLASReferencePickMatchesScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 100 {
		p, _ := fairness.NewLASReference(fairness.LASReferenceOptions{})
		now := simStart.Add(time.Hour)
		n := 2 + rng.IntN(8)
		flows := make([]*flowcontrol.FlowState, n)
		svc := make([]float64, n)
		wait := make([]float64, n)
		for i := range flows {
			f := &flowcontrol.FlowState{ID: flowcontrol.FlowID(rune('a' + i)), InFlight: 1}
			at := now.Add(-time.Duration(rng.IntN(300)) * time.Second)
			u := flowcontrol.Usage{PromptTokens: flowcontrol.Tokens(rng.IntN(4) * 500), OutputTokens: flowcontrol.Tokens(rng.IntN(3) * 100)}
			f.InFlight = 0
			f.Queued = 1
			feed(p, flowcontrol.EventDone, f, &flowcontrol.Request{}, at, u)
			svc[i] = (float64(u.PromptTokens) + 2*float64(u.OutputTokens)) * math.Exp2(-now.Sub(at).Seconds()/60)
			arr := now.Add(-time.Duration(rng.IntN(50)) * time.Second)
			f.Head = &flowcontrol.Request{Arrival: arr}
			wait[i] = now.Sub(arr).Seconds()
			flows[i] = f
		}
		norm := func(v []float64, i int) float64 {
			lo, hi := slicesMin(v), slicesMax(v)
			if hi == lo {
				return 0
			}
			return (v[i] - lo) / (hi - lo)
		}
		best := 0
		for i := range flows {
			si := 0.8*(1-norm(svc, i)) + 0.2*norm(wait, i)
			sb := 0.8*(1-norm(svc, best)) + 0.2*norm(wait, best)
			if si > sb+1e-12 || (math.Abs(si-sb) <= 1e-12 && (wait[i] > wait[best] || (wait[i] == wait[best] && flows[i].ID < flows[best].ID))) {
				best = i
			}
		}
		got, ok := p.(flowcontrol.FlowPicker).PickFlow(0, flows, now)
		if !ok || got != flows[best].ID {
			t.Fatalf("trial %d: picked %q, want %q (services %v, waits %v)", trial, got, flows[best].ID, svc, wait)
		}
	}
}

func slicesMin(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// TestVTCBound checks the VTC fairness bound through a real queue: flows with different
// request sizes, all backlogged, k requests in flight; at every moment the service charged
// to any two flows differs by at most (k+1)·U, U the largest weighted cost of one request.
// The service is recomputed here from what was dispatched and completed, not read from the
// policy.
func TestVTCBound(t *testing.T) {
	for _, k := range []int{1, 4} {
		p, _ := fairness.NewVTC(fairness.VTCOptions{})
		s := newSim(t, p, k)
		sizes := []struct{ prompt, output flowcontrol.Tokens }{{100, 10}, {2000, 50}, {300, 800}, {1200, 400}, {50, 1500}}
		var u float64
		for _, z := range sizes {
			u = max(u, cost(z.prompt, z.output))
		}
		service := map[flowcontrol.FlowID]float64{}
		mk := func(i int) *job {
			z := sizes[i]
			return &job{flow: flowcontrol.FlowID(rune('a' + i)), prompt: z.prompt, output: z.output,
				service: time.Duration(cost(z.prompt, z.output)) * time.Millisecond, deadline: simStart.Add(time.Hour)}
		}
		for i := range sizes {
			for range k + 2 { // more than k outstanding: the flow never runs out of queued work
				s.submit(simStart, mk(i))
			}
		}
		var worst float64
		check := func() {
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := range sizes {
				v := service[flowcontrol.FlowID(rune('a'+i))]
				lo, hi = min(lo, v), max(hi, v)
			}
			worst = max(worst, hi-lo)
			if hi-lo > float64(k+1)*u {
				t.Fatalf("k=%d at %v: service gap %.0f > (k+1)·U = %.0f", k, s.now().Sub(simStart), hi-lo, float64(k+1)*u)
			}
		}
		s.onDispatch = func(s *sim, j *job) {
			service[j.flow] += float64(j.prompt)
			check()
		}
		s.onDone = func(s *sim, j *job) {
			service[j.flow] += 2 * float64(j.output)
			check()
			s.submit(s.now(), mk(int(j.flow[0]-'a'))) // stay backlogged
		}
		s.run(simStart.Add(30 * time.Minute))
		t.Logf("k=%d: largest service gap %.0f weighted tokens = %.2f·U (bound %d·U)", k, worst, worst/u, k+1)
	}
}

func TestVTCLiftsReturningFlow(t *testing.T) {
	p, _ := fairness.NewVTC(fairness.VTCOptions{})
	a := &flowcontrol.FlowState{ID: "a"}
	b := &flowcontrol.FlowState{ID: "b"}
	for range 10 {
		served(p, a, simStart, true) // a: 10 × (100 + 2·10) = 1200
	}
	a.Queued = 1
	ra := &flowcontrol.Request{Flow: "a", Arrival: simStart}
	feed(p, flowcontrol.EventEnqueue, a, ra, simStart, flowcontrol.Usage{})
	// b arrives new while a is backlogged: lifted to a's counter, not 0.
	b.Queued = 1
	rb := &flowcontrol.Request{Flow: "b", Arrival: simStart}
	feed(p, flowcontrol.EventEnqueue, b, rb, simStart, flowcontrol.Usage{})
	ca, _ := fairness.Counter(p, "a", 0)
	cb, _ := fairness.Counter(p, "b", 0)
	if ca != 1200 || cb != 1200 {
		t.Errorf("counters a=%v b=%v, want both 1200 (b lifted to the backlogged minimum)", ca, cb)
	}
}

func TestRoundRobinOrder(t *testing.T) {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(simStart)
	var order []flowcontrol.FlowID
	var tickets []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Policy: fairness.RoundRobin(), Clock: clk, MaxInFlight: 1,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			order = append(order, r.Request.Flow)
			tickets = append(tickets, r.Ticket)
		}},
	})
	for _, id := range []flowcontrol.FlowID{"z", "a", "a", "a", "b", "c", "c"} { // z holds the slot
		q.Enqueue(flowcontrol.Request{Flow: id})
		clk.Advance(time.Millisecond)
	}
	for i := 0; i < len(tickets); i++ {
		tickets[i].Done(flowcontrol.Usage{})
	}
	if got, want := string(joinIDs(order)), "zabcaca"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}

func joinIDs(ids []flowcontrol.FlowID) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, id...)
	}
	return b
}

func TestBoundedWaitPromotes(t *testing.T) {
	p, _ := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 30 * time.Second, Headroom: 5 * time.Second})
	arr := simStart
	f := &flowcontrol.FlowState{ID: "n", Queued: 1, Head: &flowcontrol.Request{Arrival: arr, Deadline: arr.Add(time.Minute)}}
	p.ItemKey(f.Head, f, arr)
	k, until := p.FlowKey(f, arr.Add(10*time.Second))
	if k.Tier == fairness.UrgentTier || !until.Equal(arr.Add(25*time.Second)) {
		t.Errorf("at 10 s: key %+v until %v, want the inner key valid until 25 s", k, until)
	}
	k, until = p.FlowKey(f, arr.Add(25*time.Second))
	if want := (flowcontrol.Key{Tier: fairness.UrgentTier, Tie: arr.Add(time.Minute).UnixNano()}); k != want || !until.IsZero() {
		t.Errorf("at 25 s: key %+v until %v, want %+v with no limit", k, until, want)
	}
}

func TestHierarchyTenantsBeforeSessions(t *testing.T) {
	// Round-robin across tenants: tenant "big" with five sessions and tenant "small" with
	// one alternate, whatever the session count.
	h, err := fairness.NewHierarchy(fairness.HierarchyOptions{Tenants: fairness.RoundRobin(), Sessions: fairness.RoundRobin()})
	if err != nil {
		t.Fatal(err)
	}
	clk := new(flowcontroltest.FakeClock)
	clk.Set(simStart)
	var order []string
	var tickets []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Policy: h, Clock: clk, MaxInFlight: 1,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			order = append(order, string(fairness.TenantBeforeSlash(r.Request.Flow)))
			tickets = append(tickets, r.Ticket)
		}},
	})
	for _, id := range []flowcontrol.FlowID{"hold/0", "big/1", "big/2", "big/3", "big/4", "big/5", "small/1", "small/1", "small/1"} {
		q.Enqueue(flowcontrol.Request{Flow: id})
		clk.Advance(time.Millisecond)
	}
	for i := 0; i < len(tickets); i++ {
		tickets[i].Done(flowcontrol.Usage{})
	}
	want := []string{"hold", "big", "small", "big", "small", "big", "small", "big", "big"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	tp, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	lr, _ := fairness.NewLASReference(fairness.LASReferenceOptions{})
	for name, err := range map[string]error{
		"turn negative":       second(fairness.NewTurnPriority(fairness.TurnPriorityOptions{WaitWeight: -1})),
		"memory negative":     second(fairness.NewTurnPriority(fairness.TurnPriorityOptions{Memory: fairness.Memory{MaxIdle: -1}})),
		"las negative":        second(fairness.NewLAS(fairness.LASOptions{HalfLife: -time.Second})),
		"lasref weights":      second(fairness.NewLASReference(fairness.LASReferenceOptions{WaitWeight: -0.2})),
		"vtc weight":          second(fairness.NewVTC(fairness.VTCOptions{OutputWeight: -2})),
		"slo no target":       second(fairness.NewSLODeadline(fairness.SLODeadlineOptions{})),
		"bounded no wait":     second(fairness.NewBoundedWait(fairness.BoundedWaitOptions{})),
		"bounded headroom":    second(fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: time.Second, Headroom: time.Second})),
		"bounded share":       second(fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: time.Second, FirstTurnShare: 1})),
		"bounded picker":      second(fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: time.Second, Inner: lr})),
		"hierarchy same":      second(fairness.NewHierarchy(fairness.HierarchyOptions{Tenants: tp, Sessions: tp})),
		"hierarchy picker":    second(fairness.NewHierarchy(fairness.HierarchyOptions{Tenants: lr})),
		"bounded share NaN":   second(fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: time.Second, FirstTurnShare: math.NaN()})),
		"vtc weight too high": second(fairness.NewVTC(fairness.VTCOptions{PromptWeight: 1 << 30})),
	} {
		if !errors.Is(err, fairness.ErrInvalidOptions) {
			t.Errorf("%s: error %v, want ErrInvalidOptions", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestHierarchyBoundedWaitAcrossTenants(t *testing.T) {
	// Sessions under BoundedWait inside a Hierarchy: a request of a tenant that the tenant
	// policy would not serve (VTC, after the tenant consumed a million tokens while another
	// tenant keeps work queued) is still dispatched once it has waited the bound.
	bw, _ := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 20 * time.Second})
	vtc, _ := fairness.NewVTC(fairness.VTCOptions{})
	h, err := fairness.NewHierarchy(fairness.HierarchyOptions{Tenants: vtc, Sessions: bw})
	if err != nil {
		t.Fatal(err)
	}
	s := newSim(t, h, 1)
	// Tenant "poor" keeps a closed-loop session with work queued; tenant "rich" is charged a
	// million prompt tokens at its first dispatch, so VTC ranks "poor" first from then on.
	again := func(s *sim, j *job) {
		if j.flow == "poor/loop" {
			s.submit(s.now(), &job{flow: "poor/loop", prompt: 10, service: time.Second})
		}
	}
	s.onDone = again
	for range 3 { // one in flight, two queued: "poor" never leaves the backlog
		s.submit(simStart, &job{flow: "poor/loop", prompt: 10, service: time.Second})
	}
	s.submit(simStart, &job{flow: "rich/old", prompt: 1 << 20, service: time.Second})
	late := &job{flow: "rich/new", prompt: 10, service: time.Second}
	s.submit(simStart.Add(2*time.Second), late)
	s.run(simStart.Add(time.Minute))
	if late.dispatched.IsZero() {
		t.Fatalf("rich/new never dispatched: its tenant's VTC counter is far ahead and the urgent tier did not cross tenants")
	}
	if w := late.dispatched.Sub(late.arrival); w < 20*time.Second || w > 21*time.Second {
		t.Errorf("rich/new waited %v, want just over the 20 s bound", w)
	}
}

func TestNewcomerFirstTurnShare(t *testing.T) {
	// No promotion within the test (Wait 10 min); deep sessions always have work queued
	// and, under turn-priority, would win every dispatch. With FirstTurnShare 0.25 one
	// dispatch in four goes to a first turn while first turns wait.
	bw, err := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Minute, FirstTurnShare: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	s := newSim(t, bw, 1)
	again := func(s *sim, j *job) {
		if j.class == "deep" {
			s.submit(s.now(), &job{flow: j.flow, class: "deep", service: time.Second, deadline: simStart.Add(time.Hour)})
		}
	}
	s.onDone = again
	for i := range 4 {
		for range 2 {
			s.submit(simStart, &job{flow: flowcontrol.FlowID(rune('a' + i)), class: "deep", service: time.Second, deadline: simStart.Add(time.Hour)})
		}
	}
	// Deep sessions get a few turns first, then 30 first turns arrive at once.
	for i := range 30 {
		s.submit(simStart.Add(10500*time.Millisecond), &job{flow: flowcontrol.FlowID("new-" + string(rune('A'+i))), class: "new", service: time.Second, deadline: simStart.Add(time.Hour)})
	}
	var order []string
	s.onDispatch = func(s *sim, j *job) {
		if s.now().After(simStart.Add(10500 * time.Millisecond)) {
			order = append(order, j.class)
		}
	}
	s.run(simStart.Add(51 * time.Second)) // 40 dispatches after the newcomers arrived
	news := 0
	for i, c := range order {
		if c == "new" {
			news++
		}
		if want := (i+1)/4 - 1; news < want {
			t.Fatalf("after %d dispatches only %d first turns, want at least %d (share 0.25): %v", i+1, news, want, order)
		}
	}
	if news < len(order)/4-1 || news > len(order)/4+1 {
		t.Errorf("%d first turns in %d dispatches, want the reserved share 1/4 (deep sessions outrank them otherwise)", news, len(order))
	}
	t.Logf("%d of %d dispatches went to first turns", news, len(order))
}
