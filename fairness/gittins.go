package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// GittinsOptions configures NewGittins. The zero value learns from the sessions it sees, with
// LAS's token weights, and bounds no wait.
type GittinsOptions struct {
	// PromptWeight and OutputWeight price a token of prompt and of output in a session's
	// service; zero means 1 and 2 (LAS's weights).
	PromptWeight, OutputWeight float64
	// HalfLife is the fading of the learned distribution, in ended sessions: a session that
	// ended HalfLife sessions ago counts half as much as one that ends now. Zero means 300.
	HalfLife int
	// MinSessions is how many sessions must have ended before the learned distribution
	// replaces the prior (an exponential one: every session has the same index, so the order
	// is first come, first served). Zero means 200.
	MinSessions int
	// RebuildEvery is how many ended sessions pass between rebuilds of the index table (at
	// least a quarter of the waiting flows, so that re-keying them stays amortised). Zero
	// means 64.
	RebuildEvery int
	// Wait and Headroom bound the wait as BoundedWaitOptions does: a request that has waited
	// Wait − Headroom is promoted to the urgent tier. Zero Wait bounds nothing. Set it when
	// requests carry a TTL: the index rightly ranks the longest sessions last where the
	// hazard falls with service, and without a bound some of their turns wait out the TTL
	// (the agentic control abandons 4.8% of sessions without one, none with W = 10 s; see
	// the package doc).
	Wait, Headroom time.Duration
	// Memory bounds the per-session history. Memory.Forget is also the idle limit after
	// which a session counts as ended for good (its total service is then an observation); it
	// defaults to 120 s, llm-d's turn reset. A session idle for a shorter limit (four times
	// the median gap after which sessions returned; at least Forget/16 until 64 sessions have
	// returned) is counted as ended at once, and the count is taken back if it returns.
	Memory Memory
}

// The service axis is cut into log-spaced bins: bin 0 is [0, gBase), bin i ≥ 1 is
// [gBase·2^((i−1)/gPerOctave), gBase·2^(i/gPerOctave)), the last bin unbounded.
// gittinsHalfLife is GittinsOptions.HalfLife's default, in ended sessions: an effective
// sample of about 430 sessions (KS noise about 0.04), and a workload that changes is
// followed within 2,000 ended sessions (the old one then weighs 1%).
const gittinsHalfLife = 300

const (
	gBase      = 64.0 // weighted tokens
	gPerOctave = 4
	gBins      = 1 + 26*gPerOctave // up to 64·2^26 ≈ 4.3e9 weighted tokens
)

// gEdges[i] is the lower edge of bin i; gEdges[gBins] closes the last bin for the index
// computation (it is open-ended for binning).
var gEdges = func() (e [gBins + 1]float64) {
	for i := 1; i <= gBins; i++ {
		e[i] = gBase * math.Exp2(float64(i-1)/gPerOctave)
	}
	return e
}()

// gWidth[b] is the width of bin b for the keys' interpolation: 0 for the first and the last
// bin, in which keys do not interpolate.
var gWidth = func() (w [gBins]float64) {
	for b := 1; b < gBins-1; b++ {
		w[b] = gEdges[b+1] - gEdges[b]
	}
	return w
}()

// gQuarter are the bin edges within an octave, 2^(k/4) for k = 1, 2, 3.
var gQuarter = [3]float64{math.Exp2(0.25), math.Exp2(0.5), math.Exp2(0.75)}

// gBin is the bin of service x: its octave from the float's exponent, its quarter by
// comparison, no logarithm. O(1).
func gBin(x float64) int {
	if !(x >= gBase) {
		return 0
	}
	if x >= gEdges[gBins-1] {
		return gBins - 1 // +Inf included
	}
	frac, exp := math.Frexp(x / gBase) // x/gBase = frac·2^exp, frac in [0.5, 1)
	m, q := 2*frac, 0                  // in [1, 2), octave exp − 1
	for q < 3 && m >= gQuarter[q] {
		q++
	}
	return 1 + (exp-1)*gPerOctave + q
}

// gState is a session's history.
type gState struct {
	service float64 // weighted tokens attained, current (corrections included)
	reached int32   // 1 + the highest bin reached; 0 before any service
	keyBin  int32   // gBin(service), the bin its key reads
	waiting bool    // the flow had queued requests after its latest event
	idled   bool    // it became idle after its latest event (its slot's idleSince says when)
	// provisional: the session has been idle past the policy's provisional limit and is
	// counted in the model as ended, at stamp (model.ended then), until it returns (the end is
	// taken back) or is forgotten (nothing more is counted).
	provisional bool
	node        *node // the flow's node in the BoundedWait that wraps the core, while it has requests queued
	stamp       int64
}

// gModel learns the distribution of a session's total service from sessions that ended,
// counting those still open as censored: per bin b, entered[b] is the (faded) number of
// sessions known to have been at risk in b — that passed b or ended in it — and died[b] the
// number that ended in b; the hazard of bin b is died[b]/entered[b] (the discrete
// Kaplan–Meier estimator). An open session counts in the bins it has passed, not yet in the
// one it is in: its fate there is unknown until it passes it or ends. Counting it there at
// once, as the textbook estimator counts a censored observation, is biased here, because a
// session is known to have ended only an idle limit after its last turn: every session that
// ended within the last idle limit would count as at risk in its last bin and not as ended,
// and with a long limit (minutes, thousands of sessions) those dominate the faded sample and
// every hazard comes out too low. Fading weighs a count made when k sessions had ended by
// 2^((k − base)/halfLife), each count at the time it is made — a pass when the session
// passes, an end when it is known — so that passes, known at once, and ends, known an idle
// limit late, are two steady streams whose faded ratio is the hazard (weighing an end by the
// time its session entered the bin would make the recent passes outweigh the late ends).
type gModel struct {
	entered, died [gBins]float64
	ended         int64   // sessions ended
	base          int64   // the ended count at which a weight is 1
	halfLife      float64 // in ended sessions
}

func (m *gModel) weight(k int64) float64 { return math.Exp2(float64(k-m.base) / m.halfLife) }

// reach records that s's service, positive, reached bin b: the bins before b it had not
// passed are entered (survived). O(bins crossed).
func (m *gModel) reach(s *gState, b int32) {
	if b < s.reached {
		return
	}
	w := m.weight(m.ended)
	for i := max(s.reached-1, 0); i < b; i++ {
		m.entered[i] += w // the bin it was in and those it crossed, passed
	}
	s.reached = b + 1
}

// end records that s ended with the service it has, in the bin it was in. O(1) amortised.
func (m *gModel) end(s *gState) {
	if s.reached == 0 {
		return // never served: no observation
	}
	w := m.weight(m.ended)
	m.entered[s.reached-1] += w
	m.died[s.reached-1] += w
	m.ended++
	if d := m.ended - m.base; float64(d) >= 16*m.halfLife { // keep the weights in range
		f := m.weight(m.base) / m.weight(m.ended)
		for i := range m.entered {
			m.entered[i] *= f
			m.died[i] *= f
		}
		m.base = m.ended
	}
}

// unend takes back the end that end counted for s at stamp (the ended count then): s has
// returned. The counts lose exactly the weight they gained — a weight is relative to base, and
// a rescale since scaled it with them — and the ended count steps back, so that a model that
// counted the end and took it back, with nothing in between, equals one that never counted
// it. O(1).
func (m *gModel) unend(s *gState, stamp int64) {
	w := m.weight(stamp)
	b := s.reached - 1
	m.entered[b] = max(m.entered[b]-w, 0)
	m.died[b] = max(m.died[b]-w, 0)
	m.ended--
}

// hazards fills h with the hazard of each bin: a bin nobody reached takes the hazard of the
// bin before (a constant hazard beyond the data), the last bin 1. O(bins).
func (m *gModel) hazards(h *[gBins]float64) {
	prev := 0.5
	for i := range h {
		if m.entered[i] > 0 {
			prev = min(m.died[i]/m.entered[i], 1)
		}
		h[i] = prev
	}
	h[gBins-1] = 1
}

// survival fills s with P(S ≥ gEdges[i]) for i in [0, gBins]. O(bins).
func (m *gModel) survival(s *[gBins + 1]float64) {
	var h [gBins]float64
	m.hazards(&h)
	s[0] = 1
	for i := range h {
		s[i+1] = s[i] * (1 - h[i])
	}
}

// gittinsIndex fills idx[b] with the Gittins index of a session that has attained gEdges[b],
// given the hazards h of the bins (the hazard rate constant within a bin, so that an
// exponential distribution has a constant index):
//
//	idx[b] = max over j > b of P(S < e_j | S ≥ e_b) / E[min(S, e_j) − e_b | S ≥ e_b],
//
// the sup over Δ taken at the bins' edges. O(bins²).
func gittinsIndex(h *[gBins]float64, idx *[gBins]float64) {
	for b := range idx {
		best, s, area := 0.0, 1.0, 0.0
		for j := b; j < gBins; j++ {
			next := s * (1 - h[j])
			area += s * binArea(gEdges[j+1]-gEdges[j], h[j])
			if area > 0 {
				best = max(best, (1-next)/area)
			}
			s = next
			if s == 0 {
				break
			}
		}
		idx[b] = best
	}
}

// binArea is E[time spent in a bin of width w | it is entered] when its hazard (the chance to
// end in it) is h and the hazard rate is constant within it: w·h/(−ln(1−h)); w for h = 0, and
// w/2 (a uniform end within the bin) for h = 1.
func binArea(w, h float64) float64 {
	switch {
	case h <= 0:
		return w
	case h >= 1:
		return w / 2
	}
	return w * h / -math.Log1p(-h)
}

// gittinsPolicy is the policy NewGittins returns: a boundedWait over the keyed core, for its
// own order of the waiting flows (re-keyed when the index table changes) and the optional
// wait bound, without the usage sharing a boundedWait forwards (the core keeps none).
type gittinsPolicy struct{ bw *boundedWait }

var (
	_ flowcontrol.Policy     = (*gittinsPolicy)(nil)
	_ flowcontrol.FlowPicker = (*gittinsPolicy)(nil)
	_ flowcontrol.Ranker     = (*gittinsPolicy)(nil)
)

// ItemKey orders a flow's requests by arrival. O(1).
func (p *gittinsPolicy) ItemKey(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	return p.bw.ItemKey(r, f, now)
}

// FlowKey is the flow's key: minus its index, or the urgent tier once promoted. O(1).
func (p *gittinsPolicy) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	return p.bw.FlowKey(f, now)
}

// Observe charges service, records ended sessions and keeps the order. O(log flows) amortised.
func (p *gittinsPolicy) Observe(e *flowcontrol.Event) { p.bw.Observe(e) }

// PickFlow re-keys the waiting flows if the index table changed, then returns the best.
// O(1), O(flows · log flows) after a rebuild.
func (p *gittinsPolicy) PickFlow(band int, flows []*flowcontrol.FlowState, now time.Time) (flowcontrol.FlowID, bool) {
	return p.bw.PickFlow(band, flows, now)
}

// Rank is where the request would stand. O(1).
func (p *gittinsPolicy) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	return p.bw.Rank(r, f, now)
}

// Ahead counts the requests served before a flow of key k (the queue's wait estimate).
func (p *gittinsPolicy) Ahead(band int, k flowcontrol.Key, limit int) (int, bool) {
	return p.bw.Ahead(band, k, limit)
}

// gittins is the keyed core of the policy NewGittins returns (which wraps it in a
// boundedWait for its own order, bounded wait and re-keying).
type gittins struct {
	wp, wo     float64
	minEnded   int64
	every      int64
	flows      table[gState]
	model      gModel
	idx        [gBins]float64 // the published index table, by bin
	slope      [gBins]float64 // (idx[b+1] − idx[b]) / gWidth[b] for the bins keys interpolate in, else 0
	learned    bool           // idx is the learned one (not the prior)
	gen        uint64         // incremented when idx changes
	lastBuild  int64          // model.ended at the last rebuild
	waitingNow int            // flows with queued requests
	// Provisional ends: a session idle for longer than provisional (ns, at most the table's
	// forget; see observeGap) is counted as ended at once and taken back if it returns. idleQ
	// is a ring of the sessions that became idle, oldest first (qHead its first entry, qLen
	// how many), checked against their slot when due (a stale entry, whose session returned
	// or was forgotten since, is skipped, and dropped when the ring fills; see pushIdle).
	provisional int64
	forget      int64   // ns, the table's
	gap         float64 // ns, running median of the idle gaps of sessions that returned (0: none yet)
	gaps        int64   // idle gaps observed
	idleQ       []idleEntry
	qHead, qLen int
	// Slot hints, checked before use (a slot may have been recycled since): that of the
	// latest event's flow, whose FlowKey usually follows, of the flow of the event before,
	// and one the wrapping BoundedWait sets for the next event.
	lastSlot, prevSlot, hint int32
}

// idleEntry is a session that became idle: its slot and flow, and when.
type idleEntry struct {
	slot  int32
	ref   flowRef
	since int64
}

// generation is incremented each time the index table changes: the keys of waiting flows
// are then stale and the wrapper re-keys them.
func (p *gittins) generation() uint64 { return p.gen }

// newGittins builds the keyed core.
func newGittins(o GittinsOptions) (*gittins, error) {
	if o.PromptWeight < 0 || o.OutputWeight < 0 || o.HalfLife < 0 || o.MinSessions < 0 || o.RebuildEvery < 0 {
		return nil, invalid("negative Gittins option")
	}
	if o.PromptWeight == 0 {
		o.PromptWeight = 1
	}
	if o.OutputWeight == 0 {
		o.OutputWeight = 2
	}
	if o.HalfLife == 0 {
		o.HalfLife = gittinsHalfLife
	}
	if o.MinSessions == 0 {
		o.MinSessions = 200
	}
	if o.RebuildEvery == 0 {
		o.RebuildEvery = 64
	}
	m, err := o.Memory.resolve(120 * time.Second)
	if err != nil {
		return nil, err
	}
	p := &gittins{
		wp: o.PromptWeight, wo: o.OutputWeight, minEnded: int64(o.MinSessions), every: int64(o.RebuildEvery),
		flows:       newTable[gState](m.MaxIdle, m.Forget),
		model:       gModel{halfLife: float64(o.HalfLife)},
		hint:        -1,
		forget:      int64(m.Forget),
		provisional: int64(m.Forget) / gittinsProvisional,
	}
	for i := range p.idx {
		p.idx[i] = 1 // the exponential prior: a constant index
	}
	p.flows.onForget = p.forgotten
	return p, nil
}

// The provisional limit, after which an idle session is counted as ended at once (and taken
// back if it returns), so that the model learns ends sooner than the table forgets them:
// gittinsGaps times the median idle gap of the sessions that returned, at most Memory.Forget,
// and at least Memory.Forget/gittinsProvisional until gittinsGapsKnown gaps have been seen.
// A limit well above the gaps rarely counts a session that will return (each such count
// biases the hazard of its bin up until it is taken back); the floor keeps the first few gaps,
// from which the running median starts, from making it so. Once the median has had
// gittinsGapsKnown steps (enough to move it 1.02^64 ≈ 3.5 times from where it started) the
// floor goes: kept, it set the limit whenever the gaps were short against Forget (the trace's
// sessions at a 10-minute Forget in bench/gittins-curves.sh: 37.5 s against 4 × 1.6 s), and
// the sessions that ended within the limit have their passes counted and not yet their ends,
// so the hazards are ratios of passes and ends partly from different sessions: noise that
// grows with the limit against the half-life (there about 230 ended sessions against 300).
// The trace's KS distance after 2,000 ended sessions at 10 minutes was 0.062 with the floor
// and is 0.049 without, that at 1 minute (0.049; the faded empirical distribution of the
// same 2,000 sessions is 0.049, the plain one 0.020); over 100 draws of the sessions, mean
// 0.0282 → 0.0276, 3 → 1 past 0.05. No other cell of the test moved past 0.05, and the
// simulator's runs are unchanged (the floor only binds there before 64 gaps).
// Measured (bench/gittins-curves.sh, the simulator's trace-sessions ×3) in issue 45.
const (
	gittinsProvisional = 16
	gittinsGapsKnown   = 64
	gittinsGaps        = 4
	gittinsGapStep     = 1.02 // the median's multiplicative step per observed gap
)

// observeGap updates the running median of the returning sessions' idle gaps (a
// multiplicative stochastic approximation: up a step when a gap is longer, down when
// shorter) and the provisional limit. O(1).
func (p *gittins) observeGap(g int64) {
	switch {
	case p.gap == 0:
		p.gap = float64(g)
	case float64(g) > p.gap:
		p.gap *= gittinsGapStep
	default:
		p.gap /= gittinsGapStep
	}
	p.gaps++
	floor := int64(0)
	if p.gaps < gittinsGapsKnown {
		floor = p.forget / gittinsProvisional
	}
	p.provisional = min(max(int64(gittinsGaps*p.gap), floor), p.forget)
}

// forgotten is told of a session the table forgets: it has been idle for Memory.Forget (or
// was pushed out by Memory.MaxIdle), so its service is its total. A session already counted
// provisionally is not counted again. O(1) amortised.
func (p *gittins) forgotten(s *gState) {
	if !s.provisional {
		p.ended(s)
	}
}

// ended records that session s ended, then rebuilds the index table when due. O(1)
// amortised: a rebuild, O(bins²), happens at most every RebuildEvery ended sessions and
// every quarter of the waiting flows.
func (p *gittins) ended(s *gState) {
	p.model.end(s)
	e := p.model.ended
	if e < p.minEnded || e-p.lastBuild < max(p.every, int64(p.waitingNow/4)) {
		return
	}
	p.lastBuild = e
	var h [gBins]float64
	p.model.hazards(&h)
	var idx [gBins]float64
	gittinsIndex(&h, &idx)
	if idx != p.idx || !p.learned {
		p.idx, p.learned = idx, true
		for b := 1; b < gBins-1; b++ {
			p.slope[b] = (idx[b+1] - idx[b]) / gWidth[b]
		}
		p.gen++
	}
}

// key is the flow key of session s (nil: no service yet) with head arrival a: minus its
// index, interpolated linearly between the index at its bin's lower edge and at the next, so
// that within a bin the order still follows service (shorter first where the index falls with
// service, as LAS's; longer first where it rises). O(1).
func (p *gittins) key(s *gState, a int64) flowcontrol.Key {
	if s == nil {
		return flowcontrol.Key{Value: -p.idx[0], Tie: a}
	}
	b := s.keyBin
	v := p.idx[b] + p.slope[b]*min(max(s.service-gEdges[b], 0), gWidth[b])
	return flowcontrol.Key{Value: -v, Tie: a}
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *gittins) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is minus the session's index at its attained service, then its head's arrival;
// valid until the session is charged again or the table is rebuilt. O(1).
func (p *gittins) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return p.key(p.state(refOf(f)), f.Head.Arrival.UnixNano()), time.Time{}
}

// state is r's state, nil if r is not remembered; the flow of the latest event is found
// without a map look-up. O(1).
func (p *gittins) state(r flowRef) *gState {
	if i := p.lastSlot; int(i) < len(p.flows.slots) && p.flows.slots[i].ref == r {
		return &p.flows.slots[i].s // a free slot's ref is no flow's
	}
	return p.flows.get(r)
}

// Rank is the flow key the request's flow would have. O(1); the state is not changed.
func (p *gittins) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, _ time.Time) flowcontrol.Rank {
	return flowcontrol.Rank{Key: p.key(p.state(refOf(f)), headArrival(r, f))}
}

// Observe charges service as LAS does (prompt estimate at dispatch, output and prompt
// correction at completion), without decay: a session's service is its total. O(1)
// amortised.
func (p *gittins) Observe(e *flowcontrol.Event) {
	ref := refOf(e.Flow)
	// The flow's slot is often one of three known ones, which saves the map look-up: the one
	// its BoundedWait node remembers, that of the latest event (a flow's key is read right after
	// its event) or of the one before (a completion, the dispatch it allows, then the
	// completed flow's next request).
	s, i := p.flows.useHint(ref, p.hint, p.lastSlot, p.prevSlot)
	if s.idled { // it returned (the table keeps idleSince after it unlinks the slot)
		p.observeGap(e.Now.UnixNano() - p.flows.slots[i].idleSince)
		s.idled = false
	}
	if s.provisional { // it had not ended
		s.provisional = false
		p.model.unend(s, s.stamp)
	}
	var c float64
	switch e.Kind {
	case flowcontrol.EventDispatch:
		c = p.wp * float64(e.Request.PromptTokens)
	case flowcontrol.EventDone:
		c = p.wo*float64(e.Usage.OutputTokens) + p.wp*float64(e.Usage.PromptTokens-e.Request.PromptTokens)
	}
	if c != 0 {
		s.service = max(s.service+c, 0)
		s.keyBin = int32(gBin(s.service))
		if s.service > 0 {
			p.model.reach(s, s.keyBin)
		}
	}
	if w := e.Flow.Queued > 0; w != s.waiting {
		s.waiting = w
		if w {
			p.waitingNow++
		} else {
			p.waitingNow--
		}
	}
	now := e.Now.UnixNano()
	p.flows.settleAt(e.Flow, i, now)
	if sl := &p.flows.slots[i]; sl.ref == ref && sl.idle && sl.idleSince == now {
		p.pushIdle(idleEntry{i, ref, now}) // it just became idle
		sl.s.idled = true
	}
	p.provisionalEnds(now)
	if i != p.lastSlot {
		p.prevSlot, p.lastSlot = p.lastSlot, i
	}
	p.hint = -1
}

// pushIdle appends a session that just became idle to the ring. When the ring is full it
// first drops the entries that can no longer count (see pending), keeping the order, and
// doubles only if that leaves it more than half full: the ring stays within twice the most
// idle sessions the table held, whatever the rate of turns, and stops allocating once it
// reaches that. O(1) amortised: a compaction of n entries frees n/2 pushed since the last.
func (p *gittins) pushIdle(e idleEntry) {
	if p.qLen == len(p.idleQ) {
		n := 0
		for k := range p.qLen {
			if x := p.idleQ[(p.qHead+k)%len(p.idleQ)]; p.pending(x) {
				p.idleQ[(p.qHead+n)%len(p.idleQ)] = x
				n++
			}
		}
		p.qLen = n
		if 2*n >= len(p.idleQ) { // unroll into a ring twice the size
			q := make([]idleEntry, max(2*len(p.idleQ), 16))
			for k := range n {
				q[k] = p.idleQ[(p.qHead+k)%len(p.idleQ)]
			}
			p.idleQ, p.qHead = q, 0
		}
	}
	p.idleQ[(p.qHead+p.qLen)%len(p.idleQ)] = e
	p.qLen++
}

// pending reports whether ring entry e may still be counted: its session is still idle
// since e.since, was served and is not counted yet (not returned since, not forgotten).
func (p *gittins) pending(e idleEntry) bool {
	sl := &p.flows.slots[e.slot]
	return sl.ref == e.ref && sl.idle && sl.idleSince == e.since && !sl.s.provisional && sl.s.reached != 0
}

// provisionalEnds counts as ended the sessions idle for longer than the provisional limit
// at now, oldest first, skipping entries whose session has since returned or been forgotten.
// O(1) amortised: each entry is pushed once and popped once.
func (p *gittins) provisionalEnds(now int64) {
	for p.qLen > 0 {
		e := p.idleQ[p.qHead]
		if now-e.since <= p.provisional {
			return
		}
		p.qHead++
		if p.qHead == len(p.idleQ) {
			p.qHead = 0
		}
		p.qLen--
		if !p.pending(e) {
			continue // returned, forgotten, or never served (no observation)
		}
		sl := &p.flows.slots[e.slot]
		sl.s.provisional, sl.s.stamp = true, p.model.ended
		p.ended(&sl.s)
	}
}
