package routing_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
)

// The whole path: a prefix index, a router with usher's profile, one writer publishing backend
// state, picks, and the completion that closes the books.
func Example() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{
		Profile: profiles.Usher(profiles.UsherOptions{}),
		Index:   ix,
		Now:     func() time.Time { return now },
		Seed:    1,
	})
	if err != nil {
		panic(err)
	}

	// The writer (a metrics scraper) publishes what it observed.
	state := func(name string, queued int, kv float64) routing.BackendState {
		return routing.BackendState{
			Name: name, Health: routing.Healthy, UpdatedAt: now,
			Known:  routing.SignalQueued | routing.SignalRunning | routing.SignalKVUtilization,
			Queued: queued, KVUtilization: kv,
		}
	}
	if err := r.Update([]routing.BackendState{
		state("vllm-a", 0, 0.2), state("vllm-b", 6, 0.7), state("vllm-c", 1, 0.3),
	}); err != nil {
		panic(err)
	}

	// The gateway hashes the prompt once and routes the session's first turn.
	seed := prefixcache.Seed("qwen3-32b", "", "")
	prompt := make([]uint32, 256)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	chain := prefixcache.HashTokens(nil, seed, prompt, 16)
	req := &routing.Request{Chain: chain, PromptTokens: len(prompt), Session: "conversation-7"}
	p, err := r.Pick(req)
	if err != nil {
		panic(err)
	}
	fmt.Println("turn 1 →", p.Backend.Name)
	inflight, _ := r.InFlight(p.Backend.Name)
	fmt.Printf("in flight: %d request, %d prefill tokens\n", inflight.Requests, inflight.PrefillTokens)

	p.FirstToken(now) // prefill done: tokens released, blocks inserted into the index
	p.Done(routing.DoneInfo{FirstTokenAt: now, PromptTokens: 256, OutputTokens: 40})

	// The second turn extends the first; it stays where its history is cached.
	prompt = append(prompt, make([]uint32, 64)...)
	req.Chain = prefixcache.HashTokens(chain[:0:0], seed, prompt, 16)
	req.PromptTokens = len(prompt)
	p, _ = r.Pick(req)
	fmt.Printf("turn 2 → %s, %d of %d blocks cached\n", p.Backend.Name, p.MatchedBlocks, len(req.Chain))
	p.Done(routing.DoneInfo{})
	// Output:
	// turn 1 → vllm-a
	// in flight: 1 request, 256 prefill tokens
	// turn 2 → vllm-a, 16 of 20 blocks cached
}

// zoneCost is a custom scorer: it prefers backends in the gateway's own zone, because
// cross-zone traffic is billed. Implementing Score is all it takes.
type zoneCost struct {
	zone map[string]string // backend name → zone
	here string
}

func (z zoneCost) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	for i := range cands {
		if z.zone[cands[i].State.Name] == z.here {
			dst[i] = 1
		} else {
			dst[i] = 0
		}
	}
}

// A custom scorer combined with built-in ones: the prefix match still wins when it is large,
// the zone breaks the rest.
func ExampleScorer() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	now := time.Unix(1_700_000_000, 0)
	zones := zoneCost{here: "eu-1", zone: map[string]string{"a": "us-1", "b": "eu-1", "c": "us-1"}}
	r, _ := routing.New(routing.Options{
		Profile: routing.Profile{
			Filters: []routing.Filter{outlier.HealthFilter()},
			Scorers: []routing.Weighted{
				{Scorer: prefix.Ratio(), Weight: 3},
				{Scorer: load.QueueDepth(), Weight: 1},
				{Scorer: zones, Weight: 1},
			},
		},
		Index: ix,
		Now:   func() time.Time { return now },
		Seed:  1,
	})
	var states []routing.BackendState
	for _, name := range []string{"a", "b", "c"} {
		states = append(states, routing.BackendState{Name: name, Known: routing.SignalQueued, UpdatedAt: now})
	}
	_ = r.Update(states)

	chain := []prefixcache.BlockHash{11, 12, 13, 14}
	p, _ := r.Pick(&routing.Request{}) // no prefix: the zone decides
	fmt.Println("no prefix →", p.Backend.Name)
	p.Done(routing.DoneInfo{})

	id, _ := ix.Lookup("c")  // the index's id for c (Update registered it), not the router's
	_ = ix.Insert(id, chain) // c holds the whole prompt
	p, _ = r.Pick(&routing.Request{Chain: chain})
	fmt.Println("cached on c →", p.Backend.Name)
	p.Done(routing.DoneInfo{})
	// Output:
	// no prefix → b
	// cached on c → c
}

// Pick charges the chosen backend at once; FirstToken releases the prefill work and Done the
// request.
func ExampleRouter_Pick() {
	now := time.Unix(1_700_000_000, 0)
	r, _ := routing.New(routing.Options{Profile: profiles.LeastRequest(), Now: func() time.Time { return now }, Seed: 1})
	_ = r.Update([]routing.BackendState{{Name: "a", UpdatedAt: now}, {Name: "b", UpdatedAt: now}})

	first, _ := r.Pick(&routing.Request{PromptTokens: 1000})
	second, _ := r.Pick(&routing.Request{PromptTokens: 500})
	fmt.Println("least-request spreads:", first.Backend.Name != second.Backend.Name)

	show := func(when string) {
		f, _ := r.InFlight(first.Backend.Name)
		fmt.Printf("%s: %d request(s), %d prefill tokens\n", when, f.Requests, f.PrefillTokens)
	}
	show("picked")
	first.FirstToken(now.Add(300 * time.Millisecond))
	show("first token")
	first.Done(routing.DoneInfo{FirstTokenAt: now.Add(300 * time.Millisecond), OutputTokens: 12})
	show("done")
	second.Done(routing.DoneInfo{Err: fmt.Errorf("client went away")})
	// Output:
	// least-request spreads: true
	// picked: 1 request(s), 1000 prefill tokens
	// first token: 1 request(s), 0 prefill tokens
	// done: 0 request(s), 0 prefill tokens
}

// Learning at pick: two siblings of one fan-out, sent before either has a first token, land on
// the same backend, because the first one's blocks count there from its pick.
func ExampleLearn() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	now := time.Unix(1_700_000_000, 0)
	r, _ := routing.New(routing.Options{
		Profile: profiles.LLMDDefault(), // Learn is LearnOnPick, the zero value
		Index:   ix, Now: func() time.Time { return now }, Seed: 7,
	})
	var fleet []routing.BackendState
	for _, name := range []string{"a", "b", "c", "d"} {
		fleet = append(fleet, routing.BackendState{Name: name, Health: routing.Healthy, UpdatedAt: now, Known: routing.SignalQueued | routing.SignalKVUtilization})
	}
	_ = r.Update(fleet)
	tokens := make([]uint32, 64*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	chain := prefixcache.HashTokens(nil, prefixcache.Seed("m", "", ""), tokens, 16)
	first, _ := r.Pick(&routing.Request{Chain: chain})
	second, _ := r.Pick(&routing.Request{Chain: chain})
	fmt.Println(first.Backend.Name == second.Backend.Name, second.MatchedBlocks)
	first.Done(routing.DoneInfo{})
	second.Done(routing.DoneInfo{})
	// Output: true 64
}

// A router and its prefix index number the same backends in two id spaces: routing.BackendID
// for the router's set, prefixcache.HolderID for the index. Read the index's answers with the
// index's ids; the backend's name, the one id both share, gives the index's (its Lookup).
func ExampleBackendID() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	_, _ = ix.AddBackend("elsewhere", 0) // someone else registered a backend in the index first
	r, _ := routing.New(routing.Options{Index: ix, Profile: profiles.RoundRobin()})
	now := time.Now()
	_ = r.Update([]routing.BackendState{{Name: "gpu-0", UpdatedAt: now}, {Name: "gpu-1", UpdatedAt: now}})

	chain := []prefixcache.BlockHash{7, 8, 9}
	p, _ := r.Pick(&routing.Request{Chain: chain})
	p.Done(routing.DoneInfo{}) // success: the index learns the chain under the chosen backend

	indexID, _ := ix.Lookup(p.Backend.Name)
	match := ix.Match(nil, chain)
	fmt.Printf("%s: router id %d, index id %d, holds %d of %d blocks\n",
		p.Backend.Name, p.ID, indexID, match[indexID], len(chain))
	// Output:
	// gpu-0: router id 0, index id 1, holds 3 of 3 blocks
}

// A profile extended with a scorer of one's own: the default's filters, scorers and picker,
// and one more scorer at weight 2. The default itself is not modified, and a Router built
// from the extension reports the extension's name, not the default's.
func ExampleProfile_With() {
	fewestStreams := routing.ScorerFunc(func(_ *routing.Request, cands []routing.Candidate, dst []float64) {
		for i := range cands {
			dst[i] = 1 / (1 + float64(cands[i].InFlight.Requests))
		}
	})
	base := profiles.Usher(profiles.UsherOptions{})
	mine := base.With(routing.Weighted{Scorer: fewestStreams, Weight: 2})
	fmt.Println(len(base.Scorers), len(mine.Scorers), mine.Scorers[len(mine.Scorers)-1].Weight)
	r, err := routing.New(routing.Options{Profile: mine})
	if err != nil {
		panic(err)
	}
	fmt.Println(base.Name, r.Name())
	// Output:
	// 4 5 2
	// usher usher+ScorerFunc
}
