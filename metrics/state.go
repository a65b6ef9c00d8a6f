package metrics

import (
	"math"
	"time"

	"github.com/usher-llm/usher/routing"
)

// State is a snapshot of what usher knows about one backend: the last good reading of its
// metrics, the prefix cache hit rate between its last two good scrapes, its health, and
// whether the reading is stale. [Scraper.State] and [Scraper.Snapshot] return copies of the
// snapshot the Scraper published after the backend's last scrape attempt, so a State is the
// caller's own value; its Reading's slices are shared with the Scraper and must not be
// modified.
type State struct {
	// Name is the backend's name ([Target].Name).
	Name string
	// Role is the backend's role ([Target].Role).
	Role routing.Role
	// Reading holds the raw signals of the last good scrape. Its Found is empty if no scrape
	// has succeeded yet; Reading.Found.Has(want) reports whether that scrape provided every
	// signal in want.
	Reading Reading

	// PrefixHitRate is the server's prefix cache hit rate, 0..1, when HasPrefixHitRate. With
	// hit and query counters (vLLM, SGLang, trtllm-serve) it is the rate between the last two
	// good scrapes that saw queries: Δhits / Δqueries, where a counter that went down (server
	// restart) counts from zero. Otherwise it is the server's own hit-rate gauge.
	PrefixHitRate    float64
	HasPrefixHitRate bool

	// Health is the backend's liveness verdict: routing.HealthUnknown until the backend first
	// answers; routing.Healthy after its health endpoint answered 2xx (or, for an engine
	// without a health endpoint, after a good metrics scrape); routing.Unhealthy as soon as
	// the health endpoint answers an error status, or after [Options].UnhealthyAfter attempts
	// in a row got no answer at all. Between those, an unanswered attempt keeps the previous
	// verdict.
	Health routing.Health
	// Stale reports whether the last good metrics scrape is older than [Options].StaleAfter
	// (or never happened), as of the last scrape attempt. A router should not trust the load
	// signals of a stale backend.
	Stale bool
	// Updated is the time of the last good metrics scrape, zero if none.
	Updated time.Time
	// Attempted is the time of the last scrape attempt, zero if none.
	Attempted time.Time
	// Err is the error of the last scrape attempt, nil if it succeeded. It wraps one of the
	// package's sentinel errors ([ErrTimeout], [ErrStatus], [ErrParse], [ErrUnhealthy], ...).
	Err error
}

// BackendState returns the backend as the router reads it. A signal is in Known only if the
// last good scrape provided it (TGI, for example, publishes no KV signals); the KV capacity
// needs both the block count and the block size. UpdatedAt is the time of the last good
// scrape, zero if none: routing.Router judges staleness itself. O(1), allocation-free.
func (s *State) BackendState() routing.BackendState {
	bs := routing.BackendState{
		Name:      s.Name,
		Role:      s.Role,
		Health:    s.Health,
		UpdatedAt: s.Updated,
	}
	r := &s.Reading
	if r.Found.Has(HasWaiting) {
		bs.Queued, bs.Known = toInt(r.Waiting), bs.Known|routing.SignalQueued
	}
	if r.Found.Has(HasRunning) {
		bs.Running, bs.Known = toInt(r.Running), bs.Known|routing.SignalRunning
	}
	if r.Found.Has(HasKVUtilization) {
		bs.KVUtilization, bs.Known = r.KVUtilization, bs.Known|routing.SignalKVUtilization
	}
	if r.Found.Has(HasNumBlocks|HasBlockSize) && toInt(r.NumBlocks) > 0 && toInt(r.BlockSize) > 0 {
		bs.KVCapacityBlocks, bs.BlockSize = toInt(r.NumBlocks), toInt(r.BlockSize)
		bs.Known |= routing.SignalKVCapacity
	}
	if r.Found.Has(HasAdapters) {
		// The reading's slices are never modified: the router may share them.
		bs.RunningAdapters, bs.WaitingAdapters = r.RunningAdapters, r.WaitingAdapters
		bs.MaxAdapters, bs.Known = toInt(r.MaxAdapters), bs.Known|routing.SignalAdapters
	}
	return bs
}

// Compile-time check that a State converts to the router's view of a backend.
var _ func(*State) routing.BackendState = (*State).BackendState

// toInt converts a non-negative count to int, saturating.
func toInt(v float64) int {
	if !(v > 0) {
		return 0
	}
	if v >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v + 0.5)
}
