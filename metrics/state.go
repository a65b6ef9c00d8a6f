package metrics

import (
	"math"
	"time"

	"github.com/usher-llm/usher/routing"
)

// State is an immutable snapshot of what usher knows about one backend: the last good
// reading of its metrics, the prefix cache hit rate between its last two good scrapes, its
// health, and whether the reading is stale. The Scraper publishes a new *State after every
// scrape attempt (atomic.Pointer, copy on write) and never modifies a published one, so a
// State is safe for concurrent use and readers never lock.
//
// Accessors are O(1) and allocation-free.
type State struct {
	name    string
	role    routing.Role
	reading Reading

	hitRate    float64
	hasHitRate bool

	health    routing.Health
	stale     bool
	updated   time.Time // end of the last good metrics scrape; zero if none
	attempted time.Time // end of the last scrape attempt; zero if none
	err       error     // error of the last attempt, nil if it succeeded
}

// Name returns the backend's name (Target.Name).
func (s *State) Name() string { return s.name }

// Reading returns the raw signals of the last good scrape. Its Found is empty if no scrape has
// succeeded yet.
func (s *State) Reading() Reading { return s.reading }

// Known reports whether the last good scrape provided every signal in want.
func (s *State) Known(want Found) bool { return s.reading.Found.Has(want) }

// Waiting returns the number of requests queued in the server (0 if unknown).
func (s *State) Waiting() int { return toInt(s.reading.Waiting) }

// Running returns the number of requests in the server's running batch (0 if unknown).
func (s *State) Running() int { return toInt(s.reading.Running) }

// KVUtilization returns the fraction of the server's KV cache in use, 0..1 (0 if unknown).
func (s *State) KVUtilization() float64 { return s.reading.KVUtilization }

// BlockSize returns the server's KV block size in tokens (0 if unknown).
func (s *State) BlockSize() int { return toInt(s.reading.BlockSize) }

// NumBlocks returns the number of KV blocks the server holds (0 if unknown).
func (s *State) NumBlocks() int { return toInt(s.reading.NumBlocks) }

// PrefixHitRate returns the server's prefix cache hit rate, 0..1, and whether it is known.
// With hit and query counters (vLLM, SGLang, trtllm-serve) it is the rate between the last
// two good scrapes that saw queries: Δhits / Δqueries, where a counter that went down
// (server restart) counts from zero. Otherwise it is the server's own hit-rate gauge.
func (s *State) PrefixHitRate() (float64, bool) { return s.hitRate, s.hasHitRate }

// Role returns the backend's role (Target.Role).
func (s *State) Role() routing.Role { return s.role }

// Health returns the backend's liveness verdict: routing.HealthUnknown until the backend first
// answers; routing.Healthy after its health endpoint answered 2xx (or, for an engine without
// a health endpoint, after a good metrics scrape); routing.Unhealthy as soon as the health
// endpoint answers an error status, or after Options.UnhealthyAfter attempts in a row got no
// answer at all. Between those, an unanswered attempt keeps the previous verdict.
func (s *State) Health() routing.Health { return s.health }

// Stale reports whether the last good metrics scrape is older than Options.StaleAfter (or
// never happened), as of the last scrape attempt. A router should not trust the load signals
// of a stale backend.
func (s *State) Stale() bool { return s.stale }

// Updated returns the time of the last good metrics scrape, zero if none.
func (s *State) Updated() time.Time { return s.updated }

// Attempted returns the time of the last scrape attempt, zero if none.
func (s *State) Attempted() time.Time { return s.attempted }

// Err returns the error of the last scrape attempt, nil if it succeeded. It wraps one of
// the package's sentinel errors (ErrTimeout, ErrStatus, ErrParse, ErrUnhealthy, ...).
func (s *State) Err() error { return s.err }

// BackendState returns the backend as the router reads it. A signal is in Known only if the
// last good scrape provided it (TGI, for example, publishes no KV signals); the KV capacity
// needs both the block count and the block size. UpdatedAt is the time of the last good
// scrape, zero if none: routing.Router judges staleness itself. O(1), allocation-free.
func (s *State) BackendState() routing.BackendState {
	bs := routing.BackendState{
		Name:      s.name,
		Role:      s.role,
		Health:    s.health,
		UpdatedAt: s.updated,
	}
	r := &s.reading
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
