// Package proxyseam is the seam between package proxy and the module's own extensions
// (proxy/kvfeed, gateway/replicaext), proxy/extproc and tests, for what they read of a
// proxy.Handler but an embedder has no use for: the KV-event publishers its backends name, its
// concurrency limit, pool queues and retry counters, and the mapping of admission outcomes to
// HTTP statuses. Package proxy installs the functions at init; they take a *proxy.Handler as
// an any (proxyseam cannot import proxy, which imports it) and panic on anything else, a bug
// in the module.
package proxyseam

import (
	"log/slog"
	"net/http"

	"github.com/usher-llm/usher/flowcontrol"
)

// Installed by package proxy.
var (
	// FollowKVEvents returns the KV-event publishers a Handler's backends name (a fresh
	// slice), and records that the caller follows them: an extension that applies KV events
	// to the Handler's index (proxy/kvfeed) calls it from Attach. proxy.New refuses backends
	// that name KV events when no extension's Attach called it, rather than leave them
	// unheard. Safe for concurrent use; O(backends).
	FollowKVEvents func(h any) []KVPublisher
	// Logger returns a Handler's logger (its Options.Logger, or slog.Default()).
	Logger func(h any) *slog.Logger
	// PoolQueue returns the queue that admits a Handler's requests for model (a base model
	// or one of its adapters): its pool's, or the Handler's Queue.
	PoolQueue func(h any, model string) *flowcontrol.Queue
	// Retries returns a Handler's retry counters.
	Retries func(h any) RetryStats
	// Saturation returns llm-d's saturation estimate of a Handler's fleet as last scraped:
	// the mean over backends of max(queued/5, kv/0.8), a backend without fresh signals
	// counting 1; 1 before the first scrape.
	Saturation func(h any) float64
	// DefaultTransport returns the transport a Handler uses when Options.Transport is nil,
	// with the default Timeouts: keep-alive connections (256 idle per backend, closed after
	// 90 s idle), no compression (the Handler reads the streams it relays), HTTP/1.1 as model
	// servers speak it. Response-header and stream timeouts are the Handler's, not the
	// transport's.
	DefaultTransport func() *http.Transport
)

// A LimitShare sets a host's share of a cluster-wide limit on requests in flight, given the
// number of live replicas of the cluster (this one included, at least 1), and returns the
// share it set: the host's own limit (which may follow its backends) over the replicas,
// rounded up. A replication layer calls it whenever it reads its peers, from one goroutine;
// it must be cheap when nothing changed.
type LimitShare func(replicas int) int

// sharers are the functions AddLimitSharer installed.
var sharers []func(host any) (LimitShare, bool)

// AddLimitSharer installs a function that returns the LimitShare of the hosts it knows (a
// *proxy.Handler, an *extproc.Server) and false for the others. Called from package init.
func AddLimitSharer(f func(host any) (LimitShare, bool)) { sharers = append(sharers, f) }

// LimitSharer returns the LimitShare of host, an Extension's proxy.Core: nil when the host has
// no limit of its own to share (a queue given in its options) or is of a type no package
// installed.
func LimitSharer(host any) LimitShare {
	for _, f := range sharers {
		if s, ok := f(host); ok {
			return s
		}
	}
	return nil
}

// KVPublisher is one KV-event publisher of the fleet, as a Handler's backends describe it: the
// backend (or data-parallel rank) whose blocks it reports, by its name in the router and the
// index. It is plain data.
type KVPublisher struct {
	// Backend is the name the events are applied under.
	Backend string
	// Endpoint is the publisher's ZMQ endpoint, which the server binds ("" when it connects
	// to the gateway instead, naming Pod in its topics).
	Endpoint, Pod string
	// Replay is the publisher's replay endpoint, if any.
	Replay string
	// Ranks names the backends of a shared publisher's data-parallel ranks, in rank order
	// (nil when the publisher serves one backend).
	Ranks []string
}

// RetryStats counts what a Handler's retry logic did since it was made.
type RetryStats struct {
	// Requests sent to a backend, Retries the extra attempts made, Denied the retries the
	// budget refused, Exhausted the requests whose last attempt failed in a way worth
	// retrying (out of attempts, out of budget, or the client gone).
	Requests, Retries, Denied, Exhausted uint64
}
