package routing

import "time"

// Defaults of SaturationOptions.
const (
	// DefaultSaturationQueue is the requests waiting in a server's own queue at which it counts
	// as saturated: a few keep its next batch full, more only wait there.
	DefaultSaturationQueue = 4
	// DefaultSaturationKV is the KV cache utilisation at which a server counts as saturated:
	// past it, a new request's blocks push running ones out (preemption) or wait.
	DefaultSaturationKV = 0.95
)

// SaturationOptions configures Router.Saturation. Zero values are the documented defaults.
type SaturationOptions struct {
	// Queue is the waiting requests at which a backend is saturated. Zero:
	// DefaultSaturationQueue.
	Queue float64
	// KV is the KV cache utilisation at which a backend is saturated. Zero:
	// DefaultSaturationKV.
	KV float64
	// Mean takes the pool's level as the mean of the backends' levels (llm-d's detector);
	// off, it is the least saturated backend's level: the pool has room while any backend
	// has.
	Mean bool
}

// Saturation returns how saturated the published backends are, for an admission gate
// (flowcontrol.Saturation stops dispatching at 1): each healthy backend's level is
//
//	max(waiting / Queue, KVUtilization / KV),  waiting = max(Queued, InFlight.Requests − Running)
//
// and the pool's level is the smallest backend level (or their mean with opts.Mean); 1 when no
// backend is healthy. waiting counts the requests this router sent that the server has not
// started — which its scraped queue shows only at the next scrape — so a burst dispatched
// between two scrapes saturates the gauge at once instead of overrunning the servers. InFlight
// here is the router's own count plus what other gateway replicas hold there, as
// setPeerInFlight last set it (as Candidate.InFlight, which SaturationFilter reads). A backend
// with stale or missing queue and KV signals is judged by the in-flight counts alone. It reads the current snapshot and the live counters: O(backends), no allocation,
// safe for concurrent use with Pick and Update.
//
// Behind a concurrency gate alone, a pool above its knee admits everything its limit allows,
// and the excess waits inside KV-full servers, beyond the reach of the fair queue and its TTL.
// With this gauge it waits in the queue, where the policy orders it and the TTL bounds it.
func (r *Router) Saturation(opts SaturationOptions) float64 {
	q, kv := opts.limits()
	s := r.snap.Load()
	if s == nil {
		return 1
	}
	now := r.now().UnixNano()
	lowest, sum, n := 1.0, 0.0, 0
	for i := range s.backends {
		b := &s.backends[i]
		if b.state.Health == Unhealthy {
			continue
		}
		known := Signal(0)
		if b.updated != 0 && (r.staleAfter < 0 || time.Duration(now-b.updated) <= r.staleAfter) {
			known = b.state.Known
		}
		level := saturationLevel(&b.state, known, b.load.requests.Load()+b.load.peerRequests.Load(), q, kv)
		lowest = min(lowest, level)
		sum += level
		n++
	}
	if n == 0 {
		return 1
	}
	if opts.Mean {
		return sum / float64(n)
	}
	return lowest
}

// saturationLevel is one backend's level for Saturation and SaturationFilter; known holds the
// signals that are fresh.
func saturationLevel(st *BackendState, known Signal, inflight int64, q, kv float64) float64 {
	waiting := float64(inflight)
	level := 0.0
	if known&SignalRunning != 0 {
		waiting -= float64(st.Running)
	}
	if known&SignalQueued != 0 {
		waiting = max(waiting, float64(st.Queued))
	}
	if known&SignalKVUtilization != 0 {
		level = st.KVUtilization / kv
	}
	return max(level, waiting/q)
}

func (o SaturationOptions) limits() (q, kv float64) {
	q, kv = o.Queue, o.KV
	if !(q > 0) {
		q = DefaultSaturationQueue
	}
	if !(kv > 0) {
		kv = DefaultSaturationKV
	}
	return q, kv
}

// saturationFilter is the filter NewSaturationFilter returns.
type saturationFilter struct {
	q, kv float64
}

// newSaturationFilter builds the filter NewSaturationFilter returns.
func newSaturationFilter(opts SaturationOptions) *saturationFilter {
	q, kv := opts.limits()
	return &saturationFilter{q: q, kv: kv}
}

// Filter implements Filter.
func (f *saturationFilter) Filter(_ *Request, cands []Candidate) []Candidate {
	k := 0
	for i := range cands {
		c := &cands[i]
		if saturationLevel(c.State, c.Fresh, c.InFlight.Requests, f.q, f.kv) < 1 {
			cands[k] = *c
			k++
		}
	}
	if k == 0 {
		return cands
	}
	return cands[:k]
}
