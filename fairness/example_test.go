package fairness_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
)

// exampleQueue returns a one-slot queue on a fake clock that prints each dispatch and
// collects the tickets.
func exampleQueue(p flowcontrol.Policy) (*flowcontrol.Queue, *flowcontroltest.FakeClock, *[]flowcontrol.Ticket) {
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	var tickets []flowcontrol.Ticket
	q, err := flowcontrol.New(flowcontrol.Options{
		Policy:      p,
		MaxInFlight: 1,
		Clock:       clk,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			fmt.Printf("t=%3.0fs %s %s (waited %v)\n", clk.Now().Sub(start).Seconds(), r.Outcome, r.Request.Flow, r.Wait)
			tickets = append(tickets, r.Ticket)
		}},
	})
	if err != nil {
		panic(err)
	}
	return q, clk, &tickets
}

// A deep conversation competes with a newcomer for one slot. Under llm-d's turn-priority
// the newcomer would wait until the deep session pauses; bounded wait promotes it once it
// has waited 20 s (Wait 25 s, Headroom 5 s).
func Example() {
	bw, _ := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 25 * time.Second, Headroom: 5 * time.Second})
	q, clk, tickets := exampleQueue(bw)
	next := func() { // the request in flight completes after 10 s
		clk.Advance(10 * time.Second)
		(*tickets)[len(*tickets)-1].Done(flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 100})
	}
	q.Enqueue(flowcontrol.Request{Flow: "deep"})
	for range 4 { // the deep session is at turn 5
		q.Enqueue(flowcontrol.Request{Flow: "deep"})
		next()
	}
	q.Enqueue(flowcontrol.Request{Flow: "new"})
	for range 3 { // the deep session keeps its next turn queued
		q.Enqueue(flowcontrol.Request{Flow: "deep"})
		next()
	}
	// Output:
	// t=  0s dispatched deep (waited 0s)
	// t= 10s dispatched deep (waited 10s)
	// t= 20s dispatched deep (waited 10s)
	// t= 30s dispatched deep (waited 10s)
	// t= 40s dispatched deep (waited 10s)
	// t= 50s dispatched deep (waited 10s)
	// t= 60s dispatched new (waited 20s)
	// t= 70s dispatched deep (waited 20s)
}

// Turn-priority as llm-d defines it: the deeper session goes first even though the new one
// has waited longer, as long as 1 + 0.05·wait stays below the deep session's turn.
func ExampleNewTurnPriority() {
	tp, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	q, clk, tickets := exampleQueue(tp)
	done := func() {
		clk.Advance(time.Second)
		(*tickets)[len(*tickets)-1].Done(flowcontrol.Usage{})
	}
	q.Enqueue(flowcontrol.Request{Flow: "deep"})
	q.Enqueue(flowcontrol.Request{Flow: "deep"})
	done()
	q.Enqueue(flowcontrol.Request{Flow: "new"}) // turn 1
	q.Enqueue(flowcontrol.Request{Flow: "deep"})
	clk.Advance(30 * time.Second)
	done() // new: 1 + 0.05·31 = 2.55; deep: turn 3 + 0.05·31 = 4.55
	done()
	// Output:
	// t=  0s dispatched deep (waited 0s)
	// t=  1s dispatched deep (waited 1s)
	// t= 32s dispatched deep (waited 31s)
	// t= 33s dispatched new (waited 32s)
}

// BoundedWait's promotion in keys: the inner (turn-priority) key until the head has waited
// Wait − Headroom, then the urgent tier, ordered by deadline.
func ExampleNewBoundedWait() {
	bw, _ := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 30 * time.Second, Headroom: 10 * time.Second, FirstTurnShare: 0.2})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	head := &flowcontrol.Request{Flow: "s", Arrival: t0, Deadline: t0.Add(time.Minute)}
	f := &flowcontrol.FlowState{ID: "s", Queued: 1, Head: head}
	bw.ItemKey(head, f, t0)
	for _, at := range []time.Duration{0, 19 * time.Second, 20 * time.Second} {
		k, until := bw.FlowKey(f, t0.Add(at))
		rekey := "never"
		if !until.IsZero() {
			rekey = until.Sub(t0).String()
		}
		fmt.Printf("waited %-3v urgent=%-5v re-key at %v\n", at, k.Tier == fairness.UrgentTier, rekey)
	}
	// Output:
	// waited 0s  urgent=false re-key at 20s
	// waited 19s urgent=false re-key at 20s
	// waited 20s urgent=true  re-key at never
}

// usher's LAS: the flow with the least recent service goes next, here the light flow,
// although the heavy one's request is older.
func ExampleNewLAS() {
	las, _ := fairness.NewLAS(fairness.LASOptions{})
	q, clk, tickets := exampleQueue(las)
	q.Enqueue(flowcontrol.Request{Flow: "heavy", PromptTokens: 8000})
	q.Enqueue(flowcontrol.Request{Flow: "heavy", PromptTokens: 8000})
	q.Enqueue(flowcontrol.Request{Flow: "light", PromptTokens: 200})
	clk.Advance(time.Second)
	(*tickets)[0].Done(flowcontrol.Usage{PromptTokens: 8000, OutputTokens: 500})
	// Output:
	// t=  0s dispatched heavy (waited 0s)
	// t=  1s dispatched light (waited 1s)
}

// VTC counts weighted tokens per flow: prompt × 1 at dispatch, output × 2 at completion.
func ExampleNewVTC() {
	vtc, _ := fairness.NewVTC(fairness.VTCOptions{})
	q, _, tickets := exampleQueue(vtc)
	q.Enqueue(flowcontrol.Request{Flow: "a", PromptTokens: 1000})
	q.Enqueue(flowcontrol.Request{Flow: "a", PromptTokens: 1000})
	q.Enqueue(flowcontrol.Request{Flow: "b", PromptTokens: 100})
	(*tickets)[0].Done(flowcontrol.Usage{PromptTokens: 1000, OutputTokens: 50})
	// Output:
	// t=  0s dispatched a (waited 0s)
	// t=  0s dispatched b (waited 0s)
}

// Hierarchy composes two policies: VTC across tenants, so that acme's three sessions do
// not get three times beta's service, and turn-priority across each tenant's sessions.
// Flow ids are "tenant/session".
func ExampleNewHierarchy() {
	vtc, _ := fairness.NewVTC(fairness.VTCOptions{})
	turns, _ := fairness.NewTurnPriority(fairness.TurnPriorityOptions{})
	h, _ := fairness.NewHierarchy(fairness.HierarchyOptions{Tenants: vtc, Sessions: turns})
	q, _, tickets := exampleQueue(h)
	for _, id := range []flowcontrol.FlowID{"acme/1", "acme/2", "acme/3", "acme/1", "beta/1", "beta/1"} {
		q.Enqueue(flowcontrol.Request{Flow: id, PromptTokens: 100})
	}
	for i := 0; i < len(*tickets); i++ {
		(*tickets)[i].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 10})
	}
	// Output:
	// t=  0s dispatched acme/1 (waited 0s)
	// t=  0s dispatched beta/1 (waited 0s)
	// t=  0s dispatched acme/1 (waited 0s)
	// t=  0s dispatched beta/1 (waited 0s)
	// t=  0s dispatched acme/2 (waited 0s)
	// t=  0s dispatched acme/3 (waited 0s)
}

// Round-robin: one request per backlogged flow per round.
func ExampleRoundRobin() {
	q, _, tickets := exampleQueue(fairness.RoundRobin())
	for _, id := range []flowcontrol.FlowID{"hold", "a", "a", "b", "a", "c"} {
		q.Enqueue(flowcontrol.Request{Flow: id})
	}
	for i := 0; i < len(*tickets); i++ {
		(*tickets)[i].Done(flowcontrol.Usage{})
	}
	// Output:
	// t=  0s dispatched hold (waited 0s)
	// t=  0s dispatched a (waited 0s)
	// t=  0s dispatched b (waited 0s)
	// t=  0s dispatched c (waited 0s)
	// t=  0s dispatched a (waited 0s)
	// t=  0s dispatched a (waited 0s)
}

// EDF and SLODeadline serve the earliest deadline first across flows.
func ExampleEDF() {
	q, clk, tickets := exampleQueue(fairness.EDF())
	t0 := clk.Now()
	q.Enqueue(flowcontrol.Request{Flow: "hold"})
	q.Enqueue(flowcontrol.Request{Flow: "patient", Deadline: t0.Add(time.Hour)})
	q.Enqueue(flowcontrol.Request{Flow: "urgent", Deadline: t0.Add(time.Second)})
	for i := 0; i < len(*tickets); i++ {
		(*tickets)[i].Done(flowcontrol.Usage{})
	}
	// Output:
	// t=  0s dispatched hold (waited 0s)
	// t=  0s dispatched urgent (waited 0s)
	// t=  0s dispatched patient (waited 0s)
}

// SLODeadline orders by arrival + a time-to-first-token target, here tighter for
// short interactive prompts.
func ExampleNewSLODeadline() {
	slo, _ := fairness.NewSLODeadline(fairness.SLODeadlineOptions{
		TTFT: 10 * time.Second,
		Target: func(r *flowcontrol.Request) time.Duration {
			if r.PromptTokens < 1000 {
				return 2 * time.Second
			}
			return 0 // the default TTFT
		},
	})
	q, clk, tickets := exampleQueue(slo)
	q.Enqueue(flowcontrol.Request{Flow: "hold"})
	q.Enqueue(flowcontrol.Request{Flow: "batch", PromptTokens: 50000})
	clk.Advance(time.Second)
	q.Enqueue(flowcontrol.Request{Flow: "chat", PromptTokens: 300})
	for i := 0; i < len(*tickets); i++ {
		(*tickets)[i].Done(flowcontrol.Usage{})
	}
	// Output:
	// t=  0s dispatched hold (waited 0s)
	// t=  1s dispatched chat (waited 0s)
	// t=  1s dispatched batch (waited 1s)
}

// The Gittins policy learns the distribution of a session's total service from the sessions
// that end. Here seven sessions in ten end after one turn and the rest run twenty (a falling
// hazard): once 300 have ended, a newcomer, likelier to finish soon, goes before a session
// already five turns deep, although it arrived after it — LAS's order, learned. Had the
// sessions mostly run a typical length, the deep session, near its end, would go first.
func ExampleNewGittins() {
	p, err := fairness.NewGittins(fairness.GittinsOptions{Memory: fairness.Memory{Forget: time.Minute}})
	if err != nil {
		panic(err)
	}
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var order []flowcontrol.FlowID
	var tickets []flowcontrol.Ticket
	q, err := flowcontrol.New(flowcontrol.Options{Policy: p, MaxInFlight: 1, Clock: clk,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			order = append(order, r.Request.Flow)
			tickets = append(tickets, r.Ticket)
		}}})
	if err != nil {
		panic(err)
	}
	turn := func(id flowcontrol.FlowID) { // 300 weighted tokens through the free slot
		q.Enqueue(flowcontrol.Request{Flow: id, PromptTokens: 100})
		clk.Advance(time.Second)
		tickets[len(tickets)-1].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 100})
	}
	for i := range 300 {
		n := 1
		if i%10 >= 7 {
			n = 20
		}
		for range n {
			turn(flowcontrol.FlowID(fmt.Sprint("s", i)))
		}
		clk.Advance(2 * time.Minute) // the session ends: idle past Memory.Forget
	}
	for range 5 {
		turn("deep")
	}
	order = order[:0]
	q.Enqueue(flowcontrol.Request{Flow: "busy", PromptTokens: 100}) // takes the slot
	q.Enqueue(flowcontrol.Request{Flow: "deep", PromptTokens: 100})
	q.Enqueue(flowcontrol.Request{Flow: "new", PromptTokens: 100})
	for range 2 {
		tickets[len(tickets)-1].Done(flowcontrol.Usage{PromptTokens: 100, OutputTokens: 100})
	}
	fmt.Println(order)
	// Output:
	// [busy new deep]
}
