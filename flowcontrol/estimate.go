package flowcontrol

import (
	"fmt"
	"math"
	"time"
)

// The wait estimate behind early shedding (see "Early shedding" in the package
// documentation): a request's position under the policy, converted to time at the dispatch
// rate of its band and, when its policy is a Ranker that gives it a class, at that of its
// class.

// longHalfLife is the half-life of the slow rate average, in multiples of EarlyShed.HalfLife.
const longHalfLife = 4

// minRateEvidence is the decayed number of a band's dispatches below which its rate, and so
// every estimate for the band, is unknown.
const minRateEvidence = 4

// maxAhead is the number of flows ahead of a request beyond which the queue stops counting
// them and takes the whole band to be ahead (see aheadLocked).
const maxAhead = 64

// history is the dispatch-rate record of a band, or of one class of a band. served counts
// the dispatches, in the current one-second rate window, of requests that had waited; busy
// the nanoseconds of the window during which it had a request waiting (backlog: it had one
// at the end of the latest operation, since busyFrom). At each window's end both are
// folded into exponentially decayed sums, n and t with half-life EarlyShed.HalfLife, nl and
// tl with longHalfLife times that, so that n/t is the recent dispatch rate while there was a
// backlog, and nl/tl the same over a longer past.
type history struct {
	served       int
	busy         int64
	busyFrom     int64
	backlog      bool
	n, t, nl, tl float64
}

// classHistory is a band's record of one class of requests (Rank.Class): how many wait,
// and their dispatch rate.
type classHistory struct {
	queued int
	hist   history
}

// mark notes at now whether something waits and reports the change in backlog: +1 when a
// backlog starts, −1 when one ends, 0 otherwise. O(1).
func (h *history) mark(waiting bool, now int64) int {
	switch {
	case waiting && !h.backlog:
		h.backlog, h.busyFrom = true, now
		return 1
	case !waiting && h.backlog:
		h.backlog = false
		h.busy += max(now-h.busyFrom, 0)
		return -1
	}
	return 0
}

// flush counts the backlog so far as busy time of the current window. O(1).
func (h *history) flush(now int64) {
	if h.backlog {
		h.busy += max(now-h.busyFrom, 0)
		h.busyFrom = now
	}
}

// fold ends a window: its counts join the sums, decayed by decay (short) and decayLong.
// Unless keep, history starts with the first window that had a dispatch: a backlog before
// any dispatch (always in a window of its own, as the dispatch starts the next) says nothing
// about the rate. A class keeps its backlog time from the moment its band has a history:
// a class that waits while its band's other requests are served has a rate, zero.
func (h *history) fold(decay, decayLong float64, keep bool) {
	h.n = h.n*decay + float64(h.served)
	h.t = h.t*decay + float64(h.busy)
	h.nl = h.nl*decayLong + float64(h.served)
	h.tl = h.tl*decayLong + float64(h.busy)
	if !keep && h.n == 0 {
		h.t = 0
	}
	if !keep && h.nl == 0 {
		h.tl = 0
	}
	h.served, h.busy = 0, 0
}

// interval is the time between two dispatches, in ns: the shorter of the recent one and
// the long one. The rate that matters for a request is the mean over its whole wait; the
// recent rate follows a change within seconds but on a bursty workload strays ±15% in ten,
// so a request is given the benefit of the doubt unless both say it waits long. The long
// one is counted with extra dispatches more than were seen: a class's history counts one,
// so that a class nobody served yet, whose backlog is young, is not taken to be starved
// (a zero rate) until its backlog time says so. O(1).
func (h *history) interval(extra float64) float64 {
	iv := math.Inf(1)
	if h.n > 0 {
		iv = h.t / h.n
	}
	return min(iv, h.tl/(h.nl+extra))
}

// estimateBandWait estimates how long a request of band b arriving now would wait to be
// dispatched if it cannot go at once and goes behind every request waiting in bands 0..b:
// their number, plus one half (the next dispatch is due half an interval from now on
// average), times the interval between band b's recent dispatches. It is EstimateWait's
// for a policy that is not a Ranker, and its first, upper-bound estimate for one that is.
// ok is false when b is not a band or the estimate is unknown. O(b).
func (q *Queue) estimateBandWait(b int) (wait time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b < 0 || b >= len(q.bands) {
		return 0, false
	}
	q.rateTickLocked(q.nowLocked().UnixNano())
	return q.estimateLocked(b, 0, q.bands[b].queued, 0, -1)
}

// EstimateWait estimates how long r would wait to be dispatched if it were enqueued now
// and could not go at once: the estimate early shedding compares with r's budget (see
// "Early shedding" in the package documentation).
//
// The estimate counts the requests that go before r — of bands above r's, and of r's band
// those the policy orders first — plus one half (the next dispatch is due half an interval
// from now on average), times the interval between r's band's recent dispatches. That
// interval is measured only while the band had a backlog (per dispatch of one of its
// requests that had waited) and averaged exponentially with half-life EarlyShed.HalfLife
// and four times that, taking the shorter, so it is the pace at which the limits and the gate
// let the band's backlog through — what is left after the bands above took their share — not
// the arrival rate of an idle queue. Dividing the work ahead by what is left is what accounts
// for the requests of higher bands that will arrive, and overtake, while r waits.
//
// When the policy is not a Ranker, r goes behind every request waiting in bands 0..r.Band,
// which is exact for FCFS; under a policy that moves a request ahead that over-states the
// wait. For a Ranker the estimate takes r's place under the policy into account (see Rank):
//
//   - Position. Only the requests of r's band that the policy orders before r count: those
//     of the flows whose keys come before the key r's flow would have, found by a walk of
//     the band's flow heap that stops at keys that do not, and those of r's own flow if r
//     joins it behind its head. Each such flow counts with all its waiting requests. Past 64
//     flows ahead the walk stops and the whole band counts. A FlowPicker keeps its own
//     order, so the whole band counts (fairness's bounded-wait policy counts for itself).
//   - Class. Under a policy that does not serve in arrival order, later arrivals overtake a
//     waiting request: under llm-d's turn-priority every later turn that arrives goes
//     before a waiting newcomer, which starves however few are ahead of it now. Those
//     overtakers are accounted for as a band's are for the bands above it: the band keeps
//     the dispatch rate of each class apart, measured while the class has a backlog, and
//     the requests of r's class ahead of it, plus one half, times its class's interval is a
//     second estimate. A class the policy leaves behind shows a long interval. The estimate
//     is the larger of the two.
//   - Within. When the policy promises to serve r by deadline once it has waited
//     Rank.Within, the estimate is at most the larger of what is left of Within and r's wait
//     behind everything waiting now.
//
// Each of the two estimates is a wait r cannot beat unless requests ahead of it leave
// without being served or the pace quickens: they must all go first, at the pace the band's
// (or the class's) history shows. Later arrivals that overtake r within its class are not
// foreseen, so under such a policy the estimate errs low. "Early shedding" in the package
// documentation gives the measured error.
//
// ok is false when r is invalid (as Admit would refuse it) or when there is no rate history:
// before the first one-second window with such dispatches has ended (cold start), and again
// once less than four dispatches' worth of recent history remains after a long time without
// a backlog. Early shedding never sheds on an unknown estimate. The policy's Rank is
// consulted and nothing changes. O(bands) plus, for a Ranker, O(min(flows ahead, 64)); safe
// for concurrent use.
func (q *Queue) EstimateWait(r Request) (wait time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.nowLocked()
	if q.validateLocked(&r, now) != nil {
		return 0, false
	}
	q.rateTickLocked(now.UnixNano())
	bd := &q.bands[r.Band]
	f := bd.flows.get(r.Flow, flowHash(q.seed, r.Flow))
	rk := q.rankLocked(&r, bd, f, now)
	ahead, aheadC := q.aheadLocked(r.Band, bd, f, &rk)
	return q.estimateLocked(r.Band, rk.Class, ahead, aheadC, within(&r, &rk, now))
}

// within is the wait left, from now, until r's policy serves it by deadline (Rank.Within
// less the time r has waited already, at least zero), or −1 if it does not say.
func within(r *Request, rk *Rank, now time.Time) time.Duration {
	if rk.Within <= 0 {
		return -1
	}
	return max(rk.Within-now.Sub(r.Arrival), 0)
}

// estimateLocked estimates the wait of a request of band b and class c (0: none) that
// cannot go at once, with ahead requests of band b before it, aheadC of them of class c,
// and, unless negative, a wait of within before its policy serves it by deadline. O(b).
func (q *Queue) estimateLocked(b, c, ahead, aheadC int, within time.Duration) (time.Duration, bool) {
	bd := &q.bands[b]
	if bd.hist.n < minRateEvidence {
		return 0, false
	}
	above := 0
	for x := 0; x < b; x++ {
		above += q.bands[x].queued
	}
	iv := bd.hist.interval(0)
	ns := (float64(above+ahead) + 0.5) * iv
	if c > 0 {
		if ch := &bd.cls[c-1]; ch.hist.tl > 0 {
			ns = max(ns, float64(above)*iv+(float64(aheadC)+0.5)*ch.hist.interval(1))
		}
	}
	if within >= 0 {
		// Served by deadline from then on: behind, at most, everything waiting now.
		ns = min(ns, max(float64(within), (float64(above+bd.queued)+0.5)*iv))
	}
	if ns >= math.MaxInt64 {
		return math.MaxInt64, true
	}
	return time.Duration(ns), true
}

// rankLocked asks a Ranker policy for r's rank; the zero Rank for other policies. f is r's
// flow, nil if the queue has nothing of it. The policy sees copies in the queue's scratch
// space, so that r itself does not escape. O(1) plus the policy's call.
func (q *Queue) rankLocked(r *Request, bd *band, f *flow, now time.Time) Rank {
	if q.ranker == nil {
		return Rank{}
	}
	st := &q.scratchFlow
	if f != nil {
		st = &f.st
	} else {
		*st = FlowState{ID: r.Flow, Band: r.Band}
	}
	q.scratch = *r
	rk := q.ranker.Rank(&q.scratch, st, now)
	q.scratch, q.scratchFlow = Request{}, FlowState{}
	if rk.Class < 0 || rk.Class > MaxClasses {
		panic(fmt.Sprintf("flowcontrol: Rank returned class %d, not in [0, %d]", rk.Class, MaxClasses))
	}
	return rk
}

// aheadLocked counts the requests of band b (bd) that the policy orders before a request
// of rank rk whose flow is f (nil: a new flow), and of those the ones of class rk.Class
// (by their flows' heads): for a keyed Ranker, the requests of every flow whose heap entry
// comes before the one r's flow would have, and those of r's own flow when r joins it
// behind its head; for a positioner, the count it gives, and at most that many of the
// class; otherwise, or past maxAhead flows ahead, every request waiting in the band, and
// every one of the class. O(min(flows ahead, maxAhead)).
func (q *Queue) aheadLocked(b int, bd *band, f *flow, rk *Rank) (ahead, aheadC int) {
	ahead = bd.queued
	if rk.Class > 0 {
		aheadC = bd.cls[rk.Class-1].queued
	}
	if q.ranker == nil {
		return ahead, aheadC
	}
	if q.picker != nil {
		if q.position != nil {
			if n, ok := q.position.Ahead(b, rk.Key.sanitize(), maxAhead); ok && n < ahead {
				return n, min(aheadC, n)
			}
		}
		return ahead, aheadC
	}
	w := aheadWalk{
		h: bd.heap, e: flowEntry{key: rk.Key.sanitize(), seq: q.seq + 1},
		class: uint8(rk.Class), budget: maxAhead,
	}
	if f != nil && f.bandIdx >= 0 {
		if own := &bd.heap[f.bandIdx]; own.key == w.e.key {
			// r joins behind f's head: the flow keeps its place, and its requests are ahead.
			w.e.seq = own.seq
			w.n = f.st.Queued
			if w.class > 0 && f.items[0].class == w.class {
				w.nc = w.n
			}
		}
		w.skip = f // otherwise it is re-keyed with r as its head
	}
	if !w.from(0) {
		return ahead, aheadC
	}
	return w.n, w.nc
}

// aheadWalk counts the flows of a band's heap whose entries come before e, which is that
// of a request's flow: n the requests they hold, nc those of the flows whose head is of
// class (0: none). Every entry before e has all its ancestors before e too (they are
// smaller), so a walk from the root that stops at entries not before e visits each flow
// ahead once, and at most four more entries (its children) per flow ahead plus one. skip,
// the request's own flow, is not counted.
type aheadWalk struct {
	h      flowHeap
	e      flowEntry
	skip   *flow
	class  uint8
	budget int
	n, nc  int
}

// from walks the subtree at i; false means the budget of flows ran out. O(flows ahead in
// the subtree), recursing at most log₄(flows) deep.
func (w *aheadWalk) from(i int) bool {
	if i >= len(w.h) || !flowLess(&w.h[i], &w.e) {
		return true
	}
	if f := w.h[i].f; f != w.skip {
		if w.budget == 0 {
			return false
		}
		w.budget--
		w.n += f.st.Queued
		if w.class > 0 && f.items[0].class == w.class {
			w.nc += f.st.Queued
		}
	}
	for c := heapArity*i + 1; c <= heapArity*i+heapArity; c++ {
		if !w.from(c) {
			return false
		}
	}
	return true
}

// shedLocked reports whether early shedding refuses r, which is valid and fits capacity,
// whose rank is rk and whose flow is f (nil: new). The estimate is computed first with the
// whole band ahead, an upper bound that needs no walk; only when that exceeds the budget is
// r's position counted, and only when the refined estimate does too is the gate asked
// whether r could go at once.
func (q *Queue) shedLocked(r *Request, rk *Rank, bd *band, f *flow, now time.Time) bool {
	q.rateTickLocked(now.UnixNano())
	if bd.hist.n < minRateEvidence {
		return false // the estimate is unknown
	}
	budget := r.Deadline.Sub(now)
	if q.shed.Bound > 0 {
		budget = min(budget, q.shed.Bound-now.Sub(r.Arrival))
	}
	limit := float64(budget) * (1 + q.shed.Margin)
	aheadC := 0
	if rk.Class > 0 {
		aheadC = bd.cls[rk.Class-1].queued
	}
	wi := within(r, rk, now)
	est, ok := q.estimateLocked(r.Band, rk.Class, bd.queued, aheadC, wi)
	if !ok || float64(est) <= limit {
		return false
	}
	if q.ranker != nil && (q.picker == nil || q.position != nil) {
		ahead, aheadC := q.aheadLocked(r.Band, bd, f, rk)
		if est, _ = q.estimateLocked(r.Band, rk.Class, ahead, aheadC, wi); float64(est) <= limit {
			return false
		}
	}
	// The estimate is for a request that waits; one that goes at once waits nothing.
	q.scratch = *r // the gate gets a pointer; r itself must not escape
	atOnce := q.wouldDispatchLocked(&q.scratch)
	q.scratch = Request{}
	return !atOnce
}

// rateTickLocked ends the current one-second rate window once it is over: RetryAfter's
// count and the histories behind the wait estimate. O(1) within a window, O(bands ×
// classes) at its end.
func (q *Queue) rateTickLocked(now int64) {
	const window = int64(time.Second)
	if now-q.rateStart < window {
		return
	}
	if now-q.rateStart < 2*window {
		q.rateLast = q.rateCount
	} else {
		q.rateLast = 0
	}
	q.flushBusyLocked(now)
	dt := float64(now - q.rateStart)
	decay := math.Exp2(-dt / float64(q.shed.HalfLife))
	decayLong := math.Exp2(-dt / float64(longHalfLife*q.shed.HalfLife))
	for b := range q.bands {
		bd := &q.bands[b]
		bd.hist.fold(decay, decayLong, false)
		for i := range bd.cls {
			bd.cls[i].hist.fold(decay, decayLong, bd.hist.n > 0)
		}
	}
	q.rateStart, q.rateCount = now, 0
}

// flushBusyLocked counts the time since busyFrom as busy for the bands and classes with a
// backlog.
func (q *Queue) flushBusyLocked(now int64) {
	if q.backlogs == 0 {
		return
	}
	for b := range q.bands {
		bd := &q.bands[b]
		bd.hist.flush(now)
		for i := range bd.cls {
			bd.cls[i].hist.flush(now)
		}
	}
}

// markLocked ends an operation that may have changed what waits: it notes which bands and
// classes have a backlog, whose busy time runs until the next change, and the enqueue
// sequence reached. O(1) when nothing waits or waited, O(bands × classes) otherwise.
func (q *Queue) markLocked(now int64) {
	q.seqMark = q.seq
	if q.queued == 0 && q.backlogs == 0 {
		return
	}
	for b := range q.bands {
		bd := &q.bands[b]
		q.backlogs += bd.hist.mark(bd.queued > 0, now)
		for i := range bd.cls {
			c := &bd.cls[i]
			c.hist.mark(c.queued > 0, now)
		}
	}
}
