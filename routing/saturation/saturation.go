// Package saturation measures how saturated a [routing.Router]'s backends are, for an
// admission gate, and keeps picks off saturated backends.
//
// A backend's level is
//
//	max(waiting / Queue, KVUtilization / KV),  waiting = max(Queued, InFlight.Requests − Running)
//
// where waiting counts the requests the router sent that the server has not started — which
// its scraped queue shows only at the next scrape — so a burst dispatched between two scrapes
// saturates the gauge at once instead of overrunning the servers. [Level] is the pool's level,
// for a saturation limit such as flowcontrol.Options.Saturation, which stops dispatching at 1;
// [NewFilter] keeps a pick's candidates below 1.
//
// Behind a concurrency gate alone, a pool above its knee admits everything its limit allows,
// and the excess waits inside KV-full servers, beyond the reach of the fair queue and its TTL.
// With this gauge it waits in the queue, where the policy orders it and the TTL bounds it.
package saturation

import (
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// Defaults of Options and FilterOptions.
const (
	// DefaultQueue is the requests waiting in a server's own queue at which it counts as
	// saturated: a few keep its next batch full, more only wait there.
	DefaultQueue = 4
	// DefaultKV is the KV cache utilisation at which a server counts as saturated: past it, a
	// new request's blocks push running ones out (preemption) or wait.
	DefaultKV = 0.95
)

// Options configures [Level]. Zero values are the documented defaults. It is a plain value.
type Options struct {
	// Queue is the waiting requests at which a backend is saturated. Zero: [DefaultQueue].
	Queue float64
	// KV is the KV cache utilisation at which a backend is saturated. Zero: [DefaultKV].
	KV float64
	// Mean takes the pool's level as the mean of the backends' levels (llm-d's detector);
	// off, it is the least saturated backend's level: the pool has room while any backend
	// has.
	Mean bool
}

// Level returns how saturated r's published backends are: each healthy backend's level (see
// the package doc), and the pool's level the smallest of them (or their mean with o.Mean); 1
// when no backend is healthy. InFlight is the router's own count plus what other gateway
// replicas hold there (as [routing.Candidate].InFlight, which the filter of [NewFilter] reads).
// A backend with stale or missing queue and KV signals is judged by the in-flight counts
// alone. It reads r's current backend set and live counters: O(backends), no allocation, safe
// for concurrent use with Pick and Update.
func Level(r *routing.Router, o Options) float64 {
	q, kv := limits(o.Queue, o.KV)
	lowest, sum, n := hook.Saturation(r, level, q, kv)
	if n == 0 {
		return 1
	}
	if o.Mean {
		return sum / float64(n)
	}
	return lowest
}

// level is one backend's level for Level and the filter; fresh holds the signals that are
// fresh. It takes anys to be handed to hook.Saturation; st is a *routing.BackendState.
func level(st any, fresh uint8, inflight int64, q, kv float64) float64 {
	return backendLevel(st.(*routing.BackendState), routing.Signal(fresh), inflight, q, kv)
}

func backendLevel(st *routing.BackendState, known routing.Signal, inflight int64, q, kv float64) float64 {
	waiting := float64(inflight)
	l := 0.0
	if known&routing.SignalRunning != 0 {
		waiting -= float64(st.Running)
	}
	if known&routing.SignalQueued != 0 {
		waiting = max(waiting, float64(st.Queued))
	}
	if known&routing.SignalKVUtilization != 0 {
		l = st.KVUtilization / kv
	}
	return max(l, waiting/q)
}

func limits(q, kv float64) (float64, float64) {
	if !(q > 0) {
		q = DefaultQueue
	}
	if !(kv > 0) {
		kv = DefaultKV
	}
	return q, kv
}

// FilterOptions configures [NewFilter]. Zero values are the documented defaults. It is a plain
// value.
type FilterOptions struct {
	// Queue is the waiting requests at which a backend is saturated. Zero: [DefaultQueue].
	Queue float64
	// KV is the KV cache utilisation at which a backend is saturated. Zero: [DefaultKV].
	KV float64
}

// NewFilter returns a filter that keeps the candidates below saturation (level < 1, as [Level]
// computes it per backend), or every candidate when none is: paired with the gauge behind an
// admission gate, a request dispatched because some backend had room is sent to one that has
// it, even when its session's home or its best prefix match is full. Values that are not
// positive take the defaults, so the error is nil. The filter is O(n), allocates nothing and is
// safe for concurrent use.
func NewFilter(o FilterOptions) (routing.Filter, error) {
	q, kv := limits(o.Queue, o.KV)
	return &filter{q: q, kv: kv}, nil
}

// filter is the filter NewFilter returns.
type filter struct {
	q, kv float64
}

// Filter implements routing.Filter.
func (f *filter) Filter(_ *routing.Request, cands []routing.Candidate) []routing.Candidate {
	k := 0
	for i := range cands {
		c := &cands[i]
		if backendLevel(c.State, c.Fresh, c.InFlight.Requests, f.q, f.kv) < 1 {
			cands[k] = *c
			k++
		}
	}
	if k == 0 {
		return cands
	}
	return cands[:k]
}
