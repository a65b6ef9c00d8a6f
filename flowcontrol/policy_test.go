package flowcontrol_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
)

// tracePolicy is FCFS that logs every call with the flow state it saw.
type tracePolicy struct {
	fcfs
	log []string
}

func (p *tracePolicy) ItemKey(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	p.log = append(p.log, fmt.Sprintf("item %v q=%d", r.Value, f.Queued))
	return p.fcfs.ItemKey(r, f, now)
}

func (p *tracePolicy) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	p.log = append(p.log, fmt.Sprintf("flow %s head=%v q=%d i=%d", f.ID, f.Head.Value, f.Queued, f.InFlight))
	return p.fcfs.FlowKey(f, now)
}

func (p *tracePolicy) Observe(e *flowcontrol.Event) {
	head := any(nil)
	if e.Flow.Head != nil {
		head = e.Flow.Head.Value
	}
	s := fmt.Sprintf("%s %v %s q=%d i=%d head=%v", e.Kind, e.Request.Value, e.Flow.ID, e.Flow.Queued, e.Flow.InFlight, head)
	if e.Kind == flowcontrol.EventDone {
		s += fmt.Sprintf(" usage=%d/%d/%d", e.Usage.PromptTokens, e.Usage.CachedTokens, e.Usage.OutputTokens)
	}
	p.log = append(p.log, s)
}

func TestPolicyCallOrder(t *testing.T) {
	p := &tracePolicy{}
	q, clk, rec := newQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 1})
	q.Enqueue(flowcontrol.Request{Flow: "a", Value: 1})
	clk.Advance(time.Second)
	q.Enqueue(flowcontrol.Request{Flow: "a", Value: 2})
	q.Enqueue(flowcontrol.Request{Flow: "b", Value: 3})
	rec.ticket(1).Done(flowcontrol.Usage{PromptTokens: 100, CachedTokens: 60, OutputTokens: 7})
	want := []string{
		"item 1 q=0",
		"enqueue 1 a q=1 i=0 head=1",
		"flow a head=1 q=1 i=0",
		"dispatch 1 a q=0 i=1 head=<nil>",
		"item 2 q=0",
		"enqueue 2 a q=1 i=1 head=2",
		"flow a head=2 q=1 i=1",
		"item 3 q=0",
		"enqueue 3 b q=1 i=0 head=3",
		"flow b head=3 q=1 i=0",
		"done 1 a q=1 i=0 head=2 usage=100/60/7",
		"flow a head=2 q=1 i=0",
		"dispatch 2 a q=0 i=1 head=<nil>",
	}
	if got := strings.Join(p.log, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// promoting is a toy bounded-wait policy: flows are ordered by Value (lower first, fixed
// per flow id), except that a flow whose head has waited `after` moves to tier 0.
type promoting struct {
	value map[flowcontrol.FlowID]float64
	after time.Duration
	only  func(flowcontrol.FlowID) bool // which flows may be promoted; nil: all
	calls int
}

func (p *promoting) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

func (p *promoting) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	p.calls++
	if p.only != nil && !p.only(f.ID) {
		return flowcontrol.Key{Tier: 1, Value: p.value[f.ID]}, time.Time{}
	}
	due := f.Head.Arrival.Add(p.after)
	if !now.Before(due) {
		return flowcontrol.Key{Tier: 0, Tie: f.Head.Arrival.UnixNano()}, time.Time{}
	}
	return flowcontrol.Key{Tier: 1, Value: p.value[f.ID]}, due
}

func (p *promoting) Observe(*flowcontrol.Event) {}

func TestFlowKeyRekeyedWhenValidityEnds(t *testing.T) {
	p := &promoting{value: map[flowcontrol.FlowID]float64{"deep": 0, "new": 10}, after: 30 * time.Second}
	q, clk, rec := newQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 1})
	run, _ := q.TryAdmit(flowcontrol.Request{Flow: "deep", Value: "d0"})
	q.Enqueue(flowcontrol.Request{Flow: "new", Value: "n1"})
	for i := range 5 {
		q.Enqueue(flowcontrol.Request{Flow: "deep", Value: fmt.Sprint("d", i+1)})
	}
	// Each completion 10 s apart: deep wins until the newcomer has waited 30 s.
	for range 5 {
		clk.Advance(10 * time.Second)
		run.Done(flowcontrol.Usage{})
		d := rec.dispatched()
		run = rec.ticket(d[len(d)-1])
	}
	if got, want := rec.dispatched(), []any{"d0", "d1", "d2", "n1", "d3", "d4"}; !equal(got, want) {
		t.Errorf("order %v, want %v (newcomer promoted once it waited 30 s)", got, want)
	}
	run.Done(flowcontrol.Usage{})
	if p.calls > 20 {
		t.Errorf("FlowKey called %d times for 7 requests: re-keying is not targeted", p.calls)
	}
}

func TestRekeyHeapManyFlows(t *testing.T) {
	p := &promoting{
		value: map[flowcontrol.FlowID]float64{"deep": 0},
		after: 30 * time.Second,
		only:  func(id flowcontrol.FlowID) bool { return id != "deep" },
	}
	q, clk, rec := newQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 1, TTL: time.Hour})
	for i := range 20 {
		q.Enqueue(flowcontrol.Request{Flow: "deep", Value: fmt.Sprint("d", i)})
	}
	// Newcomers (value 0 by default, but "deep" has the same value and earlier requests,
	// so they only go once promoted: 30 s after their arrival).
	arrivals := map[time.Duration]string{0: "n0", 5 * time.Second: "n1", 12 * time.Second: "n2", 18 * time.Second: "n3", 41 * time.Second: "n4"}
	p.value["n0"], p.value["n1"], p.value["n2"], p.value["n3"], p.value["n4"] = 1, 1, 1, 1, 1
	for now := time.Duration(0); now <= 90*time.Second; now += time.Second {
		if now > 0 {
			clk.Advance(time.Second)
		}
		if v, ok := arrivals[now]; ok {
			q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(v), Value: v})
		}
		if now > 0 && now%(10*time.Second) == 0 { // one completion every 10 s
			d := rec.dispatched()
			rec.ticket(d[len(d)-1]).Done(flowcontrol.Usage{})
		}
	}
	want := []any{"d0", "d1", "d2", "n0", "n1", "n2", "n3", "d3", "n4", "d4"}
	if got := rec.dispatched(); !equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestTryAdmitHeldByPicker(t *testing.T) {
	p := &mostQueued{hold: true}
	q, _, _ := newQueue(t, flowcontrol.Options{Policy: p})
	before := q.Stats()
	if _, err := q.TryAdmit(flowcontrol.Request{Flow: "a", Bytes: 3}); !errors.Is(err, flowcontrol.ErrWouldWait) {
		t.Fatalf("TryAdmit with the picker holding the band = %v, want ErrWouldWait", err)
	}
	after := q.Stats()
	if after.Queued != 0 || after.Flows != 0 || after.QueuedBytes != 0 || after.RejectedCapacity != before.RejectedCapacity+1 {
		t.Errorf("stats %+v: the refused request must leave nothing behind", after)
	}
}

// mostQueued picks the flow with the most waiting requests; it can also hold a band back.
type mostQueued struct {
	fcfs
	hold  bool
	bogus bool
	seen  int
}

func (p *mostQueued) PickFlow(band int, flows []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	p.seen = len(flows)
	if p.hold {
		return "", false
	}
	if p.bogus {
		return "nobody", true
	}
	best := flows[0]
	for _, f := range flows[1:] {
		if f.Queued > best.Queued || (f.Queued == best.Queued && f.ID < best.ID) {
			best = f
		}
	}
	return best.ID, true
}

func TestFlowPicker(t *testing.T) {
	p := &mostQueued{hold: true}
	q, _, rec := newQueue(t, flowcontrol.Options{Policy: p, MaxInFlight: 1})
	for i, f := range []flowcontrol.FlowID{"a", "b", "b", "c", "b", "c"} {
		q.Enqueue(flowcontrol.Request{Flow: f, Value: fmt.Sprint(f, i)})
	}
	if d := rec.dispatched(); len(d) != 0 || p.seen != 3 {
		t.Fatalf("held picker dispatched %v, saw %d flows (want 3)", d, p.seen)
	}
	p.hold = false
	q.Notify()
	for range 6 {
		d := rec.dispatched()
		rec.ticket(d[len(d)-1]).Done(flowcontrol.Usage{})
	}
	if got, want := rec.dispatched(), []any{"b1", "b2", "c3", "a0", "b4", "c5"}; !equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if s := q.Stats(); s.Flows != 0 || s.Queued != 0 {
		t.Errorf("stats %+v", s)
	}
	p.bogus = true
	mustPanic(t, "bogus id", "PickFlow returned", func() { q.Enqueue(flowcontrol.Request{Flow: "x"}) })
}

func TestStrictPriorityPolicy(t *testing.T) {
	q, _, rec := newQueue(t, flowcontrol.Options{Policy: fairness.StrictPriority(), MaxInFlight: 1})
	run, _ := q.TryAdmit(flowcontrol.Request{Value: "first"})
	for i, pr := range []int{0, 5, 1, 5, -3} {
		q.Enqueue(flowcontrol.Request{Flow: flowcontrol.FlowID(fmt.Sprint(i % 2)), Priority: pr, Value: i})
	}
	for range 6 {
		run.Done(flowcontrol.Usage{})
		d := rec.dispatched()
		run = rec.ticket(d[len(d)-1])
	}
	if got, want := rec.dispatched(), []any{"first", 1, 3, 2, 0, 4}; !equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestKeyOrder(t *testing.T) {
	nan := flowcontrol.Key{Value: 0}
	nan.Value = nan.Value / nan.Value // NaN without a constant expression
	for _, c := range []struct {
		a, b flowcontrol.Key
		want bool
	}{
		{flowcontrol.Key{Tier: 0, Value: 9}, flowcontrol.Key{Tier: 1, Value: 0}, true},
		{flowcontrol.Key{Value: 1, Tie: 9}, flowcontrol.Key{Value: 2}, true},
		{flowcontrol.Key{Value: 2}, flowcontrol.Key{Value: 1, Tie: 9}, false},
		{flowcontrol.Key{Tie: 1}, flowcontrol.Key{Tie: 2}, true},
		{flowcontrol.Key{Tie: 2}, flowcontrol.Key{Tie: 2}, false},
	} {
		if got := c.a.Less(c.b); got != c.want {
			t.Errorf("%+v.Less(%+v) = %v", c.a, c.b, got)
		}
	}
	// A NaN flow key sorts last instead of breaking the heap.
	nanPolicy := &keyed{keys: map[flowcontrol.FlowID]flowcontrol.Key{"nan": nan, "one": {Value: 1}, "two": {Value: 2}}}
	q, _, rec := newQueue(t, flowcontrol.Options{Policy: nanPolicy, MaxInFlight: 1})
	run, _ := q.TryAdmit(flowcontrol.Request{Value: "x"})
	for _, f := range []flowcontrol.FlowID{"nan", "two", "one"} {
		q.Enqueue(flowcontrol.Request{Flow: f, Value: string(f)})
	}
	for range 3 {
		run.Done(flowcontrol.Usage{})
		d := rec.dispatched()
		run = rec.ticket(d[len(d)-1])
	}
	run.Done(flowcontrol.Usage{})
	if got, want := rec.dispatched(), []any{"x", "one", "two", "nan"}; !equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// keyed gives each flow a fixed key.
type keyed struct {
	fcfs
	keys map[flowcontrol.FlowID]flowcontrol.Key
}

func (p *keyed) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return p.keys[f.ID], time.Time{}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[flowcontrol.EventKind]string{
		flowcontrol.EventEnqueue: "enqueue", flowcontrol.EventDone: "done", 0: "invalid", 99: "invalid",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
	}
	if got := flowcontrol.Expired.String(); got != "expired" {
		t.Errorf("Expired.String() = %q", got)
	}
}

func TestOutcomeRecordsAdmitPath(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{})
	clk.Advance(time.Second)
	tk, err := q.Admit(context.Background(), flowcontrol.Request{Flow: "a", Arrival: t0, Value: "v"})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(flowcontrol.Usage{OutputTokens: 3})
	if len(rec.outcomes) != 1 || len(rec.done) != 1 {
		t.Fatalf("records %d outcomes, %d done; want 1 and 1", len(rec.outcomes), len(rec.done))
	}
	o := rec.outcomes[0]
	if o.Outcome != flowcontrol.Dispatched || o.Wait != time.Second || o.Request.Deadline != t0.Add(flowcontrol.DefaultTTL) {
		t.Errorf("outcome record %+v", o)
	}
	if d := rec.done[0]; d.Usage.OutputTokens != 3 || d.Request.Value != "v" {
		t.Errorf("done record %+v", d)
	}
}

// fcfs is arrival order (fairness.FCFS's), for the test policies to embed.
type fcfs struct{}

func (fcfs) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

func (fcfs) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

func (fcfs) Observe(*flowcontrol.Event) {}
