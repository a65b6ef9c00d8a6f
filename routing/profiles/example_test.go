package profiles_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// DynamoCost weighs what a backend would prefill plus the KV blocks its requests hold. With
// AbstainWhenQuiet it leaves a quiet, settled and even fleet to the other terms of a blend:
// there a server that caches the prompt costs a batch slot, not a wait.
func ExampleNewDynamoCost() {
	now := time.Unix(1_700_000_000, 0)
	dc, err := profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})
	if err != nil {
		panic(err)
	}
	req := &routing.Request{BlockSize: 16, PromptTokens: 160} // 10 blocks
	candidates := func(queued int) []routing.Candidate {
		fresh := routing.SignalQueued | routing.SignalRunning
		st := func(name string, running, queued int) *routing.BackendState {
			return &routing.BackendState{Name: name, Running: running, Queued: queued, Known: fresh, UpdatedAt: now}
		}
		return []routing.Candidate{
			// a holds the prompt and runs two requests of 25 blocks each.
			{State: st("a", 2, queued), Fresh: fresh, InFlight: routing.InFlight{Requests: 2, Blocks: 50}},
			// b is idle and would prefill the whole prompt.
			{State: st("b", 0, 0), Fresh: fresh, UncachedTokens: 160},
		}
	}
	scores := make([]float64, 2)
	dc.Score(req, candidates(0), scores)
	fmt.Println("quiet:", scores)
	// a has a request waiting: the cost decides, a's 50 blocks in use + 10 against b's 10
	// to prefill + 10.
	dc.Score(req, candidates(1), scores)
	fmt.Println("one waiting:", scores)
	// Output:
	// quiet: [1 1]
	// one waiting: [0 1]
}
