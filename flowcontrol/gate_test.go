package flowcontrol_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
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

// gateFunc adapts a function to flowcontrol.Gate.
type gateFunc func(r *flowcontrol.Request, l flowcontrol.Load) bool

func (f gateFunc) Open(r *flowcontrol.Request, l flowcontrol.Load) bool { return f(r, l) }

// Limits closed to the whole band (MaxInFlight, Saturation) are found out before the
// FlowPicker is asked, so enqueues, Notifies and completions against a closed band cost no
// PickFlow; a Gate, which needs the request, still costs one PickFlow per dispatch attempt.
func TestClosedBandGateSkipsPicker(t *testing.T) {
	level := 0.0
	sat := []flowcontrol.Pool{{Level: func() float64 { return level }}}
	oneAtATime := gateFunc(func(_ *flowcontrol.Request, l flowcontrol.Load) bool { return l.InFlight < 1 })
	for _, c := range []struct {
		name string
		opts flowcontrol.Options
		// cumulative PickFlow calls after the enqueues, the Notify and the completion, and
		// requests dispatched in all.
		enq, tick, done, dispatched int
	}{
		// The completion opens the limit: one pick for the dispatch, none for the
		// attempt after it (the limit is closed again).
		{"max-in-flight", flowcontrol.Options{MaxInFlight: 1}, 0, 0, 1, 2},
		{"saturation", flowcontrol.Options{Saturation: sat}, 0, 0, 0, 1},
		{"max-in-flight-and-gate", flowcontrol.Options{MaxInFlight: 1, Gate: gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return true })}, 0, 0, 1, 2},
		// A Gate sees the request: the picker is asked first, every time.
		{"gate", flowcontrol.Options{Gate: oneAtATime}, 4, 5, 7, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			level = 0
			p := &countingPicker{}
			c.opts.Policy = p
			q, _, rec := newQueue(t, c.opts)
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
			q.Notify()
			if p.picks != c.tick {
				t.Errorf("PickFlow calls after Notify = %d, want %d", p.picks, c.tick)
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

// The built-in limits answer per band exactly as their definitions say — MaxInFlight and
// BandMaxInFlight[b] against the requests in flight, each pool's Level against its
// threshold for b (1 when missing or zero) — and a Gate can only close what they open.
func TestBuiltinLimits(t *testing.T) {
	level := 0.0
	pools := []flowcontrol.Pool{
		{Level: func() float64 { return level }, Thresholds: []float64{0.9, 0.5}},
		{Level: func() float64 { return level / 2 }, Thresholds: []float64{0, 0.3}},
	}
	concOpen := func(b int, l flowcontrol.Load) bool {
		bandLimits := []int{0, 2, 1}
		return l.InFlight < 4 && (b >= len(bandLimits) || bandLimits[b] == 0 || l.InFlight < bandLimits[b])
	}
	satOpen := func(b int) bool {
		for _, p := range pools {
			th := 1.0
			if b < len(p.Thresholds) && p.Thresholds[b] > 0 {
				th = p.Thresholds[b]
			}
			if p.Level() >= th {
				return false
			}
		}
		return true
	}
	never := gateFunc(func(*flowcontrol.Request, flowcontrol.Load) bool { return false })
	for _, c := range []struct {
		name string
		opts flowcontrol.Options
		want func(b int, l flowcontrol.Load) bool
		gate bool // the gate is open when the limits are
	}{
		{"max-in-flight", flowcontrol.Options{MaxInFlight: 4, BandMaxInFlight: []int{0, 2, 1}}, concOpen, true},
		{"saturation", flowcontrol.Options{Saturation: pools}, func(b int, _ flowcontrol.Load) bool { return satOpen(b) }, true},
		{"both", flowcontrol.Options{MaxInFlight: 4, BandMaxInFlight: []int{0, 2, 1}, Saturation: pools}, func(b int, l flowcontrol.Load) bool { return concOpen(b, l) && satOpen(b) }, true},
		{"none", flowcontrol.Options{}, func(int, flowcontrol.Load) bool { return true }, true},
		{"with-gate", flowcontrol.Options{MaxInFlight: 4, BandMaxInFlight: []int{0, 2, 1}, Gate: never}, concOpen, false},
	} {
		c.opts.Bands = 4
		q, err := flowcontrol.New(c.opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, lv := range []float64{0, 0.4, 0.6, 0.95, 2} {
			level = lv
			for inFlight := range 6 {
				for b := range 4 {
					l := flowcontrol.Load{InFlight: inFlight, BandInFlight: inFlight / 2}
					want := c.want(b, l)
					band, open := flowcontrol.Open(q, &flowcontrol.Request{Band: b}, l)
					if band != want || open != (want && c.gate) {
						t.Errorf("%s level %v load %+v band %d: limits %v, open %v; want %v, %v", c.name, lv, l, b, band, open, want, want && c.gate)
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
		q, clk, rec := newQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 2})
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

// The replication seam changes MaxInFlight under the lock and dispatches what the new limit
// lets through at once.
func TestSetMaxInFlight(t *testing.T) {
	q, _, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	for i := range 4 {
		q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(fmt.Sprint("f", i)), Value: i})
	}
	if got := rec.dispatched(); len(got) != 1 {
		t.Fatalf("dispatched %v with MaxInFlight 1, want one", got)
	}
	peer.SetMaxInFlight(q, 3)
	if got, want := rec.dispatched(), []any{0, 1, 2}; !equal(got, want) {
		t.Fatalf("after raising the limit to 3, dispatched %v, want %v", got, want)
	}
	peer.SetMaxInFlight(q, 0) // no limit
	if got := rec.dispatched(); len(got) != 4 {
		t.Fatalf("with no limit, dispatched %v, want all four", got)
	}
}
