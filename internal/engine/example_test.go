package engine_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/internal/engine"
)

// A driver in virtual time: two requests share a 32-token system prompt; the second reuses its
// blocks once the first has computed them.
func Example() {
	p := engine.Demo
	e, err := engine.New(engine.Options{Profile: p, OmitTokenEvents: true})
	if err != nil {
		panic(err)
	}
	system := make([]uint32, 32)
	for i := range system {
		system[i] = uint32(100 + i)
	}
	prompt := func(user ...uint32) []uint32 { return append(append([]uint32(nil), system...), user...) }

	now := time.Duration(0)
	_ = e.Submit(engine.Request{ID: 1, Prompt: prompt(1, 2, 3), OutputTokens: 4}, now)
	var evs []engine.Event
	run := func() {
		for e.HasWork() {
			d, _ := e.BeginStep(now)
			now += d
			e.EndStep(now)
		}
		evs = e.Events(evs[:0])
		for _, ev := range evs {
			switch ev.Kind {
			case engine.EventStarted:
				fmt.Printf("request %d started, %d cached tokens\n", ev.ID, ev.Tokens)
			case engine.EventToken:
				fmt.Printf("request %d first token after %v\n", ev.ID, ev.At-ev.Arrived)
			case engine.EventFinished:
				fmt.Printf("request %d finished with %d tokens\n", ev.ID, ev.Tokens)
			}
		}
	}
	run()
	_ = e.Submit(engine.Request{ID: 2, Prompt: prompt(7, 8), OutputTokens: 4}, now)
	run()
	st := e.Stats()
	fmt.Printf("prefix cache: %d of %d tokens hit\n", st.PrefixHits, st.PrefixQueries)
	// Output:
	// request 1 started, 0 cached tokens
	// request 1 first token after 2.140061ms
	// request 1 finished with 4 tokens
	// request 2 started, 32 cached tokens
	// request 2 first token after 2.008006ms
	// request 2 finished with 4 tokens
	// prefix cache: 32 of 69 tokens hit
}
