package flowcontrol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
)

// countingPicker is mostQueued that counts its PickFlow calls.
type countingPicker struct {
	mostQueued
	picks int
}

func (p *countingPicker) PickFlow(band int, flows []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	p.picks++
	return p.mostQueued.PickFlow(band, flows, now)
}

// A gate that is closed to the whole band (a BandGate) is found out before the FlowPicker
// is asked, so enqueues, Ticks and completions against a closed gate cost no PickFlow; a
// gate that needs the request (GateFunc) still costs one PickFlow per dispatch attempt.
func TestClosedBandGateSkipsPicker(t *testing.T) {
	level := 0.0
	sat := &flowcontrol.Saturation{Pools: []flowcontrol.Pool{{Level: func() float64 { return level }}}}
	oneAtATime := flowcontrol.GateFunc(func(_ *flowcontrol.Request, l flowcontrol.Load) bool { return l.InFlight < 1 })
	for _, c := range []struct {
		name string
		gate flowcontrol.Gate
		// cumulative PickFlow calls after the enqueues, the Tick and the completion, and
		// requests dispatched in all.
		enq, tick, done, dispatched int
	}{
		// The completion opens the limit: one pick for the dispatch, none for the
		// attempt after it (the gate is closed again).
		{"concurrency-limit", &flowcontrol.ConcurrencyLimit{Limit: 1}, 0, 0, 1, 2},
		{"saturation", sat, 0, 0, 0, 1},
		{"all-gates-with-func", flowcontrol.AllGates{&flowcontrol.ConcurrencyLimit{Limit: 1}, flowcontrol.GateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return true })}, 0, 0, 1, 2},
		// A GateFunc sees the request: the picker is asked first, every time.
		{"gate-func", oneAtATime, 4, 5, 7, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			level = 0
			p := &countingPicker{}
			q, _, rec := newQueue(t, flowcontrol.Options{Policy: p, Gate: c.gate})
			run, err := q.TryAdmit(flowcontrol.Request{Flow: "run", Value: "run"})
			if err != nil {
				t.Fatalf("TryAdmit: %v", err)
			}
			level = 1 // saturation: the pool is full from now on
			p.picks = 0
			for i, f := range []flowcontrol.FlowID{"a", "b", "c", "d"} {
				q.Enqueue(flowcontrol.Request{Flow: f, Value: fmt.Sprint(f, i)})
			}
			if p.picks != c.enq {
				t.Errorf("PickFlow calls after 4 enqueues = %d, want %d", p.picks, c.enq)
			}
			q.Tick()
			if p.picks != c.tick {
				t.Errorf("PickFlow calls after Tick = %d, want %d", p.picks, c.tick)
			}
			run.Done(flowcontrol.Usage{})
			if p.picks != c.done {
				t.Errorf("PickFlow calls after Done = %d, want %d", p.picks, c.done)
			}
			if got := len(rec.dispatched()); got != c.dispatched {
				t.Errorf("dispatched %d, want %d", got, c.dispatched)
			}
		})
	}
}

// OpenBand false must imply Open false for every request of the band; for the built-in
// band-only gates the two agree exactly.
func TestBandGateAgreesWithOpen(t *testing.T) {
	level := 0.0
	sat := &flowcontrol.Saturation{Pools: []flowcontrol.Pool{
		{Level: func() float64 { return level }, Thresholds: []float64{0.9, 0.5}},
		{Level: func() float64 { return level / 2 }, Thresholds: []float64{0, 0.3}},
	}}
	cl := &flowcontrol.ConcurrencyLimit{Limit: 4, BandLimits: []int{0, 2, 1}}
	never := flowcontrol.GateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return false })
	for _, c := range []struct {
		name  string
		gate  flowcontrol.BandGate
		exact bool
	}{
		{"concurrency-limit", cl, true},
		{"saturation", sat, true},
		{"all-gates", flowcontrol.AllGates{cl, sat}, true},
		{"all-gates-empty", flowcontrol.AllGates{}, true},
		{"all-gates-with-func", flowcontrol.AllGates{cl, never}, false},
		{"nested", flowcontrol.AllGates{flowcontrol.AllGates{sat}, cl}, true},
	} {
		for _, lv := range []float64{0, 0.4, 0.6, 0.95, 2} {
			level = lv
			for inFlight := range 6 {
				for b := range 4 {
					l := flowcontrol.Load{InFlight: inFlight, BandInFlight: inFlight / 2}
					ob, o := c.gate.OpenBand(b, l), c.gate.Open(&flowcontrol.Request{Band: b}, l)
					if (!ob && o) || (c.exact && ob != o) {
						t.Errorf("%s level %v load %+v band %d: OpenBand %v, Open %v", c.name, lv, l, b, ob, o)
					}
				}
			}
		}
	}
}

// seqPicker serves the flow with the smallest (HeadKey, HeadSeq) — what the queue does
// with FCFS keys — and checks the FlowState contract on every call: a copy taken at the
// flow's latest event still equals the live state, Head included.
type seqPicker struct {
	fcfs
	t    *testing.T
	last map[flowcontrol.FlowID]flowcontrol.FlowState
}

func (p *seqPicker) Observe(e *flowcontrol.Event) {
	if (e.Flow.Head == nil) != (e.Flow.HeadSeq == 0) {
		p.t.Errorf("%v of %s: Head %p with HeadSeq %d", e.Kind, e.Flow.ID, e.Flow.Head, e.Flow.HeadSeq)
	}
	p.last[e.Flow.ID] = *e.Flow
}

func (p *seqPicker) PickFlow(_ int, flows []*flowcontrol.FlowState, _ time.Time) (flowcontrol.FlowID, bool) {
	best := flows[0]
	for _, f := range flows {
		if c, ok := p.last[f.ID]; !ok || c != *f || *c.Head != *f.Head {
			p.t.Errorf("flow %s: copy from its last event %+v, live state %+v", f.ID, c, *f)
		}
		if f.HeadKey.Less(best.HeadKey) || (f.HeadKey == best.HeadKey && f.HeadSeq < best.HeadSeq) {
			best = f
		}
	}
	return best.ID, true
}

// A FlowPicker that breaks ties by HeadSeq reproduces the keyed queue's order exactly,
// here with every arrival at the same instant (all keys tie), and FlowState copies stay
// exact until the flow's next event.
func TestHeadSeqReproducesQueueOrder(t *testing.T) {
	run := func(p flowcontrol.Policy) []any {
		q, clk, rec := newQueue(t, flowcontrol.Options{Policy: p, Gate: &flowcontrol.ConcurrencyLimit{Limit: 2}})
		var tickets []flowcontrol.Ticket
		done := 0 // rec.dispatched()[:done] are completed (they complete in dispatch order)
		for i := range 60 {
			tk, err := q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(fmt.Sprint("f", i*7%5)), Value: i})
			if err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, tk)
			if i%9 == 4 {
				tickets[i-2].Cancel() // a head or not, depending on the flow
			}
			if i%3 == 2 {
				if d := rec.dispatched(); done < len(d) {
					rec.ticket(d[done]).Done(flowcontrol.Usage{})
					done++
				}
				if i%12 == 5 {
					clk.Advance(time.Millisecond)
				}
			}
		}
		for d := rec.dispatched(); done < len(d); d = rec.dispatched() {
			rec.ticket(d[done]).Done(flowcontrol.Usage{})
			done++
		}
		if s := q.Stats(); s.Queued != 0 || s.InFlight != 0 {
			t.Fatalf("not drained: %+v", s)
		}
		return rec.dispatched()
	}
	want := run(fairness.FCFS())
	got := run(&seqPicker{t: t, last: map[flowcontrol.FlowID]flowcontrol.FlowState{}})
	if !equal(got, want) {
		t.Errorf("picker order %v\nwant (FCFS keys) %v", got, want)
	}
}
