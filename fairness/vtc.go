package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// VTCOptions configures VTC. The zero value is the paper's weights.
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

// VTC is the virtual token counter of Sheng et al. (OSDI 2024): each flow has a counter of
// the weighted tokens it was served (prompt × 1, output × 2); the backlogged flow with the
// smallest counter goes next; a flow that becomes backlogged again has its counter lifted to
// the smallest counter of the flows backlogged in its band (to the counter of the flow that
// last left the backlog when there is none), so that idling earns no credit. Requests of a
// flow go in arrival order.
//
// Service is charged as the queue observes it: the prompt estimate (Request.PromptTokens)
// at dispatch; at completion the actual output tokens and the difference between actual
// and estimated prompt (Usage). Counters are fixed-point integers (1/1024 of a weighted
// token), so virtual time does not drift with float rounding.
//
// Its promise, the paper's bound adapted to a queue with up to k requests in flight: while
// two flows f and g are both backlogged, their counters differ by at most (k+1)·U, and the
// service they receive over any interval in which both stay backlogged differs by at most
// 2·(k+1)·U, where U is the largest weighted cost of one request (with exact prompt
// estimates; an estimate error adds to U). TestVTCBound checks this on a fake clock.
//
// FlowKey is the flow's own counter, which changes only at the flow's own dispatches and
// completions, so the queue orders flows in a heap; the lift uses a heap of the backlogged
// flows. O(log flows) per event, allocation-free in steady state. Flows are keyed by flow
// id and band.
//
// A VTC serves one queue; it is not safe for concurrent use except through the queue.
type VTC struct {
	wp, wo int64
	flows  table[vtcState]
	bands  []vtcBand
	pool   nodePool
}

type vtcState struct {
	counter int64
	n       *node // in the band's backlog heap while the flow has requests queued
}

type vtcBand struct {
	backlog  nodeHeap // backlogged flows by counter (key.Tie)
	lastLeft int64    // counter of the flow that last left the backlog
}

var (
	_ flowcontrol.Policy = (*VTC)(nil)
	_ flowcontrol.Ranker = (*VTC)(nil)
)

// NewVTC returns a VTC policy, or an error wrapping ErrInvalidOptions.
func NewVTC(o VTCOptions) (*VTC, error) {
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
	return &VTC{
		wp:    int64(math.Round(o.PromptWeight * vtcScale)),
		wo:    int64(math.Round(o.OutputWeight * vtcScale)),
		flows: newTable[vtcState](m.MaxIdle, m.Forget),
	}, nil
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *VTC) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the flow's counter; valid until the flow is charged again. O(1).
func (p *VTC) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return flowcontrol.Key{Tie: p.flows.use(refOf(f)).counter}, time.Time{}
}

// Rank is the flow key the request's flow would have: its counter, lifted as Observe would
// lift it if the flow is not backlogged; no class. O(1); the policy's state is not changed.
func (p *VTC) Rank(_ *flowcontrol.Request, f *flowcontrol.FlowState, _ time.Time) flowcontrol.Rank {
	var c int64
	s := p.flows.get(refOf(f))
	if s != nil {
		c = s.counter
	}
	if (s == nil || s.n == nil) && f.Band < len(p.bands) {
		bd := &p.bands[f.Band]
		floor := bd.lastLeft
		if bd.backlog.len() > 0 {
			floor = bd.backlog.top().key.Tie
		}
		c = max(c, floor)
	}
	return flowcontrol.Rank{Key: flowcontrol.Key{Tie: c}}
}

func (p *VTC) band(b int) *vtcBand {
	for len(p.bands) <= b {
		p.bands = append(p.bands, vtcBand{})
	}
	return &p.bands[b]
}

// Observe lifts returning flows and charges service. O(log flows) amortised.
func (p *VTC) Observe(e *flowcontrol.Event) {
	f := e.Flow
	s := p.flows.use(refOf(f))
	bd := p.band(f.Band)
	switch e.Kind {
	case flowcontrol.EventEnqueue:
		if s.n == nil { // the flow becomes backlogged
			floor := bd.lastLeft
			if bd.backlog.len() > 0 {
				floor = bd.backlog.top().key.Tie
			}
			s.counter = max(s.counter, floor)
			s.n = p.pool.get()
			s.n.key.Tie = s.counter
			bd.backlog.push(s.n)
		}
	case flowcontrol.EventDispatch:
		p.add(s, bd, satMul(int64(e.Request.PromptTokens), p.wp))
	case flowcontrol.EventDone:
		u := e.Usage
		p.add(s, bd, satMul(int64(u.OutputTokens), p.wo)+satMul(int64(u.PromptTokens-e.Request.PromptTokens), p.wp))
	}
	if f.Queued == 0 && s.n != nil { // the flow leaves the backlog
		bd.backlog.remove(s.n)
		p.pool.put(s.n)
		s.n = nil
		bd.lastLeft = s.counter
	}
	p.flows.settle(f, e.Now.UnixNano())
}

func (p *VTC) add(s *vtcState, bd *vtcBand, c int64) {
	s.counter = max(s.counter+c, 0)
	if s.n != nil {
		s.n.key.Tie = s.counter
		bd.backlog.fix(s.n)
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
func (p *VTC) Counter(id flowcontrol.FlowID, band int) (float64, bool) {
	s := p.flows.get(flowRef{id, band})
	if s == nil {
		return 0, false
	}
	return float64(s.counter) / vtcScale, true
}
