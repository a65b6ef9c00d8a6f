package saturation_test

import (
	"fmt"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/saturation"
)

// Saturation as an admission gauge: the least saturated backend's level, counting the
// requests sent since the last scrape as waiting.
func ExampleLevel() {
	now := time.Unix(1_700_000_000, 0)
	r, _ := routing.New(routing.Options{Now: func() time.Time { return now }})
	_ = r.Update([]routing.BackendState{
		{Name: "a", Health: routing.Healthy, UpdatedAt: now, Known: routing.AllSignals, Queued: 2, KVUtilization: 0.5},
		{Name: "b", Health: routing.Healthy, UpdatedAt: now, Known: routing.AllSignals, Queued: 8, KVUtilization: 0.9},
	})
	fmt.Printf("%.2f %.2f\n", saturation.Level(r, saturation.Options{}), saturation.Level(r, saturation.Options{Mean: true}))
	// Output: 0.53 1.26
}
