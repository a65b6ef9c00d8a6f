package outlier_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
)

// A backend that refuses connections is ejected at its first failure, so least-loaded scoring
// stops sending it the requests it fails instantly; after the ejection one probe at a time goes
// through, and a successful one restores it.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	detector, _ := outlier.New(outlier.Options{Now: clock})
	r, _ := routing.New(routing.Options{
		Profile: outlier.With(routing.Profile{
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{{Scorer: load.Active(), Weight: 1}},
		}, detector, 1),
		Now:  clock,
		Seed: 1,
	})
	var states []routing.BackendState
	for _, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
		states = append(states, routing.BackendState{Name: name, Health: routing.Healthy, UpdatedAt: now})
	}
	_ = r.Update(states)

	refused := routing.DoneInfo{Err: errors.New("connection refused"), Failure: routing.FailureConnect}
	var down routing.BackendID
	var first []routing.Result
	for range 3 {
		p, _ := r.Pick(&routing.Request{})
		first = append(first, p)
	}
	for _, p := range first {
		if p.Backend.Name == "gpu-1" { // gpu-1 is down: its request fails at once
			down = p.ID
			p.Done(refused)
			continue
		}
		p.Done(routing.DoneInfo{})
	}
	until := detector.BackendStats(down).Until
	fmt.Printf("gpu-1 ejected for %v\n", until.Sub(now))

	var held []routing.Result
	pick := func() routing.Result {
		p, _ := r.Pick(&routing.Request{})
		held = append(held, p)
		return p
	}
	for range 4 {
		fmt.Println("pick →", pick().Backend.Name) // gpu-1 looks idle, and gets nothing
	}
	now = now.Add(time.Second) // the ejection is over: gpu-1 is half-open
	probe := pick()
	fmt.Println("probe →", probe.Backend.Name)
	fmt.Println("next →", pick().Backend.Name, "(one probe at a time)")
	probe.Done(routing.DoneInfo{}) // it answered: back in rotation
	out := detector.BackendStats(down).Ejected
	fmt.Println("gpu-1 ejected:", out)
	fmt.Println("then →", pick().Backend.Name)
	for _, p := range held {
		if p != probe {
			p.Done(routing.DoneInfo{})
		}
	}
	st := detector.Stats()
	fmt.Printf("ejections %d, probes %d, restored %d\n", st.Ejections, st.Probes, st.Restored)
	// Output:
	// gpu-1 ejected for 1s
	// pick → gpu-2
	// pick → gpu-0
	// pick → gpu-0
	// pick → gpu-2
	// probe → gpu-1
	// next → gpu-0 (one probe at a time)
	// gpu-1 ejected: false
	// then → gpu-1
	// ejections 1, probes 1, restored 1
}

// A backend whose metrics stopped arriving is routed around while fresh ones exist; its
// stale numbers are never read as an idle server.
func ExampleHealthFilter() {
	now := time.Unix(1_700_000_000, 0)
	health := outlier.HealthFilter()
	r, _ := routing.New(routing.Options{
		Profile: routing.Profile{
			Filters: []routing.Filter{health},
			Scorers: []routing.Weighted{{Scorer: load.QueueDepth(), Weight: 1}},
		},
		Now: func() time.Time { return now },
	})
	_ = r.Update([]routing.BackendState{
		// Its last scrape said "idle", 30 s ago.
		{Name: "silent", Known: routing.SignalQueued, Queued: 0, UpdatedAt: now.Add(-30 * time.Second)},
		{Name: "busy", Known: routing.SignalQueued, Queued: 9, UpdatedAt: now},
		{Name: "down", Health: routing.Unhealthy, Known: routing.SignalQueued, UpdatedAt: now},
	})
	p, _ := r.Pick(&routing.Request{})
	fmt.Println("picked:", p.Backend.Name)
	p.Done(routing.DoneInfo{})
	fmt.Println("stale candidates seen:", r.Stats().StaleCandidates)
	// Output:
	// picked: busy
	// stale candidates seen: 1
}
