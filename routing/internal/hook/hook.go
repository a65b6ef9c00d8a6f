// Package hook is the seam between package routing and its capability packages (routing/disagg,
// routing/outlier, routing/session, ...) for what a capability reads of a Router's books but a
// user has no use for, kept off routing's public API as internal/peer keeps the replication
// seam off it. Package routing installs the functions at init; they take a *routing.Result as
// an any (hook cannot import routing, which imports it) and panic on anything else, a bug in
// the module. Converting a pointer to an any does not allocate.
package hook

import "time"

// Installed by package routing.
var (
	// OwnRequests returns the router's own requests in flight on the backend a Result chose
	// (the Result's own included), and false for a Result no Router made.
	OwnRequests func(result any) (int64, bool)
	// PrefillElsewhere reports whether some backend other than the one a Result chose that
	// prefills (not decode-only, not unhealthy) has no more prefill work in flight (the
	// router's and its peers') than the chosen one; ok is false for a Result no Router made.
	PrefillElsewhere func(result any) (found, ok bool)
	// Filters returns a copy of a *routing.Router's filters, in order, as anys.
	Filters func(router any) []any
	// HealthFilter returns a new health filter (routing's own type, which a Router recognises
	// for its fast path) as a routing.Filter in an any.
	HealthFilter func() any
	// Saturation calls level for every backend of a *routing.Router's current set that is not
	// unhealthy, with its *routing.BackendState, the routing.Signal set that is fresh now, and
	// its in-flight requests (the router's and its peers'), and returns the lowest level (1 when
	// lower than every level), their sum and their number. level must not retain state.
	// O(backends), lock-free, no allocation.
	Saturation func(router any, level func(state any, fresh uint8, inflight int64, q, kv float64) float64, q, kv float64) (lowest, sum float64, n int)
)

// RolePlan is a role planner's current roles (routing/disagg's Planner) for a Router's KVBoth
// backends of Role RoleBoth, which every pick that needs a role reads with one atomic load.
// Immutable once set.
type RolePlan struct {
	// Roles holds each backend's planned role by BackendID, as routing.Role's values (0 both,
	// 1 prefill, 2 decode); a backend past its end is in both.
	Roles []uint8
	// Prefillers is the number of backends in prefill. While there is one, a backend in both
	// takes no prefill pick: it prefills its own requests only.
	Prefillers int
}

// Serves reports whether backend id serves a pick that needs role want (routing.Role's
// values) under the plan. O(1).
func (p *RolePlan) Serves(id uint32, want uint8) bool {
	role := uint8(0)
	if int(id) < len(p.Roles) {
		role = p.Roles[id]
	}
	switch {
	case want == 0:
		return true
	case role == 0:
		return want == 2 || p.Prefillers == 0
	}
	return role == want
}

// SetRolePlan makes a *routing.Router's picks read plan (nil: none). Installed by routing.
var SetRolePlan func(router any, plan *RolePlan)

// Installed by the capability packages, at init.
var (
	// SubsetFilter reports whether a filter returns a subset of the candidates it is given,
	// unchanged (routing/outlier's Detector does), so that a health filter after it can be
	// skipped when no candidate is stale or unhealthy. Nil: no such filter is linked.
	SubsetFilter func(filter any) bool
)

// ScoresOnly is implemented by the built-in pickers (routing/pick), which read nothing of the
// candidates but their number: a Router whose filters and scorers allow it picks among
// candidates it has not built and builds only the chosen one.
type ScoresOnly interface{ ScoresOnly() }

// Invalid is implemented by a stand-in for a part whose options were invalid, placed in a
// Profile by a constructor that returns no error (routing/profiles' Usher); New fails with
// the error.
type Invalid interface{ InvalidOptions() error }

// Indexed reports whether the Router that resolved a *routing.Request (passed as an any) for
// its filters and scorers has a prefix index: without one every MatchedBlocks is 0, and a
// scorer must not read that as eviction. False for a Request no Router resolved.
var Indexed func(req any) bool

// IndexID returns the prefix index's id of a *routing.Candidate's backend (passed as an any),
// and false when the Router has no index or the Candidate was built outside a Router.
var IndexID func(cand any) (id uint32, ok bool)

// Latency is implemented by routing/latency's scorers, whose model the Router feeds. A Router
// keeps the chosen *routing.Candidate of every pick and the request's prompt tokens (resolved
// as filters see them) when its profile holds one, asks the first for Result.Predicted, and
// teaches every one (each model once) what a streamed request got: its TTFT at FirstToken,
// its TPOT (and TTFT, unless taught already) at Done. The methods take the candidate as an
// any and must not retain it; they run on the Pick and Done paths and must not block or
// allocate.
type Latency interface {
	// LatencyModel returns the scorer's model, compared with == so that a model shared by two
	// scorers learns each outcome once.
	LatencyModel() any
	// PredictChosen returns the model's TTFT and TPOT for a request of prompt tokens on cand.
	PredictChosen(prompt int, cand any) (ttft, tpot time.Duration)
	// LearnChosen teaches the model that a request of prompt tokens placed on cand got ttft
	// and tpot (a zero value was not observed; never both).
	LearnChosen(prompt int, cand any, ttft, tpot time.Duration)
}

// Predict returns the lowest TTFT and, separately, the lowest TPOT that a *routing.Router's
// first Latency (in scorer order) predicts for a *routing.Request among the candidates a Pick
// would consider now, after the filters, without picking or charging anything; ok is false
// when the profile has no Latency or no backend is eligible. Installed by package routing.
// O(n) for n backends plus one prefix match and the filters; safe for concurrent use; no
// allocation once the pools are warm.
var Predict func(router, req any) (ttft, tpot time.Duration, ok bool)

// Adapter reports, for a *routing.Candidate (cand) that a Router built for a *routing.Request
// (req), whether the request's adapter is in the backend's running and waiting sets, how many
// distinct adapters run or wait there and how many of those only wait, from the snapshot's
// interned sets; ok is false when the candidate or the request was not built by the same
// Router pick (the caller then reads the names). Valid only when the candidate has fresh
// routing.SignalAdapters. Installed by package routing. O(log k), no allocation.
var Adapter func(req, cand any) (running, waiting bool, used, waitOnly int, ok bool)
