package fairness

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
)

// fcfs is the policy FCFS returns.
type fcfs struct{}

// ItemKey orders by arrival. O(1).
func (fcfs) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tie: r.Arrival.UnixNano()}
}

// FlowKey is the head request's key, valid forever. O(1).
func (fcfs) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (fcfs) Observe(*flowcontrol.Event) {}

// strictPriority is the policy StrictPriority returns.
type strictPriority struct{}

// ItemKey orders by descending Priority, then arrival. O(1).
func (strictPriority) ItemKey(r *flowcontrol.Request, _ *flowcontrol.FlowState, _ time.Time) flowcontrol.Key {
	return flowcontrol.Key{Tier: -int64(r.Priority), Tie: r.Arrival.UnixNano()}
}

// FlowKey is the head request's key, valid forever. O(1).
func (strictPriority) FlowKey(f *flowcontrol.FlowState, _ time.Time) (flowcontrol.Key, time.Time) {
	return f.HeadKey, time.Time{}
}

// Observe does nothing.
func (strictPriority) Observe(*flowcontrol.Event) {}

// Rank places r by its item key among flows keyed by their heads, with no class. O(1).
func (p strictPriority) Rank(r *flowcontrol.Request, f *flowcontrol.FlowState, now time.Time) flowcontrol.Rank {
	return flowcontrol.Rank{Key: headKeyWith(f, p.ItemKey(r, f, now))}
}

// headKeyWith is, for a policy whose flow key is its head request's item key (FCFS,
// StrictPriority, EDF), the key flow f would have once a request with item key k joined it:
// k if the request becomes the head (f is empty or k comes before its head's key), f's
// current key otherwise. A Ranker's helper. O(1).
func headKeyWith(f *flowcontrol.FlowState, k flowcontrol.Key) flowcontrol.Key {
	if f.Head == nil || sanitizeKey(k).Less(f.HeadKey) {
		return k
	}
	return f.HeadKey
}
