package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// edf is the policy EDF returns.
type edf struct{}

var (
	_ flowcontrol.Policy = edf{}
	_ flowcontrol.Ranker = edf{}
)

// ItemKey orders by deadline. O(1).
func (edf) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Deadline.UnixNano()}
}

// FlowKey is the head request's deadline. O(1).
func (edf) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (edf) Observe(*flowcontrol.Event) {}

// Rank is the flow key the request's flow would have, without a class: a request with an
// early deadline goes before most of a backlog, and only what is ahead of it counts. O(1).
func (p edf) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	return flowcontrol.Rank{Key: headKeyWith(f, p.ItemKey(r, f, now))}
}

// SLODeadlineOptions configures NewSLODeadline.
type SLODeadlineOptions struct {
	// TTFT is the target time to first token; required (> 0) unless Target is set.
	TTFT time.Duration
	// Target, if set, returns a request's target instead (for example per band, or growing
	// with the prompt length); it is called once per request, at enqueue, and must not
	// block. A result ≤ 0 means TTFT.
	Target func(r *flowcontrol.Request) time.Duration
}

// sLODeadline is the policy NewSLODeadline returns.
type sloDeadline struct {
	ttft   time.Duration
	target func(*flowcontrol.Request) time.Duration
}

var _ flowcontrol.Policy = (*sloDeadline)(nil)

// newSLODeadline builds the policy NewSLODeadline returns.
func newSLODeadline(o SLODeadlineOptions) (*sloDeadline, error) {
	if o.TTFT < 0 || (o.TTFT == 0 && o.Target == nil) {
		return nil, invalid("SLODeadline needs TTFT > 0 or a Target function")
	}
	return &sloDeadline{ttft: o.TTFT, target: o.Target}, nil
}

// ItemKey is the request's arrival plus its target. O(1) plus Target.
func (p *sloDeadline) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	d := p.ttft
	if p.target != nil {
		if t := p.target(r); t > 0 {
			d = t
		}
	}
	return flowcontrol.Key{Tie: r.Arrival.UnixNano() + int64(d)}
}

// FlowKey is the head request's SLO deadline. O(1).
func (p *sloDeadline) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (p *sloDeadline) Observe(*flowcontrol.Event) {}

// roundRobin is the policy NewRoundRobin returns.
type roundRobin struct {
	flows table[rrState]
	next  []uint64 // per band, the next position to hand out
}

type rrState struct{ pos uint64 }

var _ flowcontrol.Policy = (*roundRobin)(nil)

// newRoundRobin builds the policy NewRoundRobin returns.
func newRoundRobin() *roundRobin {
	return &roundRobin{flows: newTable[rrState](DefaultMaxIdle, 0)}
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *roundRobin) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the flow's place in the round. O(1).
func (p *roundRobin) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return flowcontrol.Key{Tie: int64(p.flows.use(refOf(f)).pos)}, time.Time{}
}

func (p *roundRobin) take(band int) uint64 {
	for len(p.next) <= band {
		p.next = append(p.next, 1)
	}
	v := p.next[band]
	p.next[band]++
	return v
}

// Observe moves a flow to the end of the round when it joins or is served. O(1) amortised.
func (p *roundRobin) Observe(e *flowcontrol.Event) {
	f := e.Flow
	s := p.flows.use(refOf(f))
	switch e.Kind {
	case flowcontrol.EventEnqueue:
		if f.Queued == 1 {
			s.pos = p.take(f.Band)
		}
	case flowcontrol.EventDispatch:
		s.pos = p.take(f.Band)
	}
	p.flows.settle(f, e.Now.UnixNano())
}
