package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
)

// VTCOptions configures NewVTC. The zero value is the paper's weights.
type VTCOptions struct {
	// PromptWeight and OutputWeight price a token of prompt and of output; zero means 1
	// and 2. They are held in fixed point with a resolution of 1/1024.
	PromptWeight, OutputWeight float64
	// Memory bounds the per-flow history; Memory.Forget defaults to one hour.
	Memory Memory
}

// vtcScale is the fixed-point scale of VTC counters: one unit of weighted service (one
// prompt token at weight 1) is vtcScale counter units.
const vtcScale = 1024

// vTC is the policy NewVTC returns.
type vtcPolicy struct {
	wp, wo int64
	flows  table[vtcState]
	bands  []vtcBand
	pool   nodePool
}

type vtcState struct {
	counter int64
	n       *node // in the band's backlog heap while the flow has requests queued
	// peer: another replica has charged the flow (since this one remembers it), so it may be
	// backlogged there.
	peer bool
}

type vtcBand struct {
	backlog  nodeHeap // backlogged flows by counter (key.Tie)
	lastLeft int64    // counter of the flow that last left the backlog
	inFlight int      // requests of the band dispatched and not done
	maxCost  int64    // U: about the largest weighted cost of a request completed lately
}

var (
	_ flowcontrol.Policy = (*vtcPolicy)(nil)
	_ flowcontrol.Ranker = (*vtcPolicy)(nil)
	_ peer.UsageSharer   = (*vtcPolicy)(nil)
)

// newVTC builds the policy NewVTC returns.
func newVTC(o VTCOptions) (*vtcPolicy, error) {
	if o.PromptWeight < 0 || o.OutputWeight < 0 || o.PromptWeight > 1<<20 || o.OutputWeight > 1<<20 {
		return nil, invalid("VTC weights must be in [0, 2^20]")
	}
	if o.PromptWeight == 0 {
		o.PromptWeight = 1
	}
	if o.OutputWeight == 0 {
		o.OutputWeight = 2
	}
	m, err := o.Memory.resolve(time.Hour)
	if err != nil {
		return nil, err
	}
	return &vtcPolicy{
		wp:    int64(math.Round(o.PromptWeight * vtcScale)),
		wo:    int64(math.Round(o.OutputWeight * vtcScale)),
		flows: newTable[vtcState](m.MaxIdle, m.Forget),
	}, nil
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *vtcPolicy) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the flow's counter; valid until the flow is charged again. O(1).
func (p *vtcPolicy) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return flowcontrol.Key{Tie: p.flows.use(refOf(f)).counter}, time.Time{}
}

// Rank is the flow key the request's flow would have: its counter, lifted as Observe would
// lift it if the flow is not backlogged; no class. O(1); the policy's state is not changed.
func (p *vtcPolicy) Rank(_ *flowcontrol.Request, f *flowcontrol.FlowState, _ time.Time) flowcontrol.Rank {
	var c int64
	s := p.flows.get(refOf(f))
	if s != nil {
		c = s.counter
	}
	if (s == nil || s.n == nil) && f.Band < len(p.bands) {
		c = max(c, p.bands[f.Band].floor(s != nil && s.peer))
	}
	return flowcontrol.Rank{Key: flowcontrol.Key{Tie: c}}
}

// floor is the counter a flow that becomes backlogged is lifted to: the smallest counter of
// the band's backlogged flows, or the counter of the flow that last left the backlog. For a
// flow another replica has charged (peer) it is lower by (k+1)·U, with k the band's requests
// in flight here and U about the largest cost of a request completed in the band lately (the
// largest, decaying by 1/64 per completion): that flow may be backlogged at the peer, and a
// backlogged flow of a VTC trails the smallest counter by at most about that much (the
// paper's bound), so lifting it further would take away service it is owed, not credit it
// banked by idling. O(1).
func (bd *vtcBand) floor(peer bool) int64 {
	f := bd.lastLeft
	if bd.backlog.len() > 0 {
		f = bd.backlog.top().key.Tie
	}
	if peer {
		f -= satMul(int64(bd.inFlight)+1, bd.maxCost)
	}
	return f
}

func (p *vtcPolicy) band(b int) *vtcBand {
	for len(p.bands) <= b {
		p.bands = append(p.bands, vtcBand{})
	}
	return &p.bands[b]
}

// Observe lifts returning flows and charges service. O(log flows) amortised.
func (p *vtcPolicy) Observe(e *flowcontrol.Event) {
	f := e.Flow
	s, i := p.flows.useAt(refOf(f))
	bd := p.band(f.Band)
	switch e.Kind {
	case flowcontrol.EventEnqueue:
		if s.n == nil { // the flow becomes backlogged
			s.counter = max(s.counter, bd.floor(s.peer))
			s.n = p.pool.get()
			s.n.key.Tie = s.counter
			bd.backlog.push(s.n)
		}
	case flowcontrol.EventDispatch:
		bd.inFlight++
		p.charge(s, i, bd, satMul(int64(e.Request.PromptTokens), p.wp))
	case flowcontrol.EventDone:
		u := e.Usage
		bd.inFlight = max(bd.inFlight-1, 0)
		// U decays by 1/64 per completion, so that one huge request does not widen the
		// floor for good.
		bd.maxCost = max(bd.maxCost-bd.maxCost>>6, satMul(int64(u.PromptTokens), p.wp)+satMul(int64(u.OutputTokens), p.wo))
		p.charge(s, i, bd, satMul(int64(u.OutputTokens), p.wo)+satMul(int64(u.PromptTokens-e.Request.PromptTokens), p.wp))
	}
	if f.Queued == 0 && s.n != nil { // the flow leaves the backlog
		bd.backlog.remove(s.n)
		p.pool.put(s.n)
		s.n = nil
		bd.lastLeft = s.counter
	}
	p.flows.settle(f, e.Now.UnixNano())
}

// charge adds c to the counter of the flow in slot i and to its unreported growth.
func (p *vtcPolicy) charge(s *vtcState, i int32, bd *vtcBand, c int64) {
	if c == 0 {
		return
	}
	*p.flows.grow(i) += float64(c)
	p.add(s, bd, c)
}

// add adds c (|c| ≤ MaxInt64/4, see satMul) to a counter, which stays in [0, MaxInt64/2] so
// that no number of charges — a peer's deltas included — wraps it; bd is the flow's band,
// needed only while the flow is backlogged.
func (p *vtcPolicy) add(s *vtcState, bd *vtcBand, c int64) {
	s.counter = min(max(s.counter+c, 0), math.MaxInt64/2)
	if s.n != nil {
		s.n.key.Tie = s.counter
		bd.backlog.fix(s.n)
	}
}

// AppendUsageDeltas appends, for every flow charged since the previous call, the weighted
// tokens it was charged (corrections included; a flow whose corrections outweigh its charges
// carries the difference into the next call), and forgets them. O(flows charged).
func (p *vtcPolicy) AppendUsageDeltas(dst []peer.UsageDelta, _ time.Time) []peer.UsageDelta {
	return p.flows.report(dst, func(grown float64, _ *vtcState) float64 { return grown / vtcScale })
}

// ApplyUsageDeltas adds other replicas' charges (weighted tokens) to the flows' counters, as
// Observe adds a local charge but without reporting it back; a flow this policy does not
// remember is created idle, as after a charge, within Memory. Deltas that are not finite
// and positive, or name a negative band, are ignored. The queue re-keys the waiting flows
// named. O(len(ds) · log flows).
func (p *vtcPolicy) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	ns := now.UnixNano()
	for k := range ds {
		d := &ds[k]
		if !usable(d) {
			continue
		}
		c := int64(math.Round(min(d.Amount*vtcScale, math.MaxInt64/4)))
		if c <= 0 {
			continue
		}
		s := p.flows.touch(deltaRef(d), ns)
		var bd *vtcBand
		if s.n != nil { // backlogged, so the band exists
			bd = &p.bands[d.Band]
		}
		s.peer = true
		p.add(s, bd, c)
	}
}

// satMul multiplies token counts by fixed-point weights, saturating instead of wrapping.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > 0 && a > math.MaxInt64/4/b {
		return math.MaxInt64 / 4
	}
	if a < 0 && -a > math.MaxInt64/4/b {
		return -math.MaxInt64 / 4
	}
	return a * b
}

// Counter returns flow (id, band)'s counter in weighted tokens, and false if the flow is
// not remembered. Call it only while the queue is idle or from the goroutine operating it.
// O(1).
func (p *vtcPolicy) Counter(id flowcontrol.FlowID, band int) (float64, bool) {
	s := p.flows.get(flowRef{id, band})
	if s == nil {
		return 0, false
	}
	return float64(s.counter) / vtcScale, true
}
