package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// EDF serves, within each band, the waiting request with the earliest deadline
// (Request.Deadline, which the queue sets to Arrival + TTL when the caller left it zero),
// across all flows; equal deadlines go in enqueue order. With a uniform TTL it is FCFS.
//
// Its promise is the classical one: if some order dispatches every request by its deadline
// (given the times at which the gate admits work), EDF does too — TestEDFMeetsFeasibleDeadlines
// checks it. Under overload it degrades badly (every request may end up just late); bound
// the load with capacity limits. Stateless; O(log n) per operation; safe for concurrent use.
type EDF struct{}

var (
	_ flowcontrol.Policy = EDF{}
	_ flowcontrol.Ranker = EDF{}
)

// ItemKey orders by deadline. O(1).
func (EDF) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Deadline.UnixNano()}
}

// FlowKey is the head request's deadline. O(1).
func (EDF) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (EDF) Observe(*flowcontrol.Event) {}

// Rank is the flow key the request's flow would have, without a class: a request with an
// early deadline goes before most of a backlog, and only what is ahead of it counts. O(1).
func (p EDF) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	return flowcontrol.Rank{Key: flowcontrol.HeadKeyWith(f, p.ItemKey(r, f, now))}
}

// SLODeadlineOptions configures SLODeadline.
type SLODeadlineOptions struct {
	// TTFT is the target time to first token; required (> 0) unless Target is set.
	TTFT time.Duration
	// Target, if set, returns a request's target instead (for example per band, or growing
	// with the prompt length); it is called once per request, at enqueue, and must not
	// block. A result ≤ 0 means TTFT.
	Target func(r *flowcontrol.Request) time.Duration
}

// SLODeadline is earliest-deadline-first on a service-level deadline rather than the expiry
// deadline: a request's deadline is its arrival plus a target time to first token, so the
// request closest to missing its latency objective goes first, across all flows. Unlike EDF
// it ignores how long the caller is willing to wait; with a uniform target it is FCFS.
// Requests already past their target keep their place (most overdue first). Stateless after
// New; O(log n) per operation; safe for concurrent use if Target is.
type SLODeadline struct {
	ttft   time.Duration
	target func(*flowcontrol.Request) time.Duration
}

var _ flowcontrol.Policy = (*SLODeadline)(nil)

// NewSLODeadline returns the policy, or an error wrapping ErrInvalidOptions.
func NewSLODeadline(o SLODeadlineOptions) (*SLODeadline, error) {
	if o.TTFT < 0 || (o.TTFT == 0 && o.Target == nil) {
		return nil, invalid("SLODeadline needs TTFT > 0 or a Target function")
	}
	return &SLODeadline{ttft: o.TTFT, target: o.Target}, nil
}

// ItemKey is the request's arrival plus its target. O(1) plus Target.
func (p *SLODeadline) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	d := p.ttft
	if p.target != nil {
		if t := p.target(r); t > 0 {
			d = t
		}
	}
	return flowcontrol.Key{Tie: r.Arrival.UnixNano() + int64(d)}
}

// FlowKey is the head request's SLO deadline. O(1).
func (p *SLODeadline) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (p *SLODeadline) Observe(*flowcontrol.Event) {}

// RoundRobin serves the backlogged flows of a band in turn, one request each per round,
// requests of a flow in arrival order. A flow that becomes backlogged joins the end of the
// round. Its promise: between two dispatches of a backlogged flow, every other flow that
// stayed backlogged is served at most once — equal request counts, whatever their sizes
// (use VTC or LAS for equal tokens).
//
// It keeps a position per flow with work queued or in flight, forgotten as soon as the flow
// is idle. O(log flows) per dispatch, allocation-free in steady state. A RoundRobin serves
// one queue; it is not safe for concurrent use except through the queue.
type RoundRobin struct {
	flows table[rrState]
	next  []uint64 // per band, the next position to hand out
}

type rrState struct{ pos uint64 }

var _ flowcontrol.Policy = (*RoundRobin)(nil)

// NewRoundRobin returns a round-robin policy.
func NewRoundRobin() *RoundRobin {
	return &RoundRobin{flows: newTable[rrState](DefaultMaxIdle, 0)}
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *RoundRobin) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the flow's place in the round. O(1).
func (p *RoundRobin) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return flowcontrol.Key{Tie: int64(p.flows.use(refOf(f)).pos)}, time.Time{}
}

func (p *RoundRobin) take(band int) uint64 {
	for len(p.next) <= band {
		p.next = append(p.next, 1)
	}
	v := p.next[band]
	p.next[band]++
	return v
}

// Observe moves a flow to the end of the round when it joins or is served. O(1) amortised.
func (p *RoundRobin) Observe(e *flowcontrol.Event) {
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
