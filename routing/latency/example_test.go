package latency_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/profiles"
)

// A router that learns its fleet's latency: the default profile plus a latency term.
// Two backends; "b" answers three times slower than "a" under the same load. After some
// streamed requests the model predicts each, and a request with a TTFT target goes where it is
// predicted to be met.
func ExampleNewScorer() {
	model, _ := latency.NewLinear(latency.LinearOptions{})
	term, _ := latency.NewScorer(latency.ScorerOptions{Model: model})
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{
		Profile: profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: term, Weight: 2}),
		Now:     func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	_ = r.Update([]routing.BackendState{
		{Name: "a", UpdatedAt: now}, {Name: "b", UpdatedAt: now},
	})
	// Serve 40 streamed requests, 10 output tokens each, alternating between the backends.
	for i := range 40 {
		name := []string{"a", "b"}[i%2]
		id, _ := r.Lookup(name)
		p, _ := r.Pick(&routing.Request{PromptTokens: 1000, Stream: true, Exclude: []routing.BackendID{1 - id}})
		slow := time.Duration(1 + 2*(i%2))
		p.Done(routing.DoneInfo{
			FirstTokenAt: now.Add(slow * 100 * time.Millisecond),
			End:          now.Add(slow * 300 * time.Millisecond),
			OutputTokens: 10,
		})
	}
	best, _ := latency.Predict(r, &routing.Request{PromptTokens: 1000})
	fmt.Printf("best predicted TTFT %.2fs\n", best.TTFT.Seconds())
	p, _ := r.Pick(&routing.Request{PromptTokens: 1000, Stream: true, Targets: routing.Latency{TTFT: 200 * time.Millisecond}})
	fmt.Printf("picked %s, predicted TTFT %.2fs, TPOT %.3fs\n", p.Backend.Name, p.Predicted.TTFT.Seconds(), p.Predicted.TPOT.Seconds())
	p.Done(routing.DoneInfo{})
	// Output:
	// best predicted TTFT 0.10s
	// picked a, predicted TTFT 0.10s, TPOT 0.022s
}
