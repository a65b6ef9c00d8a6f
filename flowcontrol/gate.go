package flowcontrol

// Load is the queue's own count of dispatched, not yet completed work, given to a Gate.
type Load struct {
	// InFlight counts requests of all bands; BandInFlight those of the candidate's band.
	InFlight     int
	BandInFlight int
}

// Gate decides whether the model servers can take another request: a saturation check of
// the caller's own, consulted on every dispatch after the queue's built-in limits
// (Options.MaxInFlight, BandMaxInFlight and Saturation) have let the band through. The queue
// calls Open for the request it would dispatch next in a band (the band's choice by policy);
// if Open returns false the band dispatches nothing more in this wake-up and the queue moves
// on to the next band, so a gate that closes for band 0 but stays open for band 1 lets band 1
// proceed (per-band thresholds).
//
// Open is called with the queue's lock held: it must be fast (read an atomic, not the
// network), must not block and must not call the Queue. When the gate's answer can turn
// from false to true for a reason the queue does not see (saturation fell, a backend came
// back), the caller must call Queue.Notify; the queue does not poll. One queue never calls Open
// concurrently with itself; a Gate shared by several queues must be safe for concurrent use.
type Gate interface {
	Open(r *Request, l Load) bool
}

// Pool is one pool of model servers as the saturation limit (Options.Saturation) sees it:
// configuration, read under the queue's lock, so it must not be modified once the queue is
// in use.
type Pool struct {
	// Level reports how full the pool is: 0 idle, 1 at its saturation point, more beyond.
	// It is called under the queue lock on every dispatch: read a precomputed value (an
	// atomic updated by the metrics scraper), never scrape here. It must be safe for
	// concurrent use when the queue is used from several goroutines.
	Level func() float64
	// Thresholds[b] is the level at or above which band b is held back. Missing entries
	// (and zero) mean 1.0. Higher-priority bands usually get higher thresholds.
	Thresholds []float64
}

// bandOpenLocked reports whether the built-in limits let band b dispatch one more request
// at load l: fewer than maxInFlight requests in flight (when set), fewer than bandMax[b]
// (when set), and every pool's level below its threshold for b. They depend on the band
// alone, so the queue asks before the policy chooses a request: at saturation a closed band
// costs no policy work. O(pools).
func (q *Queue) bandOpenLocked(b int, l Load) bool {
	if q.maxInFlight > 0 && l.InFlight >= q.maxInFlight {
		return false
	}
	if b < len(q.bandMax) && q.bandMax[b] > 0 && l.InFlight >= q.bandMax[b] {
		return false
	}
	for i := range q.pools {
		p := &q.pools[i]
		t := 1.0
		if b < len(p.Thresholds) && p.Thresholds[b] > 0 {
			t = p.Thresholds[b]
		}
		if p.Level() >= t {
			return false
		}
	}
	return true
}

// openLocked reports whether r may be dispatched at load l: the built-in limits for its band,
// then the Gate.
func (q *Queue) openLocked(r *Request, l Load) bool {
	return q.bandOpenLocked(r.Band, l) && (q.gate == nil || q.gate.Open(r, l))
}
