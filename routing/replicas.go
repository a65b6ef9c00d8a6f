package routing

import (
	"math"
	"time"

	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/internal/routerstats"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// Several gateway replicas in front of one fleet each run a Router. What one replica sends a
// backend, the others do not see in their own counters; a replication layer (outside this
// package, off the request path, through internal/peer, whose functions init installs below)
// exchanges them: it publishes appendInFlight of each router and hands each router the sum of
// the others' with setPeerInFlight. Session placements are shared through
// SessionOptions.Feed and the session scorers' LearnPlacement, prefix blocks through the
// prefix index (prefixcache.Options.Feed, and internal/peer for what peers learnt).

// maxUnknownPeerNames bounds the backend names setPeerInFlight keeps for backends the router
// does not know yet; entries naming further unknown backends are dropped and counted in
// Stats.DroppedPeerNames.
const maxUnknownPeerNames = 4096

// maxPeerCount caps each peer count, so that own + peers cannot overflow.
const maxPeerCount = math.MaxInt64 / 4

// backendInFlight is one backend's in-flight counts, by backend name: what appendInFlight
// publishes and setPeerInFlight applies. It is a plain value.
type backendInFlight struct {
	Backend string
	InFlight
}

// appendInFlight appends the router's own in-flight counts (requests it picked and that are not
// Done; see InFlight) of every backend it has ever known, in the order it first saw them, and
// returns dst: what a replication layer publishes for the other replicas. Backends that left the
// set are included, as requests sent there may still be in flight; peers' counts are not, so
// that replicas summing each other's do not count anything twice. O(backends known) under the
// writer's lock; not for the hot path.
func (r *Router) appendInFlight(dst []backendInFlight) []backendInFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, name := range r.names {
		dst = append(dst, backendInFlight{Backend: name, InFlight: r.loads[id].own()})
	}
	return dst
}

// setPeerInFlight replaces the in-flight counts that other replicas hold, per backend name:
// entries naming the same backend (one per peer replica) are summed, and every backend no entry
// names gets zero. From then on, the Candidate.InFlight that filters and scorers see, and
// routing/saturation's Level, count own + peers'; Router.InFlight and appendInFlight still return the router's
// own counts.
//
// Entries naming a backend the router does not know yet are kept, and applied when Update adds
// it (at most maxUnknownPeerNames such names; entries beyond are dropped and counted in
// Stats.DroppedPeerNames). Negative counts are read as 0, entries with an empty name are
// ignored. It copies what it keeps; the caller may reuse peers.
//
// setPeerInFlight is safe for concurrent use with Pick, which reads the counts with no lock: a
// pick running during the call may see some backends' (or fields') old counts and others' new
// ones. It is serialised with Update. O(len(peers) + backends known); it allocates only while
// its scratch grows.
func (r *Router) setPeerInFlight(peers []backendInFlight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cap(r.peerSums) < len(r.loads) {
		r.peerSums = make([]InFlight, len(r.loads), len(r.loads)+len(r.loads)/2)
	}
	sums := r.peerSums[:len(r.loads)]
	clear(sums)
	clear(r.peerPending)
	dropped := 0
	for i := range peers {
		p := &peers[i]
		v := p.InFlight.sanitized()
		if id, ok := r.ids[p.Backend]; ok {
			sums[id] = sums[id].plus(v)
			continue
		}
		if p.Backend == "" || v == (InFlight{}) {
			continue
		}
		old, ok := r.peerPending[p.Backend]
		if !ok && len(r.peerPending) >= maxUnknownPeerNames {
			dropped++
			continue
		}
		if r.peerPending == nil {
			r.peerPending = make(map[string]InFlight)
		}
		r.peerPending[p.Backend] = old.plus(v)
	}
	for id, l := range r.loads {
		l.setPeers(sums[id])
	}
	if dropped > 0 {
		r.stats.peerNames.Add(uint64(dropped))
	}
}

// peerInFlight returns the in-flight counts of the named backend that the last setPeerInFlight
// set (summed over the peers), whether the router knows the backend yet or not; zero when none
// was set. O(1) under the writer's lock; not for the hot path.
func (r *Router) peerInFlight(name string) InFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.ids[name]; ok {
		return r.loads[id].peers()
	}
	return r.peerPending[name]
}

// Lookup returns the router's BackendID for a backend name, and whether the router knows it
// (names are interned by Update and keep their id for the Router's lifetime). Ids differ
// between routers: a replication layer sends names and turns them into ids with Lookup, for
// example for LearnPlacement. O(1) under the writer's lock; not for the hot path.
func (r *Router) Lookup(name string) (BackendID, bool) {
	r.mu.Lock()
	id, ok := r.ids[name]
	r.mu.Unlock()
	return id, ok
}

// sanitized returns v with negative counts read as 0 and each count capped.
func (v InFlight) sanitized() InFlight {
	c := func(x int64) int64 { return min(max(x, 0), maxPeerCount) }
	return InFlight{Requests: c(v.Requests), PrefillTokens: c(v.PrefillTokens), Blocks: c(v.Blocks)}
}

// plus returns v + w for sanitized values, each count capped.
func (v InFlight) plus(w InFlight) InFlight {
	return InFlight{
		Requests:      min(v.Requests+w.Requests, maxPeerCount),
		PrefillTokens: min(v.PrefillTokens+w.PrefillTokens, maxPeerCount),
		Blocks:        min(v.Blocks+w.Blocks, maxPeerCount),
	}
}

// sessionScorers returns the router's session scorers (its profile's, see
// Profile.sessionScorers), for a replication layer handed a built Router. O(filters +
// scorers); it allocates the result.
func (r *Router) sessionScorers() []sessionPlacer {
	return Profile{Filters: r.filters, Scorers: r.scorers, Picker: r.picker}.sessionScorers()
}

// The seam for a replication layer (internal/peer), kept off the Router's API.
func init() {
	peer.AppendLoads = func(router any, dst []peer.Load) []peer.Load {
		r := router.(*Router)
		r.mu.Lock()
		defer r.mu.Unlock()
		for id, name := range r.names {
			v := r.loads[id].own()
			dst = append(dst, peer.Load{Backend: name, Requests: v.Requests, PrefillTokens: v.PrefillTokens, Blocks: v.Blocks})
		}
		return dst
	}
	peer.SetPeerLoads = func(router any, loads []peer.Load) {
		r := router.(*Router)
		r.peerInMu.Lock()
		defer r.peerInMu.Unlock()
		in := r.peerIn[:0]
		for _, l := range loads {
			in = append(in, backendInFlight{Backend: l.Backend, InFlight: InFlight{Requests: l.Requests, PrefillTokens: l.PrefillTokens, Blocks: l.Blocks}})
		}
		r.peerIn = in
		r.setPeerInFlight(in)
	}
	peer.PeerLoad = func(router any, backend string) peer.Load {
		v := router.(*Router).peerInFlight(backend)
		return peer.Load{Backend: backend, Requests: v.Requests, PrefillTokens: v.PrefillTokens, Blocks: v.Blocks}
	}
	peer.Placers = func(router any) []peer.Placer {
		r := router.(*Router)
		var out []peer.Placer
		for _, sp := range r.sessionScorers() {
			out = append(out, func(session uint64, backend string, blocks int, expires time.Time) (known, applied bool) {
				id, ok := r.Lookup(backend)
				if !ok {
					return false, false
				}
				return true, sp.LearnPlacement(session, id, blocks, expires)
			})
		}
		return out
	}
}

// The seam for the capability packages (routing/internal/hook), kept off the API.
func init() {
	hook.Indexed = func(req any) bool { return req.(*Request).indexed }
	hook.IndexID = func(cand any) (uint32, bool) {
		c := cand.(*Candidate)
		return uint32(c.ix - 1), c.ix > 0
	}
	hook.OwnRequests = func(result any) (int64, bool) {
		p := result.(*Result)
		if p.load == nil {
			return 0, false
		}
		return p.load.requests.Load(), true
	}
	hook.Filters = func(router any) []any {
		r := router.(*Router)
		out := make([]any, len(r.filters))
		for i, f := range r.filters {
			out[i] = f
		}
		return out
	}
	hook.HealthFilter = func() any { return Filter(newHealthFilter()) }
	hook.SetRolePlan = func(router any, plan *hook.RolePlan) { router.(*Router).roles.Store(plan) }
	hook.Predict = func(router, req any) (ttft, tpot time.Duration, ok bool) {
		best, ok := router.(*Router).predict(req.(*Request))
		return best.TTFT, best.TPOT, ok
	}
	hook.Adapter = func(req, cand any) (running, waiting bool, used, waitOnly int, ok bool) {
		return adapterOf(req.(*Request), cand.(*Candidate))
	}
	hook.Saturation = func(router any, level func(state any, fresh uint8, inflight int64, q, kv float64) float64, q, kv float64) (lowest, sum float64, n int) {
		r := router.(*Router)
		lowest = 1
		s := r.snap.Load()
		if s == nil {
			return lowest, 0, 0
		}
		now := r.now().UnixNano()
		for i := range s.backends {
			b := &s.backends[i]
			if b.state.Health == Unhealthy {
				continue
			}
			known := Signal(0)
			if b.updated != 0 && (r.staleAfter < 0 || time.Duration(now-b.updated) <= r.staleAfter) {
				known = b.state.Known
			}
			l := level(&b.state, uint8(known), b.load.requests.Load()+b.load.peerRequests.Load(), q, kv)
			lowest = min(lowest, l)
			sum += l
			n++
		}
		return lowest, sum, n
	}
	hook.PrefillElsewhere = func(result any) (found, ok bool) {
		p := result.(*Result)
		if p.t == nil || p.load == nil {
			return false, false
		}
		s := p.t.r.snap.Load()
		if s == nil {
			return false, false
		}
		own := p.load.prefill.Load() + p.load.peerPrefill.Load()
		for i := range s.backends {
			b := &s.backends[i]
			if b.id == p.ID || b.state.Role == RoleDecode || b.state.Health == Unhealthy {
				continue
			}
			if b.load.prefill.Load()+b.load.peerPrefill.Load() <= own {
				return true, true
			}
		}
		return false, true
	}
}

// The seam for the gateway's metrics (internal/routerstats), kept off the API.
func init() {
	routerstats.AppendClamped = func(router any, dst []routerstats.Clamped) []routerstats.Clamped {
		r := router.(*Router)
		for i, label := range r.scorerLabels {
			dst = append(dst, routerstats.Clamped{Scorer: label, Count: r.clampedBy[i].Load()})
		}
		return dst
	}
}
