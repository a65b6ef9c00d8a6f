package session_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// New sessions that share a system prompt follow the server that cached it only as far as the
// load limit, then spread; each session's next turn returns to its server, and a new session
// that forks an earlier conversation goes where that conversation is cached.
func ExampleNewAware() {
	aware, err := session.NewAware(session.AwareOptions{})
	if err != nil {
		panic(err)
	}
	ix, _ := prefixcache.New(prefixcache.Options{})
	now := time.Unix(1_700_000_000, 0)
	r, _ := routing.New(routing.Options{
		Profile: routing.Profile{Scorers: []routing.Weighted{
			{Scorer: aware, Weight: 1},
		}},
		Index: ix,
		Now:   func() time.Time { return now },
		Seed:  3,
	})
	var states []routing.BackendState
	for _, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
		states = append(states, routing.BackendState{Name: name, UpdatedAt: now})
	}
	_ = r.Update(states)

	system := []prefixcache.BlockHash{1, 2} // the shared instructions
	warm, _ := ix.Lookup("gpu-0")
	_ = ix.Insert(warm, system)

	turn := func(session string, blocks ...prefixcache.BlockHash) routing.Result {
		p, _ := r.Pick(&routing.Request{Session: session, Chain: append(append([]prefixcache.BlockHash{}, system...), blocks...)})
		return p
	}
	var first []routing.Result
	for i, s := range []string{"ann", "bob", "cat", "dan"} {
		b := prefixcache.BlockHash(100 * (i + 1))
		// The shared instructions are 2 of 5 blocks: their share pulls a new session to gpu-0
		// while gpu-0 is within the load limit reckoned over the others, 2·(their mean + 1)
		// in-flight requests; dan finds it past that limit and is placed for balance.
		p := turn(s, b, b+1, b+2)
		fmt.Printf("%s turn 1 → %s\n", s, p.Backend.Name)
		first = append(first, p)
	}
	for _, p := range first {
		p.Done(routing.DoneInfo{}) // success: the turn's blocks are now cached there
	}
	p := turn("bob", 200, 201, 202, 203)
	fmt.Printf("bob turn 2 → %s (%d blocks cached)\n", p.Backend.Name, p.MatchedBlocks)
	p.Done(routing.DoneInfo{})
	// A sub-task forked from dan's conversation: a new session, 5 of its 6 blocks on dan's server.
	p = turn("dan-subtask", 400, 401, 402, 900)
	fmt.Printf("dan-subtask turn 1 → %s (%d blocks cached)\n", p.Backend.Name, p.MatchedBlocks)
	p.Done(routing.DoneInfo{})
	// Output:
	// ann turn 1 → gpu-0
	// bob turn 1 → gpu-0
	// cat turn 1 → gpu-0
	// dan turn 1 → gpu-2
	// bob turn 2 → gpu-0 (5 blocks cached)
	// dan-subtask turn 1 → gpu-2 (5 blocks cached)
}
