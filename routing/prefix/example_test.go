package prefix_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/prefix"
)

// The matched share of the prompt: a backend that holds the first three of a prompt's four
// blocks scores 0.75 and is picked over one that holds none.
func ExampleRatio() {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{
		Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: prefix.Ratio(), Weight: 1}}},
		Index:   ix,
		Now:     func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	_ = r.Update([]routing.BackendState{{Name: "cold", UpdatedAt: now}, {Name: "warm", UpdatedAt: now}})
	chain := []prefixcache.BlockHash{11, 12, 13, 14}
	warm, _ := ix.Lookup("warm")
	_ = ix.Insert(warm, chain[:3])
	p, err := r.Pick(&routing.Request{Chain: chain})
	if err != nil {
		panic(err)
	}
	fmt.Println("picked:", p.Backend.Name, "holding", p.MatchedBlocks, "of", len(chain), "blocks")
	p.Done(routing.DoneInfo{})
	// Output: picked: warm holding 3 of 4 blocks
}
