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

// BandGate is implemented by a Gate that can tell, from the band and the load alone, that
// it is closed to every request of a band. The queue asks OpenBand before choosing the
// band's next request, so a closed gate (the normal state at saturation) costs no policy
// work: in particular a FlowPicker's PickFlow, which may scan every flow of the band, is
// not called for a band whose OpenBand is false.
//
// OpenBand(b, l) == false must imply Open(r, l) == false for every request r of band b;
// true promises nothing, and the queue still calls Open for the request it would dispatch
// (so answering true is always correct, and a gate that depends on the request as well
// can implement BandGate for its band-only part). The same rules as for Open apply: called
// under the queue's lock, fast, non-blocking, never calling the Queue.
//
// ConcurrencyLimit, Saturation and AllGates implement it; GateFunc does not (it sees the
// request).
type BandGate interface {
	Gate
	OpenBand(band int, l Load) bool
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

// Open implements Gate. It depends on r's band only.
func (c *ConcurrencyLimit) Open(r *Request, l Load) bool { return c.OpenBand(r.Band, l) }

// OpenBand implements BandGate: the exact answer of Open for any request of band.
func (c *ConcurrencyLimit) OpenBand(band int, l Load) bool {
	if c.Limit > 0 && l.InFlight >= c.Limit {
		return false
	}
	if band < len(c.BandLimits) && c.BandLimits[band] > 0 && l.InFlight >= c.BandLimits[band] {
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

// Open implements Gate. It depends on r's band only.
func (s *Saturation) Open(r *Request, l Load) bool { return s.OpenBand(r.Band, l) }

// OpenBand implements BandGate: the answer of Open for any request of band at the pools'
// current levels.
func (s *Saturation) OpenBand(band int, _ Load) bool {
	for i := range s.Pools {
		p := &s.Pools[i]
		t := 1.0
		if band < len(p.Thresholds) && p.Thresholds[band] > 0 {
			t = p.Thresholds[band]
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

// OpenBand implements BandGate: false when a member that implements BandGate is closed to
// band; members that do not (a GateFunc) count as open here and are asked through Open.
// O(gates).
func (g AllGates) OpenBand(band int, l Load) bool {
	for _, x := range g {
		if bg, ok := x.(BandGate); ok && !bg.OpenBand(band, l) {
			return false
		}
	}
	return true
}

var (
	_ BandGate = (*ConcurrencyLimit)(nil)
	_ BandGate = (*Saturation)(nil)
	_ BandGate = AllGates(nil)
	_ Gate     = GateFunc(nil)
)
