package routing

import (
	"sync/atomic"
	"time"
)

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

// Defaults of llm-d's sticky-until-saturated filter.
const (
	// DefaultStickyThreshold is the matched share of the prompt's blocks at which a backend is
	// sticky.
	DefaultStickyThreshold = 0.80
	// DefaultMaxTTFTPenalty is the TTFT a sticky backend may cost above the best non-sticky one.
	DefaultMaxTTFTPenalty = 18000 * time.Millisecond
	// DefaultPeakPrefillThroughput is the prefill tokens per second used to estimate TTFT
	// (Qwen3-32B on 2×H100 in llm-d's calibration).
	DefaultPeakPrefillThroughput = 15928.0
)

// StickyOptions configures StickyFilter. Zero values are llm-d's defaults.
type StickyOptions struct {
	// Threshold is the share MatchedBlocks/len(Chain) at or above which a backend is sticky.
	// Zero: DefaultStickyThreshold (0.80).
	Threshold float64
	// MaxTTFTPenalty is how much longer the best sticky backend's estimated TTFT may be than the
	// best non-sticky one's before stickiness is given up. Zero: DefaultMaxTTFTPenalty (18 s).
	MaxTTFTPenalty time.Duration
	// PeakPrefillThroughput is the prefill tokens per second of one backend. Zero:
	// DefaultPeakPrefillThroughput (15928). Calibrate the penalty as
	// τ = (B / T(B)) · T_max for B = max-num-batched-tokens and T(B) the TTFT of one uncached chunk.
	PeakPrefillThroughput float64
}

// stickyFilter is the filter NewStickyFilter returns.
type stickyFilter struct {
	threshold float64
	penalty   float64 // seconds
	peak      float64
	opened    atomic.Uint64
}

// newStickyFilter builds the filter NewStickyFilter returns.
func newStickyFilter(opts StickyOptions) *stickyFilter {
	f := &stickyFilter{threshold: opts.Threshold, penalty: opts.MaxTTFTPenalty.Seconds(), peak: opts.PeakPrefillThroughput}
	if f.threshold <= 0 {
		f.threshold = DefaultStickyThreshold
	}
	if opts.MaxTTFTPenalty <= 0 {
		f.penalty = DefaultMaxTTFTPenalty.Seconds()
	}
	if f.peak <= 0 {
		f.peak = DefaultPeakPrefillThroughput
	}
	return f
}

// Opened is the number of picks in which the TTFT gate gave up stickiness.
func (f *stickyFilter) Opened() uint64 { return f.opened.Load() }

func (f *stickyFilter) sticky(req *Request, c *Candidate) bool {
	return float64(c.MatchedBlocks) >= f.threshold*float64(len(req.Chain))
}

// Filter implements Filter.
func (f *stickyFilter) Filter(req *Request, cands []Candidate) []Candidate {
	if len(req.Chain) == 0 {
		return cands
	}
	bestSticky, bestOther := -1.0, -1.0
	for i := range cands {
		t := float64(cands[i].InFlight.PrefillTokens) / f.peak
		if f.sticky(req, &cands[i]) {
			if bestSticky < 0 || t < bestSticky {
				bestSticky = t
			}
		} else if bestOther < 0 || t < bestOther {
			bestOther = t
		}
	}
	if bestSticky < 0 || bestOther < 0 {
		return cands
	}
	if bestSticky-bestOther > f.penalty {
		f.opened.Add(1)
		return cands
	}
	out := cands[:0]
	for i := range cands {
		if f.sticky(req, &cands[i]) {
			out = append(out, cands[i])
		}
	}
	return out
}

// FilterFunc adapts a function to the Filter interface.
type FilterFunc func(req *Request, cands []Candidate) []Candidate

// Filter calls f(req, cands).
func (f FilterFunc) Filter(req *Request, cands []Candidate) []Candidate { return f(req, cands) }
