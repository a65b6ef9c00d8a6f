package fairness

import (
	"math"
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/peer"
)

// TurnPriorityOptions configures NewTurnPriority. The zero value is llm-d's default.
type TurnPriorityOptions struct {
	// WaitWeight is the score added per second the flow's head request has waited; zero
	// means 0.05 (llm-d's default).
	WaitWeight float64
	// ResetAfter: a flow with nothing in flight whose last completion is more than
	// ResetAfter ago counts as turn 1 again; zero means 120 s (llm-d's default).
	ResetAfter time.Duration
	// Memory bounds the per-flow history; Memory.Forget defaults to ResetAfter, after which
	// an idle flow is at turn 1 anyway.
	Memory Memory
}

type turnState struct {
	dispatched int64 // requests of the flow dispatched since its last reset
	lastDone   int64 // unix ns of its last completion, 0 if none since the reset
	inFlight   int   // the flow's in-flight count after its latest event
}

// turnPriority is the policy NewTurnPriority returns.
type turnPriority struct {
	w     float64
	reset int64
	epoch int64
	flows table[turnState]
}

var (
	_ flowcontrol.Policy = (*turnPriority)(nil)
	_ flowcontrol.Ranker = (*turnPriority)(nil)
	_ peer.UsageSharer   = (*turnPriority)(nil)
)

// newTurnPriority builds the policy NewTurnPriority returns.
func newTurnPriority(o TurnPriorityOptions) (*turnPriority, error) {
	if o.WaitWeight < 0 || o.ResetAfter < 0 {
		return nil, invalid("negative turn-priority option")
	}
	if o.WaitWeight == 0 {
		o.WaitWeight = 0.05
	}
	if o.ResetAfter == 0 {
		o.ResetAfter = 120 * time.Second
	}
	m, err := o.Memory.resolve(o.ResetAfter)
	if err != nil {
		return nil, err
	}
	return &turnPriority{w: o.WaitWeight, reset: int64(o.ResetAfter), flows: newTable[turnState](m.MaxIdle, m.Forget)}, nil
}

// ItemKey orders a flow's requests by arrival. O(1).
func (p *turnPriority) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, now time.Time) flowcontrol.Key {
	if p.epoch == 0 {
		p.epoch = now.UnixNano()
	}
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// turn returns the flow's turn at now and the time it may reset (0: not before another
// event). inFlight is the flow's in-flight count at now.
func (p *turnPriority) turn(s *turnState, inFlight int, now int64) (turn, until int64) {
	if s.lastDone != 0 && inFlight == 0 {
		if now-s.lastDone > p.reset {
			*s = turnState{}
			return 1, 0
		}
		return s.dispatched + 1, s.lastDone + p.reset + 1
	}
	return s.dispatched + 1, 0
}

// FlowKey is −turn + w·(head arrival), so the highest score is the smallest key; valid
// until the flow's turn may reset. O(1).
func (p *turnPriority) FlowKey(f *flowcontrol.FlowState, now time.Time) (flowcontrol.Key, time.Time) {
	s := p.flows.use(refOf(f))
	turn, until := p.turn(s, f.InFlight, now.UnixNano())
	k := scoreKey(-float64(turn), p.w, f.Head.Arrival.UnixNano(), p.epoch)
	if until == 0 {
		return k, time.Time{}
	}
	return k, time.Unix(0, until)
}

// Rank is the flow key the request's flow would have, and a class by its turn: 1 for a
// first turn, 2 for a second, 3 for the third and fourth, 4 beyond. A deeper turn goes first
// unless the shallower one has waited 20 s longer per turn of difference (at the default
// weight), so under sustained load from deep sessions the shallower classes are served only
// when the deeper ones run dry; the queue measures each class's pace apart, and a class
// left behind shows it (see flowcontrol.Rank). O(1); the policy's state is not changed.
func (p *turnPriority) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	turn := int64(1)
	if s := p.flows.get(refOf(f)); s != nil {
		turn = p.peekTurn(s, f.InFlight, now.UnixNano())
	}
	epoch := p.epoch
	if epoch == 0 { // ItemKey will set it now
		epoch = now.UnixNano()
	}
	return flowcontrol.Rank{Key: scoreKey(-float64(turn), p.w, headArrival(r, f), epoch), Class: turnClass(turn)}
}

// peekTurn is turn without applying a due reset to s.
func (p *turnPriority) peekTurn(s *turnState, inFlight int, now int64) int64 {
	if s.lastDone != 0 && inFlight == 0 && now-s.lastDone > p.reset {
		return 1
	}
	return s.dispatched + 1
}

// turnClass is the Rank.Class of a turn: 1, 2, 3 for turns 3–4, 4 for turns 5 on.
func turnClass(turn int64) int {
	switch {
	case turn <= 2:
		return int(max(turn, 1))
	case turn <= 4:
		return 3
	}
	return 4
}

// headArrival is the arrival of flow f's head once r has joined it, for policies that
// order a flow's requests by arrival: r's when f is empty or r arrived before f's head.
func headArrival(r *flowcontrol.Request, f *flowcontrol.FlowState) int64 {
	a := r.Arrival.UnixNano()
	if f.Head != nil {
		a = min(a, f.Head.Arrival.UnixNano())
	}
	return a
}

// scoreKey turns "highest base + w·wait first" into a time-invariant key.
func scoreKey(negBase, w float64, arrival, epoch int64) flowcontrol.Key {
	return flowcontrol.Key{Value: negBase + w*float64(arrival-epoch)/1e9, Tie: arrival}
}

// Observe counts dispatches and completions. O(1) amortised.
func (p *turnPriority) Observe(e *flowcontrol.Event) {
	now := e.Now.UnixNano()
	s, i := p.flows.useAt(refOf(e.Flow))
	switch e.Kind {
	case flowcontrol.EventDispatch:
		p.turn(s, e.Flow.InFlight-1, now) // apply a reset that was due before this dispatch
		s.dispatched++
	case flowcontrol.EventDone:
		s.lastDone = now
		*p.flows.grow(i)++
	}
	s.inFlight = e.Flow.InFlight
	p.flows.settle(e.Flow, now)
}

// AppendUsageDeltas appends, for every flow with requests completed since the previous
// call, how many, and forgets them. O(flows that completed).
func (p *turnPriority) AppendUsageDeltas(dst []peer.UsageDelta, _ time.Time) []peer.UsageDelta {
	return p.flows.report(dst, func(grown float64, _ *turnState) float64 { return grown })
}

// ApplyUsageDeltas counts other replicas' completed turns (the amount rounded to a whole
// number, at least one) as turns dispatched and completed now, after applying a reset that
// was due; a flow this policy does not remember is created idle, within Memory. Deltas that
// are not finite and positive, or name a negative band, are ignored. The queue re-keys the
// waiting flows named. O(len(ds)).
func (p *turnPriority) ApplyUsageDeltas(ds []peer.UsageDelta, now time.Time) {
	ns := now.UnixNano()
	for k := range ds {
		d := &ds[k]
		if !usable(d) {
			continue
		}
		s := p.flows.touch(deltaRef(d), ns)
		p.turn(s, s.inFlight, ns)
		s.dispatched += int64(max(math.Round(min(d.Amount, 1<<32)), 1))
		s.lastDone = ns
	}
}
