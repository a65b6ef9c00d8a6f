package quota

import (
	"context"
	"time"
)

// Delta is one replica's use of one limit's counter in one window since its last Sync.
type Delta struct {
	Key      string        // opaque to the store: identifies tenant, model, band and limit
	Window   int64         // the window's start, Unix milliseconds
	Span     time.Duration // the window's length: the store may expire the counter after Window+Span
	Requests int64
	Tokens   int64 // weighted tokens (negative when a settlement returns part of a reservation)
}

// Totals is the cluster's count of one counter after a Sync.
type Totals struct{ Requests, Tokens int64 }

// Shared carries a Limiter's use to its peers. Sync is called by the Limiter's Run loop, never on the request
// path; it adds the deltas to the cluster's counters and returns, for each, the cluster's totals after the
// addition (len(totals) == len(deltas)). Live reports how many replicas are live (≥ 1): while Sync fails the
// Limiter enforces each limit ÷ Live locally, and pushes what accrued when Sync succeeds again.
type Shared interface {
	Sync(ctx context.Context, deltas []Delta) ([]Totals, error)
	Live() int
}
