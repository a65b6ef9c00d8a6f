package lora_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/lora"
)

// A fleet serving LoRA adapters on one base model: the writer publishes each server's models
// and its vllm:lora_requests_info signals; the adapter-affinity term, beside a load term, keeps an
// adapter where it runs, sends a new one to a server with a free slot, and the model filter
// refuses a model nobody serves.
func ExampleNewAffinity() {
	now := time.Unix(1_700_000_000, 0)
	aff, err := lora.NewAffinity(lora.AffinityOptions{})
	if err != nil {
		panic(err)
	}
	r, err := routing.New(routing.Options{
		Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: aff, Weight: 2}, {Scorer: load.Active(), Weight: 1}}},
		Now:     func() time.Time { return now },
		Seed:    1,
	})
	if err != nil {
		panic(err)
	}
	models := []string{"llama-3-8b", "sql-lora", "chat-lora", "tax-lora"}
	state := func(name string, running, waiting []string) routing.BackendState {
		return routing.BackendState{
			Name: name, Health: routing.Healthy, UpdatedAt: now, Models: models,
			Known:           routing.SignalAdapters,
			RunningAdapters: running, WaitingAdapters: waiting, MaxAdapters: 2,
		}
	}
	if err := r.Update([]routing.BackendState{
		state("vllm-a", []string{"sql-lora", "chat-lora"}, nil), // both slots busy
		state("vllm-b", []string{"chat-lora"}, nil),             // one slot free
		state("vllm-c", []string{"chat-lora"}, []string{"x"}),   // an adapter waits for a slot
	}); err != nil {
		panic(err)
	}
	for _, ad := range []string{"sql-lora", "tax-lora"} {
		p, err := r.Pick(&routing.Request{Model: ad, Adapter: ad})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s → %s (score %.2f)\n", ad, p.Backend.Name, p.Score)
		p.Done(routing.DoneInfo{})
	}
	_, err = r.Pick(&routing.Request{Model: "mistral-7b"})
	fmt.Println("mistral-7b:", errors.Is(err, routing.ErrNoBackendForModel))
	// Output:
	// sql-lora → vllm-a (score 3.00)
	// tax-lora → vllm-b (score 1.90)
	// mistral-7b: true
}
