package flowcontrol_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// recorder collects observer records.
type recorder struct {
	mu       sync.Mutex
	outcomes []flowcontrol.Record
	done     []flowcontrol.Record
}

func (r *recorder) observer() flowcontrol.Observer {
	return flowcontrol.Observer{
		Outcome: func(rec flowcontrol.Record) { r.mu.Lock(); r.outcomes = append(r.outcomes, rec); r.mu.Unlock() },
		Done:    func(rec flowcontrol.Record) { r.mu.Lock(); r.done = append(r.done, rec); r.mu.Unlock() },
	}
}

// dispatched returns the Value of each dispatched request, in order.
func (r *recorder) dispatched() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v []any
	for _, rec := range r.outcomes {
		if rec.Outcome == flowcontrol.Dispatched {
			v = append(v, rec.Request.Value)
		}
	}
	return v
}

func (r *recorder) ticket(v any) flowcontrol.Ticket {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.outcomes {
		if rec.Outcome == flowcontrol.Dispatched && rec.Request.Value == v {
			return rec.Ticket
		}
	}
	return flowcontrol.Ticket{}
}

func newQueue(t testing.TB, o flowcontrol.Options) (*flowcontrol.Queue, *flowcontroltest.FakeClock, *recorder) {
	t.Helper()
	clk := new(flowcontroltest.FakeClock)
	clk.Set(t0)
	rec := &recorder{}
	if o.Clock == nil {
		o.Clock = clk
	}
	if o.Observer.Outcome == nil && o.Observer.Done == nil {
		o.Observer = rec.observer()
	}
	q, err := flowcontrol.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return q, clk, rec
}

// newBareQueue is newQueue without the recording observer (Options.Observer as given).
func newBareQueue(t testing.TB, o flowcontrol.Options) (*flowcontrol.Queue, *flowcontroltest.FakeClock) {
	t.Helper()
	clk := new(flowcontroltest.FakeClock)
	clk.Set(t0)
	o.Clock = clk
	q, err := flowcontrol.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return q, clk
}

func equal(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFCFSAcrossFlows(t *testing.T) {
	q, clk, rec := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	flows := []flowcontrol.FlowID{"a", "b", "a", "c", "b"}
	for i, f := range flows {
		if _, err := q.Enqueue(flowcontrol.Request{Flow: f, Value: i}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	for i := range flows {
		tk := rec.ticket(i)
		if !flowcontrol.Valid(tk) {
			t.Fatalf("request %d not dispatched; dispatched so far %v", i, rec.dispatched())
		}
		tk.Done(flowcontrol.Usage{PromptTokens: 10})
	}
	if got, want := rec.dispatched(), []any{0, 1, 2, 3, 4}; !equal(got, want) {
		t.Errorf("dispatch order = %v, want %v", got, want)
	}
	s := q.Stats()
	if s.Dispatched != 5 || s.Completed != 5 || s.Queued != 0 || s.InFlight != 0 || s.Flows != 0 {
		t.Errorf("stats = %+v, want 5 dispatched, 5 completed, empty, no flows", s)
	}
}

func TestAdmitBlocksUntilDone(t *testing.T) {
	q, clk, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	first, err := q.Admit(context.Background(), flowcontrol.Request{Flow: "a"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		tk, err := q.Admit(context.Background(), flowcontrol.Request{Flow: "b"})
		if err == nil {
			tk.Done(flowcontrol.Usage{})
		}
		got <- err
	}()
	clk.WaitTimers(1) // the second Admit is asleep
	first.Done(flowcontrol.Usage{})
	if err := <-got; err != nil {
		t.Fatalf("second Admit: %v", err)
	}
}

func TestAdmitExpires(t *testing.T) {
	q, clk, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1, TTL: 10 * time.Second})
	first, _ := q.Admit(context.Background(), flowcontrol.Request{})
	got := make(chan error, 1)
	go func() {
		_, err := q.Admit(context.Background(), flowcontrol.Request{})
		got <- err
	}()
	clk.WaitTimers(1)
	clk.Advance(10 * time.Second)
	if err := <-got; !errors.Is(err, flowcontrol.ErrExpired) {
		t.Fatalf("Admit = %v, want ErrExpired", err)
	}
	if s := q.Stats(); s.Expired != 1 || s.Queued != 0 {
		t.Errorf("stats = %+v, want 1 expired, 0 queued", s)
	}
	first.Done(flowcontrol.Usage{})
}

func TestAdmitCancel(t *testing.T) {
	q, clk, _ := newQueue(t, flowcontrol.Options{MaxInFlight: 1})
	first, _ := q.Admit(context.Background(), flowcontrol.Request{})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := q.Admit(ctx, flowcontrol.Request{Flow: "x", Bytes: 100})
		got <- err
	}()
	clk.WaitTimers(1)
	cancel()
	if err := <-got; err != context.Canceled {
		t.Fatalf("Admit = %v, want context.Canceled", err)
	}
	if s := q.Stats(); s.Cancelled != 1 || s.Queued != 0 || s.QueuedBytes != 0 || s.Flows != 1 {
		t.Errorf("stats = %+v, want 1 cancelled, nothing queued, 1 flow (the in-flight one)", s)
	}
	first.Done(flowcontrol.Usage{})
	if s := q.Stats(); s.Flows != 0 {
		t.Errorf("flows = %d after everything ended, want 0", s.Flows)
	}
}
