package usher_test

import (
	"context"
	"fmt"
	"time"

	"github.com/usher-llm/usher/fairness"
	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// One request through the pieces a gateway composes (package proxy does all of this for HTTP):
// hash the prompt once, wait for admission under a fairness policy, pick a backend, and close
// both books when the answer is done — the router's first, so that the request the queue
// dispatches next already sees that backend's load released.
//
// The two handles count tokens in their own types (flowcontrol.Tokens for the queue's
// accounting, int for the router's); both come from the same usage report.
func Example() {
	ctx := context.Background()

	// The prefix index and a router over it, with usher's default profile.
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		panic(err)
	}
	router, err := routing.New(routing.Options{Index: ix, Profile: profiles.Usher(profiles.UsherOptions{}), Seed: 1})
	if err != nil {
		panic(err)
	}
	now := time.Now()
	if err := router.Update([]routing.BackendState{
		{Name: "vllm-0", Health: routing.Healthy, UpdatedAt: now},
		{Name: "vllm-1", Health: routing.Healthy, UpdatedAt: now},
	}); err != nil {
		panic(err)
	}

	// The admission queue: bounded wait (turn priority, but nobody waits past 10 s), at most
	// 64 requests in flight.
	policy, err := fairness.NewBoundedWait(fairness.BoundedWaitOptions{Wait: 10 * time.Second, Headroom: time.Second})
	if err != nil {
		panic(err)
	}
	queue, err := flowcontrol.New(flowcontrol.Options{
		Policy:      policy,
		MaxInFlight: 64,
		TTL:         30 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer queue.Close()

	// 1. Hash the prompt once; the chain serves the router and, through it, the index.
	tokens := make([]uint32, 1024)
	for i := range tokens {
		tokens[i] = uint32(i % 500)
	}
	chain := prefixcache.HashTokens(nil, prefixcache.Seed("qwen3-32b", "", ""), tokens, 16)

	// 2. Admission: the flow is the tenant's session, chosen by the gateway, never by the client.
	ticket, err := queue.Admit(ctx, flowcontrol.Request{
		Flow:         "tenant-a/session-7",
		PromptTokens: len(tokens),
		OutputTokens: 256,
	})
	if err != nil {
		fmt.Println("shed:", err) // a 429 with Retry-After in a gateway
		return
	}

	// 3. Placement.
	pick, err := router.Pick(&routing.Request{Chain: chain, PromptTokens: len(tokens), Session: "tenant-a/session-7"})
	if err != nil {
		ticket.Done(flowcontrol.Usage{}) // admitted, so it still ends in exactly one outcome
		fmt.Println("no backend:", err)
		return
	}
	fmt.Println("admitted; picked", pick.Backend.Name, "holding", pick.MatchedBlocks, "of", len(chain), "blocks")

	// 4. Proxy the request; the first streamed token releases the prefill charge.
	pick.FirstToken(time.Now())

	// 5. The usage report closes both books: the router's first, then the queue's.
	const promptTokens, outputTokens, cachedTokens = 1024, 180, 0
	pick.Done(routing.DoneInfo{PromptTokens: promptTokens, OutputTokens: outputTokens})
	ticket.Done(flowcontrol.Usage{PromptTokens: promptTokens, CachedTokens: cachedTokens, OutputTokens: outputTokens})

	// The next turn of the session finds its prefix where the first one ran.
	next, err := router.Pick(&routing.Request{Chain: chain, PromptTokens: len(tokens), Session: "tenant-a/session-7"})
	if err != nil {
		panic(err)
	}
	fmt.Println("second turn on", next.Backend.Name, "holding", next.MatchedBlocks, "of", len(chain), "blocks")
	next.Done(routing.DoneInfo{})
	// Output:
	// admitted; picked vllm-0 holding 0 of 64 blocks
	// second turn on vllm-0 holding 64 of 64 blocks
}
