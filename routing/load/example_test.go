package load_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
)

// Least queued first: the scorer reads the queue each backend reported; the one with fewer
// requests waiting scores higher and is picked.
func ExampleQueueDepth() {
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{
		Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: load.QueueDepth(), Weight: 1}}},
		Now:     func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	_ = r.Update([]routing.BackendState{
		{Name: "busy", Known: routing.SignalQueued, Queued: 7, UpdatedAt: now},
		{Name: "calm", Known: routing.SignalQueued, Queued: 1, UpdatedAt: now},
	})
	p, err := r.Pick(&routing.Request{})
	if err != nil {
		panic(err)
	}
	fmt.Println("picked:", p.Backend.Name)
	p.Done(routing.DoneInfo{})
	// Output: picked: calm
}
