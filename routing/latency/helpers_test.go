package latency

import (
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
)

// The fixtures of routing's own tests that these use.

var t0 = time.Unix(1_000_000, 0)

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

// fleet returns n fresh, healthy backends "b0".."b(n-1)" with equal signals.
func fleet(n int, at time.Time) []routing.BackendState {
	out := make([]routing.BackendState, n)
	for i := range out {
		out[i] = routing.BackendState{
			Name: fmt.Sprintf("b%d", i), Health: routing.Healthy, Known: routing.AllSignals,
			Queued: 0, Running: 0, KVUtilization: 0.1, KVCapacityBlocks: 1000, BlockSize: 16,
			UpdatedAt: at,
		}
	}
	return out
}

func mustNew(t testing.TB, opts routing.Options) *routing.Router {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	if opts.Seed == 0 {
		opts.Seed = 42
	}
	r, err := routing.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustUpdate(t testing.TB, r *routing.Router, s []routing.BackendState) {
	t.Helper()
	if err := r.Update(s); err != nil {
		t.Fatal(err)
	}
}

// benchRouter builds a router over n backends with a real prefixcache index, and a request with a
// 128-block chain (2,048 tokens at 16 per block). Every backend holds the first 16 blocks (a
// shared system prompt); every tenth holds the whole chain, every other one a chain that
// diverges after block 16 — so the match walks all 128 blocks for some backends.
func benchRouter(tb testing.TB, n int, profile routing.Profile) (*routing.Router, *routing.Request) {
	tb.Helper()
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	r := mustNew(tb, routing.Options{Index: ix, Profile: profile})
	states := fleet(n, t0)
	for i := range states {
		states[i].Queued = i % 7
		states[i].Running = i % 5
		states[i].KVUtilization = float64(i%10) / 10
	}
	mustUpdate(tb, r, states)
	req := make([]prefixcache.BlockHash, 128)
	other := make([]prefixcache.BlockHash, 128)
	for i := range req {
		req[i] = prefixcache.BlockHash(0x9e3779b97f4a7c15 * uint64(i+1))
		other[i] = req[i]
		if i >= 16 {
			other[i] ^= 0xdeadbeef
		}
	}
	for i := range states {
		id, err := ix.AddBackend(states[i].Name, 0)
		if err != nil {
			tb.Fatal(err)
		}
		c := other
		if i%10 == 0 {
			c = req
		}
		if err := ix.Insert(id, c); err != nil {
			tb.Fatal(err)
		}
	}
	return r, &routing.Request{Chain: req, PromptTokens: 2048}
}

// linearStats is what a Linear has learned so far, as the tests read it.
type linearStats struct {
	// ttftSamples and tpotSamples count the outcomes learned; fits the refits.
	ttftSamples, tpotSamples, fits uint64
}

// stats returns the model's counts. O(1); it takes the model's mutex.
func (m *Linear) stats() linearStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return linearStats{ttftSamples: uint64(m.eqs[0].n), tpotSamples: uint64(m.eqs[1].n), fits: m.fits}
}
