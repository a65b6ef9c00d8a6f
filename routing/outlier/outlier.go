package outlier

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// ErrInvalidOptions is wrapped by New's errors. It wraps [routing.ErrInvalidOptions], so
// errors.Is(err, routing.ErrInvalidOptions) holds too.
var ErrInvalidOptions = fmt.Errorf("outlier: %w", routing.ErrInvalidOptions)

// Defaults of Options, Envoy's outlier detection where it has one.
const (
	// DefaultConsecutiveFailures is the server errors or timeouts in a row that eject a
	// backend (Envoy's consecutive_5xx).
	DefaultConsecutiveFailures = 5
	// DefaultConsecutiveConnectFailures is the connect failures in a row that eject: one.
	// A refused connection is unambiguous, and every later pick to it would fail instantly.
	DefaultConsecutiveConnectFailures = 1
	// DefaultFailureRate is the failure share over the window that ejects.
	DefaultFailureRate = 0.5
	// DefaultMinRequests is the requests the window must hold before its failure rate
	// counts.
	DefaultMinRequests = 20
	// DefaultWindow is the span of the failure-rate window (Envoy's interval).
	DefaultWindow = 10 * time.Second
	// DefaultBaseEjection is the first ejection's length.
	DefaultBaseEjection = 1 * time.Second
	// DefaultMaxEjection caps an ejection's length.
	DefaultMaxEjection = 30 * time.Second
	// DefaultMaxEjectedPercent is the share of the known backends that may be ejected at
	// once.
	DefaultMaxEjectedPercent = 50
	// DefaultProbeTimeout is how long a probe claim holds off the next probe.
	DefaultProbeTimeout = 10 * time.Second
	// DefaultStallAfter is the silence of a busy backend that holds new picks off it.
	DefaultStallAfter = 15 * time.Second
)

// Options configures a [Detector] (see [New]). Zero values are the documented defaults.
type Options struct {
	// ConsecutiveFailures is the failures of the backend ([routing.FailureServer],
	// [routing.FailureTimeout] or [routing.FailureConnect]) in a row that eject it; a success
	// resets the count. Zero: [DefaultConsecutiveFailures] (5, Envoy's consecutive_5xx).
	// Negative: off.
	ConsecutiveFailures int
	// ConsecutiveConnectFailures is the [routing.FailureConnect] in a row that eject; a success
	// or any answer from the backend ([routing.FailureServer], [routing.FailureTimeout]) resets
	// the count. Zero: [DefaultConsecutiveConnectFailures] (1). Negative: off.
	ConsecutiveConnectFailures int
	// FailureRate ejects a backend when failures/requests over Window reaches it, with at least
	// MinRequests in the window. Requests are successes and failures of the backend; neutral
	// and overload outcomes are not counted. Zero: DefaultFailureRate (0.5). Negative:
	// off. At most 1.
	FailureRate float64
	// MinRequests is the requests the window must hold before FailureRate applies; it also damps
	// Score (see Detector). Zero: DefaultMinRequests (20).
	MinRequests int
	// Window is the span over which the failure rate is counted, in ten buckets; it is also the
	// period by which the ejection count decays. Zero: DefaultWindow (10 s).
	Window time.Duration
	// BaseEjection is the length of a first ejection; the n-th ejection in a row lasts
	// min(BaseEjection·2^(n−1), MaxEjection). Zero: DefaultBaseEjection (1 s).
	BaseEjection time.Duration
	// MaxEjection caps an ejection's length; at least BaseEjection. Zero:
	// DefaultMaxEjection (30 s).
	MaxEjection time.Duration
	// MaxEjectedPercent is the most of the backends known to the Detector that may be ejected at
	// once (at least one may always be), in [0, 100]. Zero: DefaultMaxEjectedPercent
	// (50).
	MaxEjectedPercent int
	// ProbeTimeout is how long a claimed probe keeps other requests off a half-open backend. A
	// probe still running after it (a long stream, a hung request, a [routing.Result] never finished)
	// lets one more probe through. Zero: DefaultProbeTimeout (10 s).
	ProbeTimeout time.Duration
	// StallAfter holds new picks off a backend that has streamed requests of this router in
	// flight ([routing.Request].Stream) and has sent no byte on any request
	// ([routing.Result.Progress]) for this long ([routing.Candidate].Silence) — counted from the
	// pick of the first stream if nothing came since: a server whose metrics look healthy but
	// which holds every answer. Until the router hears of progress once, nothing counts as
	// silent. It is not an ejection: the backend is picked again as soon as one of its requests
	// progresses or ends (a timeout, say), and, as with ejections, when every
	// candidate is silent or ejected all are kept. Set it below the response-header timeout:
	// requests already waiting there are abandoned at that timeout, new ones are not sent after
	// StallAfter. The backend's silence is one clock for all its requests, so a live stream
	// masks a request stalled beside it, and a long prefill looks silent: it is a backstop for
	// callers that report only progress. The proxy judges each request by its own wait for its
	// first byte instead (proxy.Timeouts.Stall, 2 s) and keeps this default. Zero:
	// DefaultStallAfter (15 s). Negative: off.
	StallAfter time.Duration
	// Now is the clock of Completed, which has no pick time to go by; use the Router's clock
	// ([routing.Options].Now). Nil: time.Now.
	Now func() time.Time
}

// Stats are a [Detector]'s cumulative counters and its current number of ejected backends.
type Stats struct {
	// Ejections counts ejections, including a failed probe's re-ejection.
	Ejections uint64
	// Probes counts requests sent to a half-open backend as its probe.
	Probes uint64
	// Restored counts successful probes, each returning a backend to rotation.
	Restored uint64
	// Fallbacks counts picks in which every candidate was ejected and all were kept.
	Fallbacks uint64
	// Suppressed counts ejections not made because MaxEjectedPercent was reached.
	Suppressed uint64
	// EarlyProbes counts ejections cut short because the backend's health went from unhealthy
	// (or stale) to healthy.
	EarlyProbes uint64
	// Ejected is the number of backends out of rotation now: ejected or half-open.
	Ejected int
	// Stalled counts picks that passed over a backend silent for StallAfter with requests in
	// flight.
	Stalled uint64
}

// Detector is passive health: it learns from the outcome of every request (as a
// [routing.Completer]) which backends are failing, ejects them from the candidates (as a
// [routing.Filter]) for a backoff period, lets one probe at a time through when the period is
// over (claimed as a [routing.PickObserver]), and lowers the score of backends with a recent
// failure share (as a [routing.Scorer]). Its semantics are Envoy's outlier detection, with
// these defaults:
//
//   - 5 failures in a row ([routing.FailureServer], [routing.FailureTimeout] or
//     [routing.FailureConnect]) eject, like Envoy's consecutive_5xx; 1 connect failure ejects
//     at once, since a refused connection makes every later request fail instantly — and a
//     backend whose requests fail instantly looks idle to least-loaded scoring, which would
//     otherwise send it most of the traffic.
//   - A failure share ≥ 0.5 over a 10 s window ejects, once the window holds 20 requests.
//   - The n-th ejection in a row lasts min(1 s·2^(n−1), 30 s). n decays by one per Window the
//     backend then spends in rotation without being ejected (Envoy decrements its multiplier
//     once per interval), so a backend that recovered for good starts again at 1 s.
//   - At most 50% of the known backends are ejected at once, but one always may be. If a pick
//     would be left with no candidate, or only unhealthy ones, all are kept (and counted in
//     Fallbacks): passive health never fails every request.
//
// Unlike Envoy, an ejection does not simply end: the backend is then half-open, and one request
// at a time may be in flight to it as a probe (two, rarely, when concurrent picks race for the
// claim, or when a probe is still running after ProbeTimeout). A successful probe restores it;
// a failed one ejects it again for the next, doubled period; a neutral or overload outcome
// frees the claim for another probe. Outcomes of requests picked before an ejection ended are
// ignored: they tell what the backend did before it was judged. A half-open backend not probed
// within MaxEjection (it left the backend set, or no pick chose it) returns to rotation
// unprobed, as Envoy returns every host when its time is up, so that departed backends do not
// hold ejection places.
//
// With active health checks (a checker such as proxy/healthcheck's, reporting through
// [Detector.Probed]) no user request is ever a probe: from the checker's first report on, an
// ejected backend gets no user request at all (but in the all-ejected fallback), half-open
// admits none, and only the checker's own probe brings a backend back — at once when the
// back-off is over and no failure was heard of since the probe was sent (see
// [Detector.Probed]). Used alone, without a checker, the Detector works as described above:
// user requests are its probes, and a backend ejected while no traffic comes stays out until
// some does (or MaxEjection has passed).
//
// Early probe: when the writer's health verdict for an ejected backend was seen
// [routing.Unhealthy], or its signals stale, and is now [routing.Healthy] with fresh signals,
// the backend becomes half-open at once — a server that died and came back gets traffic within
// one scrape interval, not after a long backoff. A server that answers health checks but fails
// requests never went unhealthy and is not probed early. The Detector sees health only on the
// candidates its Filter is given, so it must come before [HealthFilter] ([With] puts it first).
//
// Score is 1 for a backend without a failure in the last Window, otherwise
//
//	1 − failures / max(requests, MinRequests)
//
// over the window as of the backend's last completion: a backend failing often but under the
// thresholds gets fewer picks, and one unlucky request moves it by 1/MinRequests, not to 0. An
// ejection clears the window, so a probe competes on load alone. Suggested weight: 1 in the
// usher profile (routing/profiles' Usher, whose other weights sum to 6.5): a backend failing
// half its requests loses 0.5, what the KV-utilisation term (routing/load's KV) separates
// between an empty and a half-full cache; it does not overturn a session's home (weight 4), which only ejection moves.
//
// "Known" backends, for MaxEjectedPercent, are those that reported a success or a failure of
// their own in the last ten Windows, or are out of rotation.
//
// A Detector learns [routing.BackendID]s from one [routing.Router]: use one Detector per
// Router (build a [routing.Profile] per Router, as for the session tables). Its clock
// ([Options].Now) should be the Router's.
//
// Concurrency and cost: all methods are safe for concurrent use. Filter, Score and Picked run
// on every pick from any number of goroutines; they take no lock and allocate nothing. When no
// backend is out of rotation Filter and Picked are one atomic load, and when no backend failed
// within Window Score is one atomic load and fills dst with 1; otherwise Filter and Score are
// O(n) atomic loads for n candidates and Picked O(1). Completed takes a short lock and is O(1)
// (ten window buckets), plus, at most once per Window, an O(backends) sweep; a neutral outcome
// with nothing ejected takes no lock. Memory is 288 bytes per backend the Detector has heard
// of, in chunks of 64 slots that hold no pointers.
type Detector struct {
	// Immutable after New. Durations and times are in nanoseconds.
	consecutive, connect int32 // 0: off
	rate                 float64
	minReq               uint32
	minReqF              float64
	window, width        int64
	base, max            int64
	maxN                 int32 // the smallest n whose ejection lasts max
	pct                  int
	probeTimeout         int64
	stallAfter           int64 // 0: off
	now                  func() time.Time

	dir      atomic.Pointer[outlierDir]
	out      atomic.Int32 // backends ejected or half-open
	lastFail atomic.Int64 // the latest failure of any backend, Unix ns; 0: none
	// active is set by the first Probed: an active health checker brings ejected backends
	// back, so no user request is admitted to one as a probe.
	active atomic.Bool

	ejections, probes, restored, fallbacks, suppressed, early, stalled atomic.Uint64

	mu sync.Mutex // serialises Completed; guards the fields below and the slots' guarded fields.
	// known is the number of slots with known set.
	known int
	// nextSweep is when sweepLocked next runs, Unix ns.
	nextSweep int64
}

var (
	_ routing.Filter       = (*Detector)(nil)
	_ routing.Scorer       = (*Detector)(nil)
	_ routing.PickObserver = (*Detector)(nil)
	_ routing.Completer    = (*Detector)(nil)
)

// outlierBuckets is the number of buckets of the failure-rate window.
const outlierBuckets = 10

// outlierChunk is the number of slots allocated at once. Slots never move once allocated (the
// pick path updates them with atomics), so the table grows by chunks, not by copying slots.
const outlierChunk = 64

// maxOutlierBackends bounds the table: ids beyond it (the Router's ids are dense, so only a
// forged one) are ignored.
const maxOutlierBackends = 1 << 20

// outlierForgetWindows is how many Windows without an outcome make a backend unknown.
const outlierForgetWindows = 10

// outlierDir is the published table: chunks of slots by BackendID/outlierChunk. Only Completed
// grows it, under Detector.mu, by publishing a new outlierDir that shares the old chunks.
type outlierDir struct {
	chunks []*[outlierChunk]outlierSlot
}

// slot returns the slot of id, or nil when the table has none.
func (d *outlierDir) slot(id routing.BackendID) *outlierSlot {
	if d == nil {
		return nil
	}
	c := int(id / outlierChunk)
	if c >= len(d.chunks) {
		return nil
	}
	return &d.chunks[c][id%outlierChunk]
}

// outlierSlot is one backend's passive health. It holds no pointers.
//
// State: in rotation (until == 0); ejected (now < until); half-open (until ≤ now), where a
// probe may be claimed by storing its pick time in probe.
type outlierSlot struct {
	// Read on the pick path, written with atomics.
	until    atomic.Int64  // end of the ejection, Unix ns; 0: in rotation
	probe    atomic.Int64  // pick time of the claimed probe, Unix ns; 0: none
	lastFail atomic.Int64  // the latest failure in the window, Unix ns; 0: none
	counts   atomic.Uint64 // failures<<32 | requests in the window as of the last outcome
	down     atomic.Bool   // seen routing.Unhealthy or stale while ejected
	served   atomic.Int64  // the latest success (a request's or an active probe's), Unix ns; 0: none
	// Cumulative, for BackendStats.
	ejected, probed, restored atomic.Uint64

	// Guarded by Detector.mu.
	known         bool
	consec        int32 // backend failures in a row
	consecConnect int32 // connect failures in a row
	ejections     int32 // n of the last ejection, decaying (see ejectLocked)
	settled       int64 // when the last ejection ended: outcomes of earlier picks are ignored
	restoredAt    int64 // when the backend last returned to rotation; 0: never
	lastDone      int64 // the latest outcome counted, Unix ns
	failedAt      int64 // the latest failure heard of, counted or not (a stall included), Unix ns
	lastProbed    int64 // when the last active probe's outcome came (Probed), Unix ns; 0: never
	buckets       [outlierBuckets]outlierBucket
}

type outlierBucket struct {
	epoch              int64 // bucket number: time / width
	requests, failures uint32
}

// New returns a [Detector] configured by o. It fails with [ErrInvalidOptions] when a value is
// out of range: FailureRate above 1 or NaN, MinRequests, a duration or MaxEjectedPercent
// negative, MaxEjectedPercent above 100, or MaxEjection below BaseEjection.
func New(o Options) (*Detector, error) {
	def := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	defDur := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	consec := def(o.ConsecutiveFailures, DefaultConsecutiveFailures)
	connect := def(o.ConsecutiveConnectFailures, DefaultConsecutiveConnectFailures)
	rate := o.FailureRate
	if rate == 0 {
		rate = DefaultFailureRate
	}
	minReq := def(o.MinRequests, DefaultMinRequests)
	window := defDur(o.Window, DefaultWindow)
	base := defDur(o.BaseEjection, DefaultBaseEjection)
	maxEj := defDur(o.MaxEjection, DefaultMaxEjection)
	pct := def(o.MaxEjectedPercent, DefaultMaxEjectedPercent)
	probe := defDur(o.ProbeTimeout, DefaultProbeTimeout)
	stall := defDur(o.StallAfter, DefaultStallAfter)
	switch {
	case math.IsNaN(rate) || rate > 1:
		return nil, fmt.Errorf("%w: outlier FailureRate %v (want ≤ 1, negative for off)", ErrInvalidOptions, o.FailureRate)
	case minReq < 0 || int64(minReq) > math.MaxUint32:
		return nil, fmt.Errorf("%w: outlier MinRequests %d", ErrInvalidOptions, o.MinRequests)
	case window < outlierBuckets:
		return nil, fmt.Errorf("%w: outlier Window %v", ErrInvalidOptions, o.Window)
	case base < 0 || maxEj < 0 || probe < 0:
		return nil, fmt.Errorf("%w: outlier BaseEjection %v, MaxEjection %v, ProbeTimeout %v (want ≥ 0)", ErrInvalidOptions, o.BaseEjection, o.MaxEjection, o.ProbeTimeout)
	case maxEj < base:
		return nil, fmt.Errorf("%w: outlier MaxEjection %v below BaseEjection %v", ErrInvalidOptions, maxEj, base)
	case pct < 0 || pct > 100:
		return nil, fmt.Errorf("%w: outlier MaxEjectedPercent %d (want 0–100)", ErrInvalidOptions, o.MaxEjectedPercent)
	}
	x := &Detector{
		rate:         rate,
		minReq:       uint32(minReq),
		minReqF:      float64(max(1, minReq)),
		window:       int64(window),
		width:        int64(window) / outlierBuckets,
		base:         int64(base),
		max:          int64(maxEj),
		pct:          pct,
		probeTimeout: int64(probe),
		stallAfter:   max(0, int64(stall)),
		now:          o.Now,
	}
	if consec > 0 {
		x.consecutive = int32(min(consec, math.MaxInt32))
	}
	if connect > 0 {
		x.connect = int32(min(connect, math.MaxInt32))
	}
	if x.now == nil {
		x.now = time.Now
	}
	x.maxN = 1
	for x.ejection(x.maxN) < x.max {
		x.maxN++
	}
	return x, nil
}

// ejection is the length of the n-th ejection in a row: min(BaseEjection·2^(n−1),
// MaxEjection), in ns. O(n).
func (o *Detector) ejection(n int32) int64 {
	d := o.base
	for i := int32(1); i < n && d < o.max; i++ {
		if d > o.max/2 {
			return o.max
		}
		d *= 2
	}
	return min(d, o.max)
}

// With returns p with o prepended to its Filters — before [HealthFilter], so that o sees the
// health verdicts it needs for the early probe — and, unless weight is 0, o appended to its
// Scorers with that weight (see [Detector] for a suggested one). The slices are copied: p's are
// not modified or shared. p's Name is kept. A [routing.Router] registers o's
// [routing.PickObserver] and [routing.Completer] sides once even though it is both a filter and
// a scorer. O(len(p.Filters) + len(p.Scorers)).
func With(p routing.Profile, o *Detector, weight float64) routing.Profile {
	filters := make([]routing.Filter, 0, len(p.Filters)+1)
	p.Filters = append(append(filters, o), p.Filters...)
	p.Scorers = slices.Clip(slices.Clone(p.Scorers))
	if weight != 0 {
		p.Scorers = append(p.Scorers, routing.Weighted{Scorer: o, Weight: weight})
	}
	return p
}

// nowNs is the pick time of req in Unix ns: Request.Now, which Pick resolves, else the clock.
func (o *Detector) nowNs(req *routing.Request) int64 {
	if req != nil && !req.Now.IsZero() {
		return req.Now.UnixNano()
	}
	return o.now().UnixNano()
}

// Filter implements [routing.Filter]: it drops ejected backends, half-open ones whose probe is
// in flight and silent ones (see [Options].StallAfter), keeps everyone when that would leave no
// candidate but unhealthy ones (which the [HealthFilter] after it drops), and makes an ejected
// backend half-open at once when its health came back (see [Detector]). Candidates are compacted by
// swapping, so all of them are still in cands when the fallback keeps them. O(1) when no
// backend is out of rotation, else O(n); lock-free, no allocation.
func (o *Detector) Filter(req *routing.Request, cands []routing.Candidate) []routing.Candidate {
	out := o.out.Load()
	if out == 0 && o.stallAfter == 0 {
		return cands
	}
	now := o.nowNs(req)
	if out == 0 && !o.anySilent(cands) {
		return cands
	}
	d := o.dir.Load()
	// Partition in place: each dropped candidate is swapped with the last undecided one, so the
	// kept ones end up in cands[:k] and the dropped ones, still there for the fallback, after.
	k, j, usable, silent := 0, len(cands), 0, false
	for k < j {
		c := &cands[k]
		drop := o.silent(c)
		if drop {
			silent = true
		} else if out != 0 {
			drop = !o.admit(d, c, now)
		}
		if drop {
			j--
			cands[k], cands[j] = cands[j], cands[k]
			continue
		}
		if cands[k].State == nil || cands[k].State.Health != routing.Unhealthy {
			usable++
		}
		k++
	}
	if usable == 0 && k < len(cands) {
		// Only ejected, silent and unhealthy backends: keep everyone, and let HealthFilter drop
		// the unhealthy ones, rather than fail the request.
		o.fallbacks.Add(1)
		return cands
	}
	if silent {
		o.stalled.Add(1)
	}
	return cands[:k]
}

// silent reports whether c has streamed requests of the router in flight and has sent nothing
// on any for StallAfter. Candidates built outside a Router are never silent.
func (o *Detector) silent(c *routing.Candidate) bool {
	return o.stallAfter > 0 && int64(c.Silence) > o.stallAfter
}

func (o *Detector) anySilent(cands []routing.Candidate) bool {
	for i := range cands {
		if o.silent(&cands[i]) {
			return true
		}
	}
	return false
}

// admit reports whether c may be picked at now. Lock-free.
func (o *Detector) admit(d *outlierDir, c *routing.Candidate, now int64) bool {
	s := d.slot(c.ID)
	if s == nil {
		return true
	}
	u := s.until.Load()
	if u == 0 {
		return true
	}
	if o.active.Load() {
		return false // only a probe of the active checker brings it back (Probed)
	}
	if now < u {
		if c.State == nil {
			return false
		}
		if c.State.Health == routing.Unhealthy || c.Stale {
			if !s.down.Load() {
				s.down.Store(true)
			}
			return false
		}
		if c.State.Health != routing.Healthy || !s.down.Load() || !s.until.CompareAndSwap(u, now) {
			return false
		}
		// Health came back: half-open from now on.
		s.down.Store(false)
		o.early.Add(1)
	}
	p := s.probe.Load()
	return p == 0 || now-p >= o.probeTimeout
}

// Picked implements [routing.PickObserver]: a pick of a half-open backend claims its probe. Lock-free, O(1);
// one atomic load when no backend is out of rotation.
func (o *Detector) Picked(_ *routing.Request, chosen *routing.Candidate, now time.Time) {
	if o.out.Load() == 0 || o.active.Load() {
		return // nothing out of rotation, or no user request is a probe
	}
	s := o.dir.Load().slot(chosen.ID)
	if s == nil {
		return
	}
	n := now.UnixNano()
	if u := s.until.Load(); u == 0 || n < u {
		return
	}
	for {
		p := s.probe.Load()
		if p != 0 && n-p < o.probeTimeout {
			return // another probe is in flight: a race between two picks, or a fallback pick
		}
		if s.probe.CompareAndSwap(p, n) {
			o.probes.Add(1)
			s.probed.Add(1)
			return
		}
	}
}

// Score implements [routing.Scorer]: 1 for a backend without a failure in the last Window, else
// 1 − failures/max(requests, MinRequests) over the window (see [Detector]). Lock-free, no
// allocation; O(n), and one atomic load besides filling dst when no backend failed recently.
func (o *Detector) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	now := o.nowNs(req)
	if lf := o.lastFail.Load(); lf == 0 || now-lf > o.window {
		for i := range dst {
			dst[i] = 1
		}
		return
	}
	d := o.dir.Load()
	for i := range cands {
		dst[i] = 1
		s := d.slot(cands[i].ID)
		if s == nil {
			continue
		}
		if lf := s.lastFail.Load(); lf == 0 || now-lf > o.window {
			continue
		}
		v := s.counts.Load()
		f, n := float64(v>>32), float64(uint32(v))
		dst[i] = max(0, 1-f/max(n, o.minReqF))
	}
}

// outcome is what a routing.DoneInfo means for passive health.
type outcome uint8

const (
	outcomeNeutral outcome = iota
	outcomeSuccess
	outcomeFailure
)

func outcomeOf(info routing.DoneInfo) outcome {
	if info.Err == nil {
		return outcomeSuccess
	}
	switch info.Failure {
	case routing.FailureConnect, routing.FailureTimeout, routing.FailureServer:
		return outcomeFailure
	}
	return outcomeNeutral
}

// Completed implements [routing.Completer]. A success resets the backend's failure streaks; a failure of
// the backend (Connect, Timeout, Server) extends them and counts in the window; the outcome
// ejects the backend at once when it crosses a threshold (unless MaxEjectedPercent is reached),
// so the next Pick already avoids it. For a half-open backend the outcome of a request picked
// after the ejection ended is its probe's: success restores, failure re-ejects. Neutral and
// overload outcomes count nowhere; they only free a probe claim. Outcomes of requests picked
// before the backend's last ejection ended are ignored. O(1) under a short lock (plus the
// periodic sweep); a neutral outcome with nothing ejected takes no lock.
func (o *Detector) Completed(id routing.BackendID, picked time.Time, info routing.DoneInfo) {
	kind := outcomeOf(info)
	if (kind == outcomeNeutral && o.out.Load() == 0) || id >= maxOutlierBackends {
		return
	}
	now := o.now().UnixNano()
	pk := picked.UnixNano()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sweepLocked(now)
	s := o.slotLocked(id)
	u := s.until.Load()
	if kind == outcomeNeutral {
		if u != 0 && pk >= u {
			s.probe.CompareAndSwap(pk, 0)
		}
		return
	}
	if kind == outcomeFailure {
		s.failedAt = now
	} else {
		s.served.Store(now)
	}
	if !s.known {
		s.known = true
		o.known++
	}
	s.lastDone = now
	if u != 0 {
		if pk < u || o.active.Load() {
			// Picked before the ejection ended, or (with active checks) a request that was on
			// the backend when it was ejected, or a fallback pick: only probes judge it.
			return
		}
		if kind == outcomeSuccess {
			o.restoredLocked(s, u, now)
		} else {
			o.ejectLocked(s, now)
		}
		return
	}
	o.countLocked(s, pk, now, kind, info.Failure)
}

// countLocked counts the outcome of a request (or probe) of s, in rotation, picked (or sent)
// at pk, in the window and the streaks, and ejects s when it crosses a threshold.
func (o *Detector) countLocked(s *outlierSlot, pk, now int64, kind outcome, failure routing.Failure) {
	if pk < s.settled {
		return
	}
	e := now / o.width
	b := &s.buckets[e%outlierBuckets]
	if b.epoch != e {
		*b = outlierBucket{epoch: e}
	}
	b.requests = satInc(b.requests)
	if kind == outcomeSuccess {
		s.consec, s.consecConnect = 0, 0
		o.publishLocked(s, e)
		return
	}
	b.failures = satInc(b.failures)
	s.consec = min(s.consec+1, math.MaxInt32-1)
	if failure == routing.FailureConnect {
		s.consecConnect = min(s.consecConnect+1, math.MaxInt32-1)
	} else {
		s.consecConnect = 0
	}
	req, fail := o.publishLocked(s, e)
	s.lastFail.Store(now)
	o.lastFail.Store(now)
	eject := (o.consecutive > 0 && s.consec >= o.consecutive) ||
		(o.connect > 0 && s.consecConnect >= o.connect) ||
		(o.rate >= 0 && req >= o.minReq && float64(fail) >= o.rate*float64(req))
	if !eject {
		return
	}
	if allowed := max(1, o.known*o.pct/100); int(o.out.Load()) >= allowed {
		o.suppressed.Add(1)
		return
	}
	o.ejectLocked(s, now)
}

// Probed reports the outcome of an active health probe of backend id — a request of a health
// checker's own (package proxy/healthcheck), never a user's — sent at started, classified as a
// request's is ([routing.DoneInfo].Failure). The first call turns the Detector's active mode
// on for good: from then on no user request is admitted to an ejected backend, not even as a
// half-open probe; only a probe brings it back.
//
// For a backend out of rotation, a successful probe restores it once its ejection's back-off
// (min(BaseEjection·2^(n−1), MaxEjection)) is over and no failure of the backend — a request's
// or a probe's, a stalled one included — was heard of since the probe was sent: a success does
// not mask a failure that ended after it began, so a backend still stalling on some requests
// is not restored by one that got through. A failed probe keeps it out, without lengthening
// the back-off (the checker probes again in a second or so, and a killed server that is
// restarted returns at its first successful probe). For a backend in rotation, a probe's
// outcome counts as a request's: a refused connection or a stalled probe ejects it at once.
// Neutral and overload outcomes count nowhere. Safe for concurrent use; O(1) under the lock
// Completed takes (plus the periodic sweep).
func (o *Detector) Probed(id routing.BackendID, started time.Time, info routing.DoneInfo) {
	if id >= maxOutlierBackends {
		return
	}
	if !o.active.Load() {
		o.active.Store(true)
	}
	kind := outcomeOf(info)
	now := o.now().UnixNano()
	st := started.UnixNano()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sweepLocked(now)
	s := o.slotLocked(id)
	if kind == outcomeNeutral {
		return // no verdict: a backend the checker cannot judge returns after MaxEjection
	}
	s.lastProbed = now
	failedBefore := s.failedAt
	if kind == outcomeFailure {
		s.failedAt = now
	} else {
		s.served.Store(now)
	}
	if !s.known {
		s.known = true
		o.known++
	}
	s.lastDone = now
	if u := s.until.Load(); u != 0 {
		if kind == outcomeSuccess && now >= u && st > failedBefore {
			o.restoredLocked(s, u, now)
		}
		return
	}
	o.countLocked(s, st, now, kind, info.Failure)
}

func satInc(v uint32) uint32 {
	if v == math.MaxUint32 {
		return v
	}
	return v + 1
}

// publishLocked sums s's window at bucket epoch e, publishes it for Score and returns it.
func (o *Detector) publishLocked(s *outlierSlot, e int64) (requests, failures uint32) {
	var req, fail uint64
	for i := range s.buckets {
		if b := &s.buckets[i]; b.epoch > e-outlierBuckets {
			req += uint64(b.requests)
			fail += uint64(b.failures)
		}
	}
	requests, failures = uint32(min(req, math.MaxUint32)), uint32(min(fail, math.MaxUint32))
	if v := uint64(failures)<<32 | uint64(requests); s.counts.Load() != v {
		s.counts.Store(v)
	}
	return requests, failures
}

// ejectLocked takes s out of rotation, or extends its ejection after a failed probe. The n-th
// ejection in a row lasts min(BaseEjection·2^(n−1), MaxEjection), where n is the previous
// ejection's n minus one per Window spent in rotation since, plus one.
func (o *Detector) ejectLocked(s *outlierSlot, now int64) {
	wasOut := s.until.Load() != 0
	n := s.ejections
	if !wasOut && s.restoredAt != 0 {
		steps := (now - s.restoredAt) / o.window
		n = int32(max(0, int64(n)-steps))
	}
	n = min(n+1, o.maxN)
	s.ejections = n
	d := o.ejection(n)
	s.consec, s.consecConnect = 0, 0
	s.buckets = [outlierBuckets]outlierBucket{}
	s.counts.Store(0)
	s.lastFail.Store(0)
	s.probe.Store(0)
	s.down.Store(false) // before until: a routing.Filter that sees the new ejection sees a fresh flag
	s.until.Store(max(now+d, 1))
	if !wasOut {
		o.out.Add(1)
	}
	o.ejections.Add(1)
	s.ejected.Add(1)
}

// restoreLocked returns s to rotation; its ejection ended at u.
func (o *Detector) restoreLocked(s *outlierSlot, u, now int64) {
	s.until.Store(0)
	s.probe.Store(0)
	s.down.Store(false)
	s.consec, s.consecConnect = 0, 0
	s.buckets = [outlierBuckets]outlierBucket{}
	s.counts.Store(0)
	s.lastFail.Store(0)
	s.settled = u
	s.restoredAt = now
	o.out.Add(-1)
}

// restoredLocked is restoreLocked of a backend a successful probe brought back: counted.
func (o *Detector) restoredLocked(s *outlierSlot, u, now int64) {
	o.restoreLocked(s, u, now)
	o.restored.Add(1)
	s.restored.Add(1)
}

// slotLocked returns the slot of id, growing the table to hold it.
func (o *Detector) slotLocked(id routing.BackendID) *outlierSlot {
	d := o.dir.Load()
	if s := d.slot(id); s != nil {
		return s
	}
	nd := &outlierDir{}
	if d != nil {
		nd.chunks = append(nd.chunks, d.chunks...)
	}
	for len(nd.chunks) <= int(id/outlierChunk) {
		nd.chunks = append(nd.chunks, new([outlierChunk]outlierSlot))
	}
	o.dir.Store(nd)
	return nd.slot(id)
}

// sweepLocked runs at most once per Window: it returns to rotation half-open backends left
// unprobed for MaxEjection, and forgets backends without an outcome for ten Windows. O(table).
func (o *Detector) sweepLocked(now int64) {
	if now < o.nextSweep {
		return
	}
	o.nextSweep = now + o.window
	d := o.dir.Load()
	if d == nil {
		return
	}
	for _, c := range d.chunks {
		for i := range c {
			s := &c[i]
			if u := s.until.Load(); u != 0 {
				p := s.probe.Load()
				unprobed := p == 0 || now-p >= o.probeTimeout
				if o.active.Load() {
					// The checker probes ejected backends every second or so: one it has not
					// reported on for MaxEjection (it stopped, or the backend left its
					// targets) returns, as with passive health alone.
					unprobed = now-s.lastProbed >= o.max
				}
				if now-u >= o.max && unprobed {
					o.restoreLocked(s, u, now)
				}
				continue
			}
			if s.known && now-s.lastDone > outlierForgetWindows*o.window {
				s.known = false
				o.known--
			}
		}
	}
}

// BackendHealth is one backend's passive-health counters (see [Detector.BackendStats]).
type BackendHealth struct {
	// Ejections and Probes count the backend's ejections (a failed probe's re-ejection
	// included) and the requests sent to it as probes.
	Ejections, Probes uint64
	// Ejected reports whether it is out of rotation now (ejected or half-open).
	Ejected bool
	// Until is when its ejection lasts to while Ejected (at or before the present:
	// half-open, awaiting a successful probe); zero while it is in rotation.
	Until time.Time
	// Restored counts the successful probes (a user request's, or with active checks an
	// active probe's, see [Detector.Probed]) that returned it to rotation.
	Restored uint64
	// LastSuccess is when a request or an active probe of the backend last succeeded; zero if
	// none did.
	LastSuccess time.Time
}

// BackendStats returns backend id's counters; zero for a backend the Detector never heard of.
// O(1), lock-free.
func (o *Detector) BackendStats(id routing.BackendID) BackendHealth {
	s := o.dir.Load().slot(id)
	if s == nil {
		return BackendHealth{}
	}
	h := BackendHealth{Ejections: s.ejected.Load(), Probes: s.probed.Load(), Restored: s.restored.Load()}
	if u := s.until.Load(); u != 0 {
		h.Ejected, h.Until = true, time.Unix(0, u)
	}
	if v := s.served.Load(); v != 0 {
		h.LastSuccess = time.Unix(0, v)
	}
	return h
}

// Stats returns the Detector's counters. O(1), lock-free.
func (o *Detector) Stats() Stats {
	return Stats{
		Ejections:   o.ejections.Load(),
		Probes:      o.probes.Load(),
		Restored:    o.restored.Load(),
		Fallbacks:   o.fallbacks.Load(),
		Suppressed:  o.suppressed.Load(),
		EarlyProbes: o.early.Load(),
		Ejected:     int(o.out.Load()),
		Stalled:     o.stalled.Load(),
	}
}

// HealthFilter returns a filter that drops unhealthy backends and routes around backends whose
// signals are stale:
//
//   - A backend marked [routing.Unhealthy] is always dropped.
//   - A backend whose signals are stale (older than [routing.Options].StaleAfter) or were never
//     observed is dropped while at least one candidate with fresh signals remains. When every
//     remaining candidate is stale — the scraper is down, not the fleet — they are all kept
//     rather than failing every request. Their stale signals are then imputed by the load
//     scorers, never read as zero load or as saturation.
//
// A [routing.Router] knows this filter: when nothing is stale or unhealthy, a pick skips it.
// O(n), no allocation. Safe for concurrent use.
func HealthFilter() routing.Filter { return hook.HealthFilter().(routing.Filter) }

// Of returns the first [Detector] among r's filters (see [With]), or nil: its per-backend
// counters are what a gateway exports. O(filters); it allocates.
func Of(r *routing.Router) *Detector {
	for _, f := range hook.Filters(r) {
		if d, ok := f.(*Detector); ok {
			return d
		}
	}
	return nil
}

// A Detector returns a subset of the candidates it is given, unchanged: a health filter after
// it may be skipped when nothing is stale or unhealthy.
func init() {
	hook.SubsetFilter = func(f any) bool {
		_, ok := f.(*Detector)
		return ok
	}
}
