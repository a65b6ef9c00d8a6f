package fairness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
)

var usageStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// usageInst is one policy instance of the model, with the queue's view of its flows.
type usageInst struct {
	p     flowcontrol.Policy
	flows []flowcontrol.FlowState
	seq   uint64
}

// usageModel drives policy instances the way a queue would (ItemKey at enqueue, Observe of
// every event, FlowState kept current), with every flow backlogged throughout: each flow keeps
// two or three requests queued, and a step serves one (dispatch, completion, a new request).
type usageModel struct {
	ids   []flowcontrol.FlowID
	bands []int
	heads []flowcontrol.Request // each flow's head, the same on every instance
	now   time.Time
}

func newUsageModel(n int) *usageModel {
	m := &usageModel{now: usageStart}
	for i := range n {
		m.ids = append(m.ids, flowcontrol.FlowID(fmt.Sprintf("t%d/s%d", i%3, i)))
		m.bands = append(m.bands, i%4/3) // every fourth flow in band 1
	}
	m.heads = make([]flowcontrol.Request, n)
	for i := range m.heads {
		m.heads[i] = flowcontrol.Request{Flow: m.ids[i], Band: m.bands[i], PromptTokens: 100, Arrival: usageStart, Deadline: usageStart.Add(time.Hour)}
	}
	return m
}

func (m *usageModel) inst(p flowcontrol.Policy) *usageInst {
	x := &usageInst{p: p, flows: make([]flowcontrol.FlowState, len(m.ids))}
	for i := range x.flows {
		x.flows[i] = flowcontrol.FlowState{ID: m.ids[i], Band: m.bands[i]}
		for range 3 {
			m.enqueue(x, i)
		}
	}
	return x
}

func (m *usageModel) event(x *usageInst, kind flowcontrol.EventKind, i int, r *flowcontrol.Request, u flowcontrol.Usage) {
	x.p.Observe(&flowcontrol.Event{Kind: kind, Now: m.now, Flow: &x.flows[i], Request: r, Usage: u})
}

func (m *usageModel) enqueue(x *usageInst, i int) {
	f := &x.flows[i]
	r := m.heads[i]
	x.p.ItemKey(&r, f, m.now)
	x.seq++
	f.Queued++
	if f.Head == nil {
		f.Head, f.HeadKey, f.HeadSeq = &m.heads[i], flowcontrol.Key{Tie: usageStart.UnixNano()}, x.seq
	}
	m.event(x, flowcontrol.EventEnqueue, i, &r, flowcontrol.Usage{})
}

// serve serves one request of flow i on x: the prompt estimate est at dispatch, the actual
// usage at completion, then the flow gets a new request.
func (m *usageModel) serve(x *usageInst, i int, est flowcontrol.Tokens, u flowcontrol.Usage) {
	f := &x.flows[i]
	r := m.heads[i]
	r.PromptTokens = est
	f.Queued--
	f.InFlight++
	m.event(x, flowcontrol.EventDispatch, i, &r, flowcontrol.Usage{})
	f.InFlight--
	m.event(x, flowcontrol.EventDone, i, &r, u)
	m.enqueue(x, i)
}

// exchange hands each replica's deltas to the other at the same instant.
func (m *usageModel) exchange(a, b *usageInst) (na, nb int) {
	da := a.p.(peer.UsageSharer).AppendUsageDeltas(nil, m.now)
	db := b.p.(peer.UsageSharer).AppendUsageDeltas(nil, m.now)
	a.p.(peer.UsageSharer).ApplyUsageDeltas(db, m.now)
	b.p.(peer.UsageSharer).ApplyUsageDeltas(da, m.now)
	return len(da), len(db)
}

// keys returns every flow's FlowKey on x.
func (m *usageModel) keys(x *usageInst) []flowcontrol.Key {
	ks := make([]flowcontrol.Key, len(m.ids))
	for i := range ks {
		ks[i], _ = x.p.FlowKey(&x.flows[i], m.now)
	}
	return ks
}

// order returns the flows of band b by key (ties by index, as the queue breaks them by
// enqueue order, the same on every instance here).
func order(ks []flowcontrol.Key, bands []int, b int) []int {
	var o []int
	for i := range ks {
		if bands[i] == b {
			o = append(o, i)
		}
	}
	slices.SortStableFunc(o, func(i, j int) int {
		switch {
		case ks[i].Less(ks[j]):
			return -1
		case ks[j].Less(ks[i]):
			return 1
		}
		return 0
	})
	return o
}

// pick is the flow a FlowPicker dispatches next in band b, or "".
func (m *usageModel) pick(x *usageInst, b int) flowcontrol.FlowID {
	fp, ok := x.p.(flowcontrol.FlowPicker)
	if !ok {
		return ""
	}
	var states []*flowcontrol.FlowState
	for i := range x.flows {
		if x.flows[i].Band == b {
			states = append(states, &x.flows[i])
		}
	}
	id, _ := fp.PickFlow(b, states, m.now)
	return id
}

func closeTo(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b))
}

type sharingCase struct {
	name string
	// new returns an instance and a function reading the usage it holds for a flow (a
	// counter, a decayed service, a turn count; for Hierarchy its tenant's and its own).
	new func() (flowcontrol.Policy, func(id flowcontrol.FlowID, band int, now time.Time) []float64)
}

func sharingCases(t testing.TB) []sharingCase {
	vtc := func() *vtcPolicy { p, _ := newVTC(VTCOptions{}); return p }
	vtcUsage := func(p *vtcPolicy) func(flowcontrol.FlowID, int, time.Time) []float64 {
		return func(id flowcontrol.FlowID, b int, _ time.Time) []float64 {
			c, _ := p.Counter(id, b)
			return []float64{c}
		}
	}
	turn := func() *turnPriority { p, _ := newTurnPriority(TurnPriorityOptions{}); return p }
	turnUsage := func(p *turnPriority) func(flowcontrol.FlowID, int, time.Time) []float64 {
		return func(id flowcontrol.FlowID, b int, _ time.Time) []float64 {
			s := p.flows.get(flowRef{id, b})
			if s == nil {
				return []float64{-1}
			}
			return []float64{float64(s.dispatched)}
		}
	}
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	return []sharingCase{
		{"vtc", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			p := vtc()
			return p, vtcUsage(p)
		}},
		{"las", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			p, err := newLAS(LASOptions{HalfLife: 5 * time.Second})
			check(err)
			return p, func(id flowcontrol.FlowID, b int, now time.Time) []float64 {
				s, _ := Service(p, id, b, now)
				return []float64{s}
			}
		}},
		{"las-llm-d", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			p, err := newLASReference(lasReferenceOptions{HalfLife: 5 * time.Second})
			check(err)
			return p, func(id flowcontrol.FlowID, b int, now time.Time) []float64 {
				s, _ := Service(p, id, b, now)
				return []float64{s}
			}
		}},
		{"turn-priority", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			p := turn()
			return p, turnUsage(p)
		}},
		{"bounded-wait/vtc", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			in := vtc()
			p, err := newBoundedWait(BoundedWaitOptions{Wait: time.Hour, Inner: in})
			check(err)
			return p, vtcUsage(in)
		}},
		{"bounded-wait/turn", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			in := turn()
			// No first-turn share: its credit is a share of each replica's own dispatches.
			p, err := newBoundedWait(BoundedWaitOptions{Wait: time.Hour, Inner: in})
			check(err)
			return p, turnUsage(in)
		}},
		{"hierarchy/vtc-vtc", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			ten, ses := vtc(), vtc()
			p, err := newHierarchy(HierarchyOptions{Tenants: ten, Sessions: ses})
			check(err)
			tu, su := vtcUsage(ten), vtcUsage(ses)
			return p, func(id flowcontrol.FlowID, b int, now time.Time) []float64 {
				return append(tu(tenantBeforeSlash(id), b, now), su(id, b, now)...)
			}
		}},
		{"hierarchy/vtc-turn", func() (flowcontrol.Policy, func(flowcontrol.FlowID, int, time.Time) []float64) {
			ten, ses := vtc(), turn()
			p, err := newHierarchy(HierarchyOptions{Tenants: ten, Sessions: ses})
			check(err)
			tu, su := vtcUsage(ten), turnUsage(ses)
			return p, func(id flowcontrol.FlowID, b int, now time.Time) []float64 {
				return append(tu(tenantBeforeSlash(id), b, now), su(id, b, now)...)
			}
		}},
	}
}

// TestUsageSharingMatchesOneInstance is model-based: a random sequence of requests, each
// served by one of two replicas (A or B), is also served by one instance that sees them all;
// whenever A and B have exchanged their deltas, each holds the usage the one instance holds
// for every flow, and orders the flows as it does (FlowKey, and the pick of a FlowPicker).
// Every flow stays backlogged, so VTC lifts nothing (lifts are local by design); completions
// follow dispatches at once, so turn priority, which shares completed turns, is comparable.
func TestUsageSharingMatchesOneInstance(t *testing.T) {
	for _, c := range sharingCases(t) {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(5) {
				rng := rand.New(rand.NewPCG(seed, 7))
				m := newUsageModel(9)
				p1, u1 := c.new()
				pa, ua := c.new()
				pb, ub := c.new()
				one, a, b := m.inst(p1), m.inst(pa), m.inst(pb)
				exchanges, deltas := 0, 0
				for step := range 400 {
					m.now = m.now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
					i := rng.IntN(len(m.ids))
					est := flowcontrol.Tokens(1 + rng.IntN(4000))
					u := flowcontrol.Usage{PromptTokens: max(est+flowcontrol.Tokens(rng.IntN(401)-200), 1), OutputTokens: flowcontrol.Tokens(rng.IntN(600))}
					x := a
					if rng.IntN(3) == 0 { // B serves a third
						x = b
					}
					m.serve(one, i, est, u)
					m.serve(x, i, est, u)
					if rng.IntN(4) != 0 && step != 399 {
						continue
					}
					na, nb := m.exchange(a, b)
					exchanges++
					deltas += na + nb
					k1 := m.keys(one)
					for _, r := range []struct {
						name string
						x    *usageInst
						u    func(flowcontrol.FlowID, int, time.Time) []float64
					}{{"A", a, ua}, {"B", b, ub}} {
						for j, id := range m.ids {
							got, want := r.u(id, m.bands[j], m.now), u1(id, m.bands[j], m.now)
							for k := range want {
								if !closeTo(got[k], want[k]) {
									t.Fatalf("seed %d step %d: replica %s holds usage %v for %s, one instance %v", seed, step, r.name, got, id, want)
								}
							}
						}
						kx := m.keys(r.x)
						for band := range 2 {
							if got, want := order(kx, m.bands, band), order(k1, m.bands, band); !slices.Equal(got, want) {
								t.Fatalf("seed %d step %d: replica %s orders band %d %v, one instance %v\n keys %v\n want %v", seed, step, r.name, band, got, want, kx, k1)
							}
							if got, want := m.pick(r.x, band), m.pick(one, band); got != want {
								t.Fatalf("seed %d step %d: replica %s picks %q in band %d, one instance %q", seed, step, r.name, got, band, want)
							}
						}
					}
				}
				if exchanges < 50 || deltas == 0 {
					t.Fatalf("seed %d: %d exchanges, %d deltas: the model exchanged nothing", seed, exchanges, deltas)
				}
			}
		})
	}
}

// TestUsageDeltasDirtyList: a report walks only the flows charged since the previous one,
// empties the dirty list, and the next report without charges is empty.
func TestUsageDeltasDirtyList(t *testing.T) {
	p, _ := newVTC(VTCOptions{})
	m := newUsageModel(1000)
	x := m.inst(p)
	if d := p.AppendUsageDeltas(nil, m.now); len(d) != 0 || len(p.flows.dirty) != 0 {
		t.Fatalf("after enqueues only: %d deltas, %d dirty, want none", len(d), len(p.flows.dirty))
	}
	for _, i := range []int{3, 500, 3, 999} {
		m.serve(x, i, 100, flowcontrol.Usage{PromptTokens: 100, OutputTokens: 50})
	}
	if got := len(p.flows.dirty); got != 3 {
		t.Fatalf("dirty list holds %d slots of %d flows, want the 3 charged", got, p.flows.len())
	}
	d := p.AppendUsageDeltas(nil, m.now)
	want := map[flowcontrol.FlowID]float64{m.ids[3]: 400, m.ids[500]: 200, m.ids[999]: 200}
	if len(d) != len(want) {
		t.Fatalf("deltas %v, want %v", d, want)
	}
	for _, e := range d {
		if e.Amount != want[flowcontrol.FlowID(e.Flow)] || e.Band != m.bands[slices.Index(m.ids, flowcontrol.FlowID(e.Flow))] {
			t.Errorf("delta %+v, want amount %v in band %d", e, want[flowcontrol.FlowID(e.Flow)], m.bands[slices.Index(m.ids, flowcontrol.FlowID(e.Flow))])
		}
	}
	if len(p.flows.dirty) != 0 {
		t.Errorf("dirty list holds %d slots after the report, want 0", len(p.flows.dirty))
	}
	for i := range p.flows.slots {
		if s := &p.flows.slots[i]; s.dpos != -1 || s.grown != 0 {
			t.Fatalf("slot %d (%s) still dirty after the report: dpos %d, grown %v", i, s.ref.id, s.dpos, s.grown)
		}
	}
	if d := p.AppendUsageDeltas(d[:0], m.now); len(d) != 0 {
		t.Errorf("second report without charges: %v, want none", d)
	}
}

// TestUsageDeltasCarryCorrections: a correction that outweighs what a flow accrued since the
// last report is carried, not sent (deltas are positive), and nets against later growth.
func TestUsageDeltasCarryCorrections(t *testing.T) {
	p, _ := newVTC(VTCOptions{})
	m := newUsageModel(1)
	x := m.inst(p)
	f := &x.flows[0]
	r := m.heads[0]
	r.PromptTokens = 1000
	step := func(kind flowcontrol.EventKind, u flowcontrol.Usage) {
		switch kind {
		case flowcontrol.EventDispatch:
			f.Queued--
			f.InFlight++
		case flowcontrol.EventDone:
			f.InFlight--
		}
		m.event(x, kind, 0, &r, u)
	}
	amounts := func() []float64 {
		var a []float64
		for _, d := range p.AppendUsageDeltas(nil, m.now) {
			a = append(a, d.Amount)
		}
		return a
	}
	step(flowcontrol.EventDispatch, flowcontrol.Usage{})
	if got := amounts(); !slices.Equal(got, []float64{1000}) {
		t.Fatalf("after a dispatch of 1000 prompt tokens: %v, want [1000]", got)
	}
	step(flowcontrol.EventDone, flowcontrol.Usage{PromptTokens: 400}) // −600
	if got := amounts(); len(got) != 0 {
		t.Fatalf("after a correction of −600: %v, want nothing", got)
	}
	step(flowcontrol.EventDispatch, flowcontrol.Usage{}) // +1000 − 600 carried
	if got := amounts(); !slices.Equal(got, []float64{400}) {
		t.Fatalf("after the next dispatch: %v, want [400] (1000 less the carried 600)", got)
	}
}

// TestUsageDeltasForgottenFlow: a flow forgotten with unreported growth hands it to the next
// report once reports are being asked for; before the first, it is dropped with the flow.
func TestUsageDeltasForgottenFlow(t *testing.T) {
	for _, sharing := range []bool{false, true} {
		p, _ := newVTC(VTCOptions{Memory: Memory{MaxIdle: 2}})
		now := usageStart
		if sharing {
			p.AppendUsageDeltas(nil, now)
		}
		serve := func(id flowcontrol.FlowID) {
			f := &flowcontrol.FlowState{ID: id, InFlight: 1}
			r := &flowcontrol.Request{Flow: id, PromptTokens: 10, Arrival: now}
			p.Observe(&flowcontrol.Event{Kind: flowcontrol.EventDispatch, Now: now, Flow: f, Request: r})
			f.InFlight = 0
			p.Observe(&flowcontrol.Event{Kind: flowcontrol.EventDone, Now: now, Flow: f, Request: r, Usage: flowcontrol.Usage{PromptTokens: 10}})
		}
		for _, id := range []flowcontrol.FlowID{"a", "b", "c", "d"} { // a and b are forgotten
			serve(id)
		}
		if _, ok := p.Counter("a", 0); ok {
			t.Fatalf("flow a still remembered with MaxIdle 2")
		}
		got := map[flowcontrol.FlowID]float64{}
		for _, d := range p.AppendUsageDeltas(nil, now) {
			got[flowcontrol.FlowID(d.Flow)] += d.Amount
		}
		want := map[flowcontrol.FlowID]float64{"c": 10, "d": 10}
		if sharing {
			want["a"], want["b"] = 10, 10
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sharing %v: deltas %v, want %v", sharing, got, want)
		}
		if len(p.flows.gone) != 0 || len(p.flows.dirty) != 0 {
			t.Errorf("sharing %v: %d forgotten and %d dirty left after the report", sharing, len(p.flows.gone), len(p.flows.dirty))
		}
	}
}

// TestApplyUsageDeltasBoundedAndChecked: deltas that are not finite and positive or name a
// negative band change nothing; deltas for unknown flows create idle state within MaxIdle and
// are not reported back.
func TestApplyUsageDeltasBoundedAndChecked(t *testing.T) {
	bad := []peer.UsageDelta{
		{Flow: "nan", Amount: math.NaN()}, {Flow: "inf", Amount: math.Inf(1)}, {Flow: "zero"},
		{Flow: "neg", Amount: -5}, {Flow: "band", Band: -1, Amount: 5},
	}
	for _, c := range sharingCases(t) {
		t.Run(c.name, func(t *testing.T) {
			p, _ := c.new()
			us := p.(peer.UsageSharer)
			us.ApplyUsageDeltas(bad, usageStart)
			if n := flowsRemembered(p); n != 0 {
				t.Errorf("unusable deltas created %d flows", n)
			}
			var many []peer.UsageDelta
			for i := range 3 * DefaultMaxIdle {
				many = append(many, peer.UsageDelta{Flow: fmt.Sprintf("t%d/s%d", i%7, i), Amount: 10})
			}
			us.ApplyUsageDeltas(many, usageStart)
			if n := flowsRemembered(p); n == 0 || n > 2*DefaultMaxIdle {
				t.Errorf("%d deltas for unknown flows: %d remembered, want 1 to %d (MaxIdle per table)", len(many), n, 2*DefaultMaxIdle)
			}
			if d := us.AppendUsageDeltas(nil, usageStart); len(d) != 0 {
				t.Errorf("applied deltas reported back: %d", len(d))
			}
		})
	}
}

// flowsRemembered is the number of flows the usage tables of p (and of its level or inner
// policies) remember.
func flowsRemembered(p flowcontrol.Policy) int {
	switch p := p.(type) {
	case *vtcPolicy:
		return p.flows.len()
	case *lasPolicy:
		return p.flows.len()
	case *lasReference:
		return p.flows.len()
	case *turnPriority:
		return p.flows.len()
	case *boundedWait:
		return flowsRemembered(p.inner)
	case *hierarchyPolicy:
		return flowsRemembered(p.tenants) + flowsRemembered(p.sessions)
	}
	return 0
}

// TestTurnPriorityApplyTurns steps the turn count through peers' completed turns: they deepen
// the session, hold off the reset, and arrive after a reset that was due.
func TestTurnPriorityApplyTurns(t *testing.T) {
	p, _ := newTurnPriority(TurnPriorityOptions{})
	f := &flowcontrol.FlowState{ID: "s", Queued: 1, Head: &flowcontrol.Request{Arrival: usageStart}}
	turnAt := func(now time.Time) int64 {
		s := p.flows.get(flowRef{"s", 0})
		return p.peekTurn(s, f.InFlight, now.UnixNano())
	}
	p.ItemKey(f.Head, f, usageStart)
	p.Observe(&flowcontrol.Event{Kind: flowcontrol.EventEnqueue, Now: usageStart, Flow: f, Request: f.Head})
	apply := func(at time.Duration, n float64) {
		p.ApplyUsageDeltas([]peer.UsageDelta{{Flow: "s", Amount: n}}, usageStart.Add(at))
	}
	for _, st := range []struct {
		at   time.Duration
		n    float64 // turns a peer completed, applied at at
		want int64   // turn at at, after the delta
	}{
		{0, 0, 1},
		{time.Second, 2, 3},
		{100 * time.Second, 1, 4},   // within 120 s of the last: no reset
		{200 * time.Second, 0.4, 5}, // a fraction still counts one turn; 100 s after the last
		{400 * time.Second, 0, 1},   // 200 s without a completion anywhere: reset
		{401 * time.Second, 3, 4},   // after the reset that was due: 1 + 3
	} {
		if st.n > 0 {
			apply(st.at, st.n)
		}
		if got := turnAt(usageStart.Add(st.at)); got != st.want {
			t.Errorf("at %v after %v peer turns: turn %d, want %d", st.at, st.n, got, st.want)
		}
	}
}

// TestBoundedWaitApplyEndsFirstTurn: a session whose turn was served on another replica is no
// longer a first turn here, so the first-turn share does not go to it.
func TestBoundedWaitApplyEndsFirstTurn(t *testing.T) {
	in, _ := newTurnPriority(TurnPriorityOptions{})
	p, _ := newBoundedWait(BoundedWaitOptions{Wait: time.Hour, Inner: in, FirstTurnShare: 0.5})
	m := newUsageModel(2)
	m.inst(p)
	n := p.nodes[flowRef{m.ids[0], m.bands[0]}]
	if n == nil || !n.first {
		t.Fatalf("flow %s should wait at its first turn", m.ids[0])
	}
	p.ApplyUsageDeltas([]peer.UsageDelta{{Flow: string(m.ids[0]), Band: m.bands[0], Amount: 1}}, m.now)
	if n.first || p.bands[0].first.has(n) {
		t.Errorf("after a peer's completed turn flow %s is still a first turn here", m.ids[0])
	}
}

// TestVTCPeerLift steps the lift of flows that become backlogged: a flow no peer has charged
// is lifted to the smallest counter, as in one VTC; a flow peers have charged only to (k+1)·U
// below it, and not at all when it is within that.
func TestVTCPeerLift(t *testing.T) {
	p, _ := newVTC(VTCOptions{})
	now := usageStart
	ev := func(kind flowcontrol.EventKind, f *flowcontrol.FlowState, prompt flowcontrol.Tokens, u flowcontrol.Usage) {
		r := &flowcontrol.Request{Flow: f.ID, PromptTokens: prompt, Arrival: now}
		switch kind {
		case flowcontrol.EventEnqueue:
			f.Queued++
		case flowcontrol.EventDispatch:
			f.Queued--
			f.InFlight++
		case flowcontrol.EventDone:
			f.InFlight--
		}
		p.Observe(&flowcontrol.Event{Kind: kind, Now: now, Flow: f, Request: r, Usage: u})
	}
	a := &flowcontrol.FlowState{ID: "a"}
	ev(flowcontrol.EventEnqueue, a, 1000, flowcontrol.Usage{})
	ev(flowcontrol.EventDispatch, a, 1000, flowcontrol.Usage{})
	ev(flowcontrol.EventDone, a, 1000, flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 500}) // U = 2000
	ev(flowcontrol.EventEnqueue, a, 10000, flowcontrol.Usage{})
	ev(flowcontrol.EventEnqueue, a, 10000, flowcontrol.Usage{})
	ev(flowcontrol.EventDispatch, a, 10000, flowcontrol.Usage{}) // a stays backlogged at 12000, k = 1
	if c, _ := p.Counter("a", 0); c != 12000 {
		t.Fatalf("a's counter %v, want 12000", c)
	}
	p.ApplyUsageDeltas([]peer.UsageDelta{{Flow: "p1", Amount: 100}, {Flow: "p2", Amount: 10000}}, now)
	for _, c := range []struct {
		id   flowcontrol.FlowID
		want float64
	}{
		{"q", 12000},  // never charged by a peer: lifted to the floor
		{"p1", 8000},  // charged by a peer: lifted to 12000 − (1+1)·2000
		{"p2", 10000}, // within (k+1)·U of the floor: not lifted
	} {
		f := &flowcontrol.FlowState{ID: c.id}
		r := &flowcontrol.Request{Flow: c.id, Arrival: now}
		if got := p.Rank(r, f, now).Key.Tie; got != int64(c.want*vtcScale) {
			t.Errorf("%s: Rank before it is backlogged %v, want %v", c.id, float64(got)/vtcScale, c.want)
		}
		ev(flowcontrol.EventEnqueue, f, 10, flowcontrol.Usage{})
		if got, _ := p.Counter(c.id, 0); got != c.want {
			t.Errorf("%s: counter %v once backlogged, want %v", c.id, got, c.want)
		}
	}
}

// TestVTCApplySaturates: however large and many a peer's deltas, a counter saturates rather
// than wrapping to a small value (which would put the flow first).
func TestVTCApplySaturates(t *testing.T) {
	p, _ := newVTC(VTCOptions{})
	var last float64
	for i := range 10 {
		p.ApplyUsageDeltas([]peer.UsageDelta{{Flow: "f", Amount: 1e300}}, usageStart)
		c, _ := p.Counter("f", 0)
		if c < last || c <= 0 {
			t.Fatalf("after %d huge deltas the counter is %v, was %v", i+1, c, last)
		}
		last = c
	}
}
