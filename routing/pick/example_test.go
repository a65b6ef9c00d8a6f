package pick_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/pick"
)

// Round-robin takes the candidates in turn, whatever they score.
func ExampleRoundRobin() {
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{
		Profile: routing.Profile{Picker: pick.RoundRobin()},
		Now:     func() time.Time { return now },
		Seed:    1,
	})
	if err != nil {
		panic(err)
	}
	_ = r.Update([]routing.BackendState{{Name: "a", UpdatedAt: now}, {Name: "b", UpdatedAt: now}, {Name: "c", UpdatedAt: now}})
	for range 6 {
		p, err := r.Pick(&routing.Request{})
		if err != nil {
			panic(err)
		}
		fmt.Print(p.Backend.Name, " ")
		p.Done(routing.DoneInfo{})
	}
	fmt.Println()
	// Output: a b c a b c
}
