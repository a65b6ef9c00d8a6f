package flowcontrol_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// A gateway admits each request before proxying it and reports its usage afterwards. Here
// two requests may run at once; the third waits until one completes.
func Example() {
	q, err := flowcontrol.New(flowcontrol.Options{
		MaxInFlight: 2,
		TTL:         30 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := q.Admit(ctx, flowcontrol.Request{Flow: "tenant-a", PromptTokens: 900})
	b, _ := q.Admit(ctx, flowcontrol.Request{Flow: "tenant-b", PromptTokens: 300})

	admitted := make(chan flowcontrol.Ticket)
	go func() {
		c, err := q.Admit(ctx, flowcontrol.Request{Flow: "tenant-a", PromptTokens: 50})
		if err != nil {
			fmt.Println("third:", err, "→", flowcontrol.OutcomeOf(err))
			return
		}
		admitted <- c
	}()
	for q.Stats().Queued == 0 { // wait until the third request is queued
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("queued %d, in flight %d\n", q.Stats().Queued, q.Stats().InFlight)

	a.Done(flowcontrol.Usage{PromptTokens: 900, CachedTokens: 512, OutputTokens: 120})
	c := <-admitted
	fmt.Printf("queued %d, in flight %d\n", q.Stats().Queued, q.Stats().InFlight)
	b.Done(flowcontrol.Usage{PromptTokens: 300, OutputTokens: 40})
	c.Done(flowcontrol.Usage{PromptTokens: 50, OutputTokens: 10})
	s := q.Stats()
	fmt.Printf("dispatched %d, completed %d, flows remembered %d\n", s.Dispatched, s.Completed, s.Flows)
	// Output:
	// queued 1, in flight 2
	// queued 0, in flight 2
	// dispatched 3, completed 3, flows remembered 0
}

// A simulator drives the queue in virtual time from a single goroutine: Enqueue instead of
// Admit, outcomes through the Observer, and Notify whenever the clock reaches the next
// deadline.
func Example_virtualTime() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	var running []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		MaxInFlight: 1,
		TTL:         10 * time.Second,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			fmt.Printf("t=%v %v %s (waited %v)\n", clk.Now().Sub(start), r.Request.Value, r.Outcome, r.Wait)
			if r.Outcome == flowcontrol.Dispatched {
				running = append(running, r.Ticket)
			}
		}},
	})
	q.Enqueue(flowcontrol.Request{Flow: "s1", Value: "s1/turn1"})
	q.Enqueue(flowcontrol.Request{Flow: "s2", Value: "s2/turn1"})
	q.Enqueue(flowcontrol.Request{Flow: "s3", Value: "s3/turn1", TTL: 3 * time.Second})

	next := q.Notify() // the earliest deadline: s3's, at t=3s
	fmt.Println("next deadline at t =", next.Sub(start))
	clk.Set(next)
	q.Notify()                   // s3 expires
	clk.Advance(1 * time.Second) // s1's answer completes at t=4s
	running[0].Done(flowcontrol.Usage{OutputTokens: 100})
	// Output:
	// t=0s s1/turn1 dispatched (waited 0s)
	// next deadline at t = 3s
	// t=3s s3/turn1 expired (waited 3s)
	// t=4s s2/turn1 dispatched (waited 4s)
}

// TryAdmit never waits: it admits at once or says the request would have to wait, which a
// gateway answers with 429 and a Retry-After header.
func ExampleQueue_TryAdmit() {
	q, _ := flowcontrol.New(flowcontrol.Options{MaxInFlight: 1})
	first, err := q.TryAdmit(flowcontrol.Request{Flow: "a"})
	fmt.Println("first:", err)
	_, err = q.TryAdmit(flowcontrol.Request{Flow: "b"})
	fmt.Println("second:", err, "→", flowcontrol.OutcomeOf(err))
	first.Done(flowcontrol.Usage{})
	// Output:
	// first: <nil>
	// second: flowcontrol: request would wait → rejected_capacity
}

// Capacity errors say which limit was hit, and all match ErrQueueFull.
func ExampleErrQueueFull() {
	q, _ := flowcontrol.New(flowcontrol.Options{
		Gate:         closedGate{}, // nothing is dispatched: requests wait
		FlowCapacity: flowcontrol.Limits{Requests: 1},
	})
	q.Enqueue(flowcontrol.Request{Flow: "greedy"})
	_, err := q.Enqueue(flowcontrol.Request{Flow: "greedy"})
	fmt.Println(err)
	fmt.Println(errors.Is(err, flowcontrol.ErrQueueFull), errors.Is(err, flowcontrol.ErrFlowFull), flowcontrol.OutcomeOf(err))
	// Output:
	// flowcontrol: queue full: flow limit on requests
	// true true rejected_capacity
}

// OutcomeOf tells which outcome an error of Admit, TryAdmit or Enqueue stands for; a
// gateway maps outcomes to its answers (package proxy's OutcomeStatus for HTTP).
func ExampleOutcomeOf() {
	for _, err := range []error{nil, flowcontrol.ErrFlowFull, flowcontrol.ErrWouldExpire, flowcontrol.ErrExpired, context.Canceled} {
		fmt.Println(flowcontrol.OutcomeOf(err))
	}
	// Output:
	// dispatched
	// rejected_capacity
	// rejected_wait
	// expired
	// cancelled
}

// closedGate is a Gate of the caller's own that never lets a request through.
type closedGate struct{}

func (closedGate) Open(*flowcontrol.Request, flowcontrol.Load) bool { return false }

// Options.Saturation holds a band back while any pool is at or above the band's threshold;
// the caller calls Notify when a level falls.
func ExamplePool() {
	prefill, decode := 0.97, 0.60 // in a real gateway: atomics updated by the metrics scraper
	q, _ := flowcontrol.New(flowcontrol.Options{Bands: 2, Saturation: []flowcontrol.Pool{
		{Level: func() float64 { return prefill }, Thresholds: []float64{1.0, 0.9}},
		{Level: func() float64 { return decode }, Thresholds: []float64{1.0, 0.8}},
	}})
	interactive, err := q.TryAdmit(flowcontrol.Request{Band: 0})
	fmt.Println("band 0:", err)
	_, err = q.Enqueue(flowcontrol.Request{Band: 1})
	fmt.Println("band 1 waiting:", err == nil, q.Stats().Queued)
	prefill = 0.5
	q.Notify()
	fmt.Println("after Notify, waiting:", q.Stats().Queued)
	interactive.Done(flowcontrol.Usage{})
	// Output:
	// band 0: <nil>
	// band 1 waiting: true 1
	// after Notify, waiting: 0
}

// deadlineFirst is a custom policy: flows are served by their head request's deadline
// (earliest first) and requests within a flow likewise.
type deadlineFirst struct{}

func (deadlineFirst) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Deadline.UnixNano()}
}

func (deadlineFirst) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

func (deadlineFirst) Observe(*flowcontrol.Event) {}

// A Policy orders flows and requests by keys; here, earliest deadline first.
func ExamplePolicy() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var order []any
	var running []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		Policy:      deadlineFirst{},
		MaxInFlight: 1,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			if r.Outcome == flowcontrol.Dispatched {
				order = append(order, r.Request.Value)
				running = append(running, r.Ticket)
			}
		}},
	})
	q.Enqueue(flowcontrol.Request{Value: "running"}) // takes the only slot
	q.Enqueue(flowcontrol.Request{Flow: "batch", TTL: time.Minute, Value: "batch"})
	q.Enqueue(flowcontrol.Request{Flow: "chat", TTL: 5 * time.Second, Value: "chat"})
	q.Enqueue(flowcontrol.Request{Flow: "agent", TTL: 20 * time.Second, Value: "agent"})
	for len(running) > 0 { // each completion dispatches the next
		t := running[0]
		running = running[1:]
		t.Done(flowcontrol.Usage{})
	}
	fmt.Println(order)
	// Output:
	// [running chat agent batch]
}

// longestQueue is a FlowPicker: it serves the flow with the most waiting requests. Its
// choice depends on all flows at once, so it scans them: O(flows) per dispatch.
type longestQueue struct{ flowcontrol.Policy }

func (longestQueue) PickFlow(_ int, flows []*flowcontrol.FlowState, _ time.Time) (flowcontrol.FlowID, bool) {
	best := flows[0]
	for _, f := range flows[1:] {
		if f.Queued > best.Queued || (f.Queued == best.Queued && f.Head.Arrival.Before(best.Head.Arrival)) {
			best = f
		}
	}
	return best.ID, true
}

// A FlowPicker chooses the next flow itself, for orders that are not keys.
func ExampleFlowPicker() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var order []any
	var running []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		Policy:      longestQueue{fairness.FCFS()},
		MaxInFlight: 1,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			if r.Outcome == flowcontrol.Dispatched {
				order = append(order, r.Request.Value)
				running = append(running, r.Ticket)
			}
		}},
	})
	for i, f := range []flowcontrol.FlowID{"x", "a", "b", "b", "c", "b", "c"} {
		q.Enqueue(flowcontrol.Request{Flow: f, Value: fmt.Sprint(f, i)})
		clk.Advance(time.Millisecond)
	}
	for len(running) > 0 {
		t := running[0]
		running = running[1:]
		t.Done(flowcontrol.Usage{})
	}
	fmt.Println(order)
	// Output:
	// [x0 b2 b3 c4 a1 b5 c6]
}

// With early shedding on, a request that the queue estimates it cannot dispatch before its
// deadline is refused on arrival — 429 with a Retry-After header — instead of being held
// until it expires.
func ExampleEarlyShed() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		MaxInFlight: 1,
		EarlyShed:   flowcontrol.EarlyShed{Enabled: true},
	})
	_, ok := q.EstimateWait(flowcontrol.Request{})
	fmt.Println("estimate known at start:", ok)

	// Two seconds in which the server finishes a request every 100 ms while two arrive: the
	// queue learns its dispatch rate (about 10 requests/s), and a backlog builds.
	var fifo []flowcontrol.Ticket // dispatched in this order
	for range 20 {
		for range 2 {
			tk, _ := q.Enqueue(flowcontrol.Request{})
			fifo = append(fifo, tk)
		}
		clk.Advance(100 * time.Millisecond)
		fifo[0].Done(flowcontrol.Usage{})
		fifo = fifo[1:]
	}
	est, _ := q.EstimateWait(flowcontrol.Request{})
	fmt.Printf("%d waiting, estimated wait %v\n", q.Stats().Queued, est.Round(10*time.Millisecond))

	_, err := q.Enqueue(flowcontrol.Request{TTL: time.Second})
	fmt.Println(err, "→", flowcontrol.OutcomeOf(err), "with Retry-After", q.RetryAfter())
	_, err = q.Enqueue(flowcontrol.Request{TTL: 5 * time.Second})
	fmt.Println("with a 5 s TTL:", err)
	// Output:
	// estimate known at start: false
	// 19 waiting, estimated wait 2.05s
	// flowcontrol: estimated wait exceeds the request's deadline → rejected_wait with Retry-After 1.9s
	// with a 5 s TTL: <nil>
}

// A high-priority request behind a backlog of low-priority ones: a low-priority request
// waits behind the whole band; EstimateWait counts only what StrictPriority serves before
// the high-priority one, and early shedding admits it.
func ExampleQueue_EstimateWait() {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, _ := flowcontrol.New(flowcontrol.Options{
		Clock:       clk,
		Policy:      fairness.StrictPriority(),
		MaxInFlight: 1,
		EarlyShed:   flowcontrol.EarlyShed{Enabled: true},
	})
	// Two seconds in which the server finishes a request every 100 ms while two arrive.
	var fifo []flowcontrol.Ticket
	for range 20 {
		for range 2 {
			tk, _ := q.Enqueue(flowcontrol.Request{Flow: "batch"})
			fifo = append(fifo, tk)
		}
		clk.Advance(100 * time.Millisecond)
		fifo[0].Done(flowcontrol.Usage{})
		fifo = fifo[1:]
	}
	low, _ := q.EstimateWait(flowcontrol.Request{Flow: "batch"})
	high, _ := q.EstimateWait(flowcontrol.Request{Flow: "chat", Priority: 1})
	fmt.Printf("%d waiting: low priority %v (the whole band), high priority %v\n", q.Stats().Queued,
		low.Round(10*time.Millisecond), high.Round(10*time.Millisecond))

	_, err := q.Enqueue(flowcontrol.Request{Flow: "chat", Priority: 1, TTL: time.Second})
	fmt.Println("high priority, 1 s TTL:", err)
	_, err = q.Enqueue(flowcontrol.Request{Flow: "batch", TTL: time.Second})
	fmt.Println("low priority, 1 s TTL:", err)
	// Output:
	// 19 waiting: low priority 2.05s (the whole band), high priority 50ms
	// high priority, 1 s TTL: <nil>
	// low priority, 1 s TTL: flowcontrol: estimated wait exceeds the request's deadline
}
