package routing

import (
	"sync/atomic"
	"time"
)

// HealthFilter drops unhealthy backends and routes around backends whose signals are stale.
//
//   - A backend marked Unhealthy is always dropped.
//   - A backend whose signals are stale (older than Options.StaleAfter) or were never observed
//     is dropped while at least one candidate with fresh signals remains. When every remaining
//     candidate is stale — the scraper is down, not the fleet — they are all kept rather than
//     failing every request, and the fallback is counted in Fallbacks. Their stale signals are
//     then imputed by the load scorers, never read as zero load or as saturation.
//
// O(n), no allocation. Safe for concurrent use.
type HealthFilter struct {
	fallbacks atomic.Uint64
}

// NewHealthFilter returns a HealthFilter.
func NewHealthFilter() *HealthFilter { return new(HealthFilter) }

// Fallbacks is the number of picks in which every healthy candidate was stale and all were kept.
func (f *HealthFilter) Fallbacks() uint64 { return f.fallbacks.Load() }

// Filter implements Filter.
func (f *HealthFilter) Filter(_ *Request, cands []Candidate) []Candidate {
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

// StickyFilter is llm-d's "sticky until saturated" filter. A backend is sticky when it holds at
// least Threshold of the prompt's blocks. The filter keeps only the sticky candidates, unless
//
//	min TTFT(sticky) − min TTFT(non-sticky) > MaxTTFTPenalty,  TTFT(e) = InFlight.PrefillTokens(e) / PeakPrefillThroughput
//
// in which case it keeps everyone and the load scorer after it chooses. With no chain, no
// sticky candidate or only sticky candidates it keeps everyone. It reads only the router's own
// in-flight counters, which are never missing or stale (llm-d's gate breaks when a backend lacks
// its load attribute; this one cannot). O(n), no allocation, safe for concurrent use.
type StickyFilter struct {
	threshold float64
	penalty   float64 // seconds
	peak      float64
	opened    atomic.Uint64
}

// NewStickyFilter returns a StickyFilter configured by opts (zero fields take llm-d's defaults).
func NewStickyFilter(opts StickyOptions) *StickyFilter {
	f := &StickyFilter{threshold: opts.Threshold, penalty: opts.MaxTTFTPenalty.Seconds(), peak: opts.PeakPrefillThroughput}
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
func (f *StickyFilter) Opened() uint64 { return f.opened.Load() }

func (f *StickyFilter) sticky(req *Request, c *Candidate) bool {
	return float64(c.MatchedBlocks) >= f.threshold*float64(len(req.Chain))
}

// Filter implements Filter.
func (f *StickyFilter) Filter(req *Request, cands []Candidate) []Candidate {
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
