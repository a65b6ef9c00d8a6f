package bench_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/usher-llm/usher/bench"
	"github.com/usher-llm/usher/routing/disagg"
)

// A short synthetic run: 40 chat sessions on two servers, usher's router behind bounded wait.
func Example() {
	w := bench.Chat(bench.ChatOptions{Sessions: 40, Rate: 2, Turns: 3, Think: 5 * time.Second, Seed: 1})
	policies, _ := bench.SelectPolicies("bounded-wait")
	routers, _ := bench.SelectRouters("usher")
	res, err := bench.Run(w, bench.Config{Servers: 2, Policy: policies[0], Router: routers[0]})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s × %s: %d of %d requests completed, %d shed\n",
		res.Policy, res.Router, res.Completed, res.Sent, res.First.Shed()+res.Later.Shed())
	fmt.Printf("prefix hits within ideal: %v\n", res.HitRate <= res.IdealHitRate)
	// Output:
	// bounded-wait × usher: 133 of 133 requests completed, 0 shed
	// prefix hits within ideal: true
}

// A prefix-group workload: independent requests over shared prefixes of Zipf popularity, in
// fan-outs of siblings that arrive together, served by usher's router on four servers.
func ExamplePrefixGroup() {
	w := bench.PrefixGroup(bench.PrefixGroupOptions{Requests: 400, Rate: 8, Groups: 30, Seed: 1})
	st := w.Stats()
	together := 0
	for i := 1; i < len(w.Requests); i++ {
		if w.Requests[i].At == w.Requests[i-1].At {
			together++
		}
	}
	fmt.Printf("%d requests, %d sessions, %d sent together with the request before them\n", st.Requests, st.Sessions, together)
	res, err := bench.Run(w, bench.Config{Servers: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d of %d completed, hit rate within ideal: %v\n", res.Router, res.Completed, res.Sent, res.HitRate <= res.IdealHitRate)
	// Output:
	// 400 requests, 0 sessions, 206 sent together with the request before them
	// usher: 400 of 400 completed, hit rate within ideal: true
}

// A forks workload: new sessions that fork earlier conversations or open shared documents.
// usher homes such a first turn where most of its prompt is cached; placing every first turn
// for balance (the usher-balance-first variant) loses that reuse.
func ExampleForks() {
	w := bench.Forks(bench.ForksOptions{Sessions: 300, Seed: 1})
	st := w.Stats()
	fmt.Printf("%d requests, %d sessions\n", st.Requests, st.Sessions)
	routers, err := bench.SelectRouters("usher,usher-balance-first")
	if err != nil {
		fmt.Println(err)
		return
	}
	first := map[string]float64{}
	for _, r := range routers {
		res, err := bench.Run(w, bench.Config{Servers: 4, Router: r})
		if err != nil {
			fmt.Println(err)
			return
		}
		first[r.Name] = res.First.HitRate
		fmt.Printf("%s: %d of %d completed\n", r.Name, res.Completed, res.Sent)
	}
	fmt.Println("usher caches more of the first turns:", first["usher"] > first["usher-balance-first"])
	// Output:
	// 614 requests, 300 sessions
	// usher: 614 of 614 completed
	// usher-balance-first: 614 of 614 completed
	// usher caches more of the first turns: true
}

// Config.Profile takes an EngineProfile: start from one of the package's profiles and change
// what the experiment varies, here the KV cache per server and its block size.
func ExampleEngineProfile() {
	p := bench.BenchProfile()
	p.Name = "bench-8x-kv"
	p.NumBlocks *= 8
	fmt.Printf("%s: %d blocks of %d tokens, %d tokens of KV cache\n", p.Name, p.NumBlocks, p.BlockSize, p.NumBlocks*p.BlockSize)

	w := bench.Chat(bench.ChatOptions{Sessions: 20, Rate: 2, Turns: 3, Think: 5 * time.Second, Seed: 1})
	res, err := bench.Run(w, bench.Config{Servers: 2, Profile: p})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d requests completed\n", res.Completed, res.Sent)

	bad := bench.DemoProfile()
	bad.BlockSize = 0
	_, err = bench.Run(w, bench.Config{Servers: 2, Profile: bad})
	fmt.Println(errors.Is(err, bench.ErrInvalidConfig))
	// Output:
	// bench-8x-kv: 36000 blocks of 64 tokens, 2304000 tokens of KV cache
	// 47 of 47 requests completed
	// true
}

// Disaggregated prefill and decode at an equal number of servers: four servers that all serve
// both, against two prefill and two decode servers under disagg.Always and under llm-d's
// prefix rule (the default Decider), with Qwen3-32B's KV moved at 5.2 µs per token plus 1 ms.
// Long prompts stall the answers an aggregated server is producing; a decode server that
// prefills nothing does not stall them.
func ExampleConfig_disaggregated() {
	w := bench.PrefixGroup(bench.PrefixGroupOptions{Requests: 300, Rate: 3, PrefixTokens: 6144, SuffixTokens: 2048,
		OutputTokens: 128, FanOut: []float64{1}, BurstFactor: 1, Seed: 1})
	modes := []struct {
		name    string
		prefill int
		decider disagg.Decider
	}{{"aggregated", 0, nil}, {"always", 2, disagg.Always}, {"prefix", 2, nil}}
	var tpot []time.Duration
	for _, m := range modes {
		res, err := bench.Run(w, bench.Config{Servers: 4, PrefillServers: m.prefill, Decider: m.decider, Profile: bench.Qwen3Profile(),
			TransferPerToken: 5200 * time.Nanosecond, TransferLatency: time.Millisecond})
		if err != nil {
			fmt.Println(err)
			return
		}
		tpot = append(tpot, res.TPOT.P99)
		fmt.Printf("%s: %d of %d completed, %.0f%% disaggregated\n", m.name, res.Completed, res.Sent, 100*res.Disaggregated)
	}
	fmt.Println("TPOT p99 below aggregated's:", tpot[1] < tpot[0], tpot[2] < tpot[0])
	// Output:
	// aggregated: 300 of 300 completed, 0% disaggregated
	// always: 300 of 300 completed, 100% disaggregated
	// prefix: 300 of 300 completed, 88% disaggregated
	// TPOT p99 below aggregated's: true true
}
