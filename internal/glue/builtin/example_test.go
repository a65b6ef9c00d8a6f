package builtin_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/flowcontrol/flowcontroltest"
	"github.com/usher-llm/usher/internal/glue/builtin"
)

// The peers' routers are profiles; the simulator runs each against the same trace. The
// registry gives each one name, used by the gateway's -router flag and the simulator alike.
func ExampleProfile() {
	for _, name := range builtin.ProfileNames() {
		p, err := builtin.Profile(name, builtin.ProfileOptions{})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-14s filters %d, scorers %d, learns %v\n", p.Name, len(p.Filters), len(p.Scorers), p.Learn)
	}
	_, err := builtin.Profile("llmd", builtin.ProfileOptions{})
	fmt.Println(err)
	// Output:
	// usher          filters 1, scorers 5, learns on-pick
	// llm-d          filters 1, scorers 3, learns on-pick
	// llm-d-precise  filters 1, scorers 3, learns from-events
	// llm-d-sticky   filters 2, scorers 1, learns on-pick
	// sglang         filters 1, scorers 1, learns on-pick
	// dynamo         filters 1, scorers 1, learns on-pick
	// aibrix         filters 1, scorers 1, learns on-pick
	// round-robin    filters 1, scorers 0, learns on-pick
	// least-request  filters 1, scorers 1, learns on-pick
	// usher-latency  filters 1, scorers 1, learns on-pick
	// routing: invalid options: router "llmd": want one of usher, llm-d, llm-d-precise, llm-d-sticky, sglang, dynamo, aibrix, round-robin, least-request, usher-latency
}

// Every policy has one name, used by the gateway's -policy flag and the simulator alike.
func ExamplePolicy() {
	for _, name := range builtin.PolicyNames() {
		p, err := builtin.Policy(name, builtin.PolicyOptions{BoundedWait: 10 * time.Second})
		if err != nil {
			panic(err)
		}
		_, ranks := p.(flowcontrol.Ranker)
		fmt.Printf("%-13s ranks %v\n", name, ranks)
	}
	_, err := builtin.Policy("bounded-wait", builtin.PolicyOptions{})
	fmt.Println(err)
	// Output:
	// fcfs          ranks false
	// priority      ranks true
	// round-robin   ranks false
	// turn-priority ranks true
	// las           ranks true
	// las-reference ranks false
	// vtc           ranks true
	// edf           ranks true
	// slo           ranks false
	// bounded-wait  ranks true
	// hierarchy     ranks false
	// gittins       ranks true
	// gittins-bounded-wait ranks true
	// policy "bounded-wait": fairness: invalid options: BoundedWait needs Wait > 0
}

// llm-d's LAS as a reference ("las-reference"): the flow with less decayed service wins unless
// the other's head has waited much longer (0.8 on service, 0.2 on wait, both min-max
// normalised).
func ExamplePolicy_lasReference() {
	ref, err := builtin.Policy("las-reference", builtin.PolicyOptions{})
	if err != nil {
		panic(err)
	}
	clk := new(flowcontroltest.FakeClock)
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	var tickets []flowcontrol.Ticket
	q, _ := flowcontrol.New(flowcontrol.Options{
		Policy:      ref,
		MaxInFlight: 1,
		Clock:       clk,
		Observer: flowcontrol.Observer{Outcome: func(r flowcontrol.Record) {
			fmt.Printf("t=%3.0fs %s %s (waited %v)\n", clk.Now().Sub(start).Seconds(), r.Outcome, r.Request.Flow, r.Wait)
			tickets = append(tickets, r.Ticket)
		}},
	})
	q.Enqueue(flowcontrol.Request{Flow: "heavy"})
	q.Enqueue(flowcontrol.Request{Flow: "heavy"})
	clk.Advance(5 * time.Second)
	q.Enqueue(flowcontrol.Request{Flow: "light"})
	tickets[0].Done(flowcontrol.Usage{PromptTokens: 4000, OutputTokens: 500})
	// Output:
	// t=  0s dispatched heavy (waited 0s)
	// t=  5s dispatched light (waited 0s)
}
