// Package replicapeer is the seam between a replica.Replica and the gateway that wires it
// (gateway/replicaext): the feeds to build the prefix index and the session scorers with,
// the cluster's shared tenant secret, and the parts to keep in step with the peers. It keeps
// that wiring off the Replica's API, which is then what a program configures and runs.
// Package replica installs Of at init.
package replicapeer

import (
	"context"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// Parts are the pieces of a gateway a Replica keeps in step with its peers. Every field is
// optional; what is nil is neither published nor applied.
type Parts struct {
	// Index receives the prefix chains peers learnt (not reported to its own Feed). Its own
	// inserts reach the replica only if it was built with Options.Feed = Replica.PrefixFeed().
	Index *prefixcache.Index
	// Router publishes its own in-flight counts and is given the sum of its live peers';
	// its session scorers learn the placements peers made. Its own placements reach the
	// replica only if its session table was built with SessionOptions.Feed =
	// Replica.SessionFeed() (and the same SessionOptions.Seed = Replica.SessionSeed() on every
	// replica, so that session hashes agree).
	Router *routing.Router
	// Queue exchanges its policy's per-flow usage, when the policy keeps usage (package
	// fairness's VTC, LAS, turn priority, hierarchy and bounded wait), so that a tenant's
	// share is global.
	Queue *flowcontrol.Queue
	// Share, if set, is given the number of live replicas (this one included) each time the
	// replica reads its peers, and sets this replica's share of the cluster's limit on
	// requests in flight (proxyseam.LimitShare), returning it for Stats.
	Share func(replicas int) int
}

// Replica is a *replica.Replica as the gateway wires it.
type Replica interface {
	// PrefixFeed is the prefixcache.Feed to build the gateway's Index with: it buffers the
	// chains the index learns until the next flush. Never blocks, allocates nothing in
	// steady state.
	PrefixFeed() prefixcache.Feed
	// SessionFeed is the session.Feed to build the session scorers with: it buffers the
	// placements they learn until the next flush. Never blocks, allocates nothing in steady
	// state.
	SessionFeed() session.Feed
	// SessionSeed is the session-id hash key for SessionOptions.Seed: derived from the
	// cluster name, so every replica of a cluster hashes session ids alike without
	// configuring a secret of its own. Never 0.
	SessionSeed() uint64
	// SharedSecret returns the cluster's secret for turning API keys into tenant names
	// (proxy.KeyerOptions.Secret), creating it in Redis on first use (SET NX of 32 random
	// bytes), so that every replica names a key's tenant alike — and thus keys its sessions
	// and fairness usage alike — without a secret file of its own. It is one round trip, at
	// startup, bounded by ctx and Options.IOTimeout; a value in Redis that is not such a
	// secret is an error wrapping replica.ErrBadPayload. Whoever can read Redis can then
	// compute tenant names from API keys: give Redis the protection of the gateways'
	// configuration, or set the secret yourself.
	SharedSecret(ctx context.Context) ([]byte, error)
	// Attach names the parts to keep in step. It must be called before Run.
	Attach(p Parts) error
	// Quota is the cluster's quota counters in Redis; every call returns the same store.
	Quota() Quota
}

// Quota is proxy/quota's Shared in this package's types (replica does not import proxy's
// packages): gateway/replicaext converts between the two, whose fields are the same.
type Quota interface {
	// Sync adds the deltas to the cluster's counters and returns, for each, the cluster's
	// totals after the addition; on error nothing was counted and the caller sends the
	// deltas again with its next Sync. One round trip bounded by ctx and the replica's
	// IOTimeout; Syncs are serialized.
	Sync(ctx context.Context, deltas []QuotaDelta) ([]QuotaTotals, error)
	// Live is this replica and the peers it last saw alive (≥ 1), kept through outages.
	Live() int
}

// QuotaDelta is quota.Delta, field for field.
type QuotaDelta struct {
	Key      string
	Window   int64
	Span     time.Duration
	Requests int64
	Tokens   int64
}

// QuotaTotals is quota.Totals, field for field.
type QuotaTotals struct{ Requests, Tokens int64 }

// Of returns a *replica.Replica (passed as an any: this package cannot import replica, which
// imports it) as a Replica; it panics on anything else, a bug in the module. Installed by
// package replica.
var Of func(r any) Replica
