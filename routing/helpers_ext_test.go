package routing_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/usher-llm/usher/routing"
)

// The external tests' fixtures, as the in-package tests have theirs.

var t0 = time.Unix(1_000_000, 0)

// fleet returns n fresh, healthy backends "b0".."b(n-1)" with equal signals.
func fleet(n int, at time.Time) []BackendState {
	out := make([]BackendState, n)
	for i := range out {
		out[i] = BackendState{
			Name: fmt.Sprintf("b%d", i), Health: Healthy, Known: AllSignals,
			Queued: 0, Running: 0, KVUtilization: 0.1, KVCapacityBlocks: 1000, BlockSize: 16,
			UpdatedAt: at,
		}
	}
	return out
}

func mustNew(t testing.TB, opts Options) *Router {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	if opts.Seed == 0 {
		opts.Seed = 42
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustUpdate(t testing.TB, r *Router, s []BackendState) {
	t.Helper()
	if err := r.Update(s); err != nil {
		t.Fatal(err)
	}
}

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool
