package routing

import "sync/atomic"

// healthFilter drops unhealthy backends and routes around stale ones; see routing/outlier's
// HealthFilter for its contract, and the package doc ("Missing and stale signals").
type healthFilter struct {
	fallbacks atomic.Uint64
}

// newHealthFilter builds the health filter (routing/outlier's HealthFilter returns one).
func newHealthFilter() *healthFilter { return new(healthFilter) }

// isHealthFilter reports whether f is a health filter, which Pick may skip or bypass (see
// Router.cleanSkip and Router.fast).
func isHealthFilter(f Filter) bool {
	_, ok := f.(*healthFilter)
	return ok
}

// Fallbacks is the number of picks in which every healthy candidate was stale and all were kept.
func (f *healthFilter) Fallbacks() uint64 { return f.fallbacks.Load() }

// Filter implements Filter.
func (f *healthFilter) Filter(_ *Request, cands []Candidate) []Candidate {
	clean := true
	for i := range cands {
		if cands[i].Stale || cands[i].State.Health == Unhealthy {
			clean = false
			break
		}
	}
	if clean {
		return cands
	}
	healthy := cands[:0]
	fresh := 0
	for i := range cands {
		if cands[i].State.Health == Unhealthy {
			continue
		}
		if !cands[i].Stale {
			fresh++
		}
		healthy = append(healthy, cands[i])
	}
	if fresh == len(healthy) {
		return healthy
	}
	if fresh == 0 {
		if len(healthy) > 0 {
			f.fallbacks.Add(1)
		}
		return healthy
	}
	out := healthy[:0]
	for i := range healthy {
		if !healthy[i].Stale {
			out = append(out, healthy[i])
		}
	}
	return out
}

// FilterFunc adapts a function to the Filter interface.
type FilterFunc func(req *Request, cands []Candidate) []Candidate

// Filter calls f(req, cands).
func (f FilterFunc) Filter(req *Request, cands []Candidate) []Candidate { return f(req, cands) }
