package flowcontrol

// Load is the queue's own count of dispatched, not yet completed work, given to a Gate.
type Load struct {
	// InFlight counts requests of all bands; BandInFlight those of the candidate's band.
	InFlight     int
	BandInFlight int
}

// Gate decides whether the model servers can take another request: the saturation check
// consulted on every dispatch. The queue calls Open for the request it would dispatch next
// in a band (the band's choice by policy); if Open returns false the band dispatches
// nothing more in this wake-up and the queue moves on to the next band, so a gate that
// closes for band 0 but stays open for band 1 lets band 1 proceed (per-band thresholds).
//
// Open is called with the queue's lock held: it must be fast (read an atomic, not the
// network), must not block and must not call the Queue. When the gate's answer can turn
// from false to true for a reason the queue does not see (saturation fell, a backend came
// back), the caller must call Queue.Notify; the queue does not poll. One queue never calls Open
// concurrently with itself; a Gate shared by several queues must be safe for concurrent use.
type Gate interface {
	Open(r *Request, l Load) bool
}

// GateFunc adapts a function to the Gate interface. It is as safe for concurrent use as the
// function it wraps.
type GateFunc func(r *Request, l Load) bool

// Open calls f.
func (f GateFunc) Open(r *Request, l Load) bool { return f(r, l) }

// ConcurrencyLimit is the simplest gate: at most Limit requests in flight queue-wide, and,
// when BandLimits[b] > 0, band b dispatches only while fewer than BandLimits[b] requests
// (of all bands) are in flight. Giving lower bands smaller limits keeps headroom for the
// higher ones. Zero Limit means no queue-wide limit. It needs no Notify: the queue sees every
// completion. Safe for concurrent use if not modified after New; O(1).
type ConcurrencyLimit struct {
	Limit      int
	BandLimits []int
}

// Open implements Gate.
func (c *ConcurrencyLimit) Open(r *Request, l Load) bool {
	if c.Limit > 0 && l.InFlight >= c.Limit {
		return false
	}
	if r.Band < len(c.BandLimits) && c.BandLimits[r.Band] > 0 && l.InFlight >= c.BandLimits[r.Band] {
		return false
	}
	return true
}

// Pool is one pool of model servers as the saturation gate sees it: configuration, read by
// Saturation.Open without locking, so it must not be modified once the gate is in use.
type Pool struct {
	// Level reports how full the pool is: 0 idle, 1 at its saturation point, more beyond.
	// It is called under the queue lock on every dispatch: read a precomputed value (an
	// atomic updated by the metrics scraper), never scrape here.
	Level func() float64
	// Thresholds[b] is the level at or above which band b is held back. Missing entries
	// (and zero) mean 1.0. Higher-priority bands usually get higher thresholds.
	Thresholds []float64
}

// Saturation gates dispatch on the fullness of one or more pools (for example a prefill
// pool and a decode pool with different thresholds): band b may dispatch only while every
// pool's Level is below its threshold for b. Call Queue.Notify when a level falls. Safe for
// concurrent use if not modified after New and the Level functions are; O(pools).
type Saturation struct {
	Pools []Pool
}

// Open implements Gate.
func (s *Saturation) Open(r *Request, _ Load) bool {
	for i := range s.Pools {
		p := &s.Pools[i]
		t := 1.0
		if r.Band < len(p.Thresholds) && p.Thresholds[r.Band] > 0 {
			t = p.Thresholds[r.Band]
		}
		if p.Level() >= t {
			return false
		}
	}
	return true
}

// AllGates is open only when every gate in it is open; an empty AllGates is always open.
// Safe for concurrent use if not modified after New and its gates are; O(gates).
type AllGates []Gate

// Open implements Gate.
func (g AllGates) Open(r *Request, l Load) bool {
	for _, x := range g {
		if !x.Open(r, l) {
			return false
		}
	}
	return true
}

var (
	_ Gate = (*ConcurrencyLimit)(nil)
	_ Gate = (*Saturation)(nil)
	_ Gate = AllGates(nil)
	_ Gate = GateFunc(nil)
)
