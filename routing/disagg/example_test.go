package disagg_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/disagg"
	"github.com/usher-llm/usher/routing/profiles"
)

// Disaggregated serving is two picks: the decode server first, then — if the Decider finds
// enough of the prompt uncached there — a prefill server. A conversation's later turn finds its
// history on its decode server and is served there whole.
func ExampleNewPrefix() {
	ix, _ := prefixcache.New(prefixcache.Options{})
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{Profile: profiles.Usher(profiles.UsherOptions{}), Index: ix, Now: func() time.Time { return now }, Seed: 1})
	if err != nil {
		panic(err)
	}
	var fleet []routing.BackendState
	for _, b := range []struct {
		name string
		role routing.Role
	}{{"prefill-0", routing.RolePrefill}, {"decode-0", routing.RoleDecode}, {"decode-1", routing.RoleDecode}} {
		fleet = append(fleet, routing.BackendState{Name: b.name, Role: b.role, Health: routing.Healthy, UpdatedAt: now})
	}
	if err := r.Update(fleet); err != nil {
		panic(err)
	}
	decider, err := disagg.NewPrefix(disagg.PrefixOptions{MinUncachedTokens: 256})
	if err != nil {
		panic(err)
	}
	prompt := make([]uint32, 2048)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	route := func(tokens []uint32) {
		req := &routing.Request{Chain: prefixcache.HashTokens(nil, 0, tokens, 16), PromptTokens: len(tokens), Session: "c", Role: routing.RoleDecode}
		decode, err := r.Pick(req)
		if err != nil {
			panic(err)
		}
		if decider.Disaggregate(req, &decode) {
			// The prefill pick carries no session: the session's home is its decode server.
			prefill, err := r.Pick(&routing.Request{Chain: req.Chain, PromptTokens: req.PromptTokens, Role: routing.RolePrefill})
			if err != nil {
				panic(err)
			}
			fmt.Printf("%d tokens, %d uncached: prefill on %s, decode on %s\n", len(tokens), decode.UncachedTokens, prefill.Backend.Name, decode.Backend.Name)
			prefill.FirstToken(now)
			prefill.Done(routing.DoneInfo{FirstTokenAt: now})
		} else {
			fmt.Printf("%d tokens, %d uncached: whole on %s\n", len(tokens), decode.UncachedTokens, decode.Backend.Name)
		}
		decode.FirstToken(now)
		decode.Done(routing.DoneInfo{FirstTokenAt: now})
	}
	route(prompt[:1920])
	route(prompt) // the next turn: 128 new tokens
	// Output:
	// 1920 tokens, 1920 uncached: prefill on prefill-0, decode on decode-0
	// 2048 tokens, 128 uncached: whole on decode-0
}

// A role planner over four kv_both servers: a burst of long prompts moves servers into
// prefill at the planner's ticks; decode picks then avoid them and the decider sends a long
// prefill there while the decode server is producing answers.
func ExamplePlanner() {
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{Profile: profiles.Usher(profiles.UsherOptions{}), Now: func() time.Time { return now }, Seed: 1})
	if err != nil {
		panic(err)
	}
	var fleet []routing.BackendState
	for i := range 4 {
		fleet = append(fleet, routing.BackendState{Name: fmt.Sprintf("kv-%d", i), KVBoth: true, Health: routing.Healthy, UpdatedAt: now})
	}
	if err := r.Update(fleet); err != nil {
		panic(err)
	}
	planner, err := disagg.NewPlanner(disagg.PlannerOptions{PrefillRate: 10000})
	if err != nil {
		panic(err)
	}
	planner.Plan(now, r)
	// 15,000 uncached prompt tokens a second for 10 s, as the decider sees them, and no answers
	// running yet: the work balance gives prefill every server but one.
	for range 10 {
		for range 3 {
			planner.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 5000})
		}
		now = now.Add(time.Second)
		planner.Plan(now, r)
	}
	st := planner.Stats()
	prefill := 0
	for _, role := range st.Roles {
		if role == routing.RolePrefill {
			prefill++
		}
	}
	fmt.Printf("%d of 4 servers in prefill after %d changes\n", prefill, st.Changes)
	d, err := r.Pick(&routing.Request{PromptTokens: 6000, Role: routing.RoleDecode})
	if err != nil {
		panic(err)
	}
	fmt.Println("decode pick on a server in", st.Roles[d.Backend.Name])
	busy := &routing.Result{UncachedTokens: 6000, Backend: &routing.BackendState{Known: routing.SignalRunning, Running: 8}}
	fmt.Println("a long prefill while 8 answers run goes away:", planner.Disaggregate(&routing.Request{}, busy))
	d.Done(routing.DoneInfo{})
	// Output:
	// 3 of 4 servers in prefill after 3 changes
	// decode pick on a server in both
	// a long prefill while 8 answers run goes away: true
}
