// Package peer is the seam between a replication layer (package replica, the bench
// simulator's replicas) and the parts it keeps in step, kept out of their public APIs: a
// routing.Router reads as a single-process type (its own in-flight counts out, its peers' in,
// and the session placements its peers made), a prefixcache.Index applies its peers' chains
// off its API (PrefixIndex), and a flowcontrol.Queue exchanges its policy's per-flow usage and
// takes its share of a global limit on requests in flight (AppendUsage, ApplyUsage,
// SetMaxInFlight). Package routing installs its functions at init, package prefixcache
// PrefixIndex, package flowcontrol the queue's; they take the *routing.Router,
// *prefixcache.Index or *flowcontrol.Queue as an any (peer cannot import them, which import
// it) and panic on anything else, a bug in the module.
package peer

import "time"

// Load is one backend's in-flight counts, by backend name: what a router publishes for its
// peers (AppendLoads) and what it is given of theirs (SetPeerLoads).
type Load struct {
	Backend                         string
	Requests, PrefillTokens, Blocks int64
}

// Placer applies a session placement another replica made, naming the backend: it reports
// whether the router knows the backend and whether the placement was applied (a later expiry
// wins).
type Placer func(session uint64, backend string, blocks int, expires time.Time) (known, applied bool)

// Installed by package routing.
var (
	// AppendLoads appends the router's own in-flight counts of every backend it has known.
	AppendLoads func(router any, dst []Load) []Load
	// SetPeerLoads replaces the counts the other replicas hold, summed per backend name.
	SetPeerLoads func(router any, loads []Load)
	// PeerLoad returns the peers' counts of one backend.
	PeerLoad func(router any, backend string) Load
	// Placers returns the router's session scorers as Placers.
	Placers func(router any) []Placer
)
