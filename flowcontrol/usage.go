package flowcontrol

import "time"

// UsageDelta is the usage one flow accrued on one gateway replica since the previous
// exchange, in the units of the policy that keeps it (for example tokens of service for VTC
// and LAS, completed turns for turn priority).
type UsageDelta struct {
	Flow   FlowID
	Band   int
	Amount float64
}

// UsageSharer is implemented by a Policy whose order depends on per-flow usage, so that
// gateway replicas can make a tenant's share global by exchanging what each charged
// (package replica does this over Redis). Both methods are called with the queue's lock
// held, like the rest of the Policy; a Queue re-keys the flows that ApplyUsageDeltas
// touched.
type UsageSharer interface {
	// AppendUsageDeltas appends, for each flow whose usage grew on this replica since the
	// previous call, the growth, and forgets it.
	AppendUsageDeltas(dst []UsageDelta, now time.Time) []UsageDelta
	// ApplyUsageDeltas charges usage that other replicas accrued, as if it had been charged
	// here (but without reporting it back through AppendUsageDeltas). A delta that is not
	// finite and positive, or names a band the policy does not know, is ignored.
	ApplyUsageDeltas(ds []UsageDelta, now time.Time)
}

// AppendUsageDeltas appends the policy's usage deltas since the previous call (see
// UsageSharer), or returns dst unchanged when the policy keeps no shareable usage.
// O(flows charged since the previous call).
func (q *Queue) AppendUsageDeltas(dst []UsageDelta) []UsageDelta {
	us, ok := q.policy.(UsageSharer)
	if !ok {
		return dst
	}
	q.mu.Lock()
	dst = us.AppendUsageDeltas(dst, q.nowLocked())
	q.unlock()
	return dst
}

// ApplyUsageDeltas charges other replicas' usage to the policy (see UsageSharer) and re-keys
// the waiting flows it names, so that the next dispatch follows the global usage. A policy
// that keeps no shareable usage ignores it. O(len(ds) log n).
func (q *Queue) ApplyUsageDeltas(ds []UsageDelta) {
	us, ok := q.policy.(UsageSharer)
	if !ok || len(ds) == 0 {
		return
	}
	q.mu.Lock()
	now := q.nowLocked()
	us.ApplyUsageDeltas(ds, now)
	for _, d := range ds {
		if d.Band < 0 || d.Band >= len(q.bands) {
			continue
		}
		bd := &q.bands[d.Band]
		if f := bd.flows.get(d.Flow, flowHash(q.seed, d.Flow)); f != nil && f.st.Queued > 0 {
			q.keyFlowLocked(f, bd, now)
		}
	}
	q.runLocked(now)
	q.unlock()
}

// Reconfigure runs fn with the queue's lock held, so that fn may change configuration the
// queue reads under it — a ConcurrencyLimit's Limit, say, as a replication layer does to give
// each replica its share of a global limit — and then dispatches what now fits. fn must not
// call the Queue.
func (q *Queue) Reconfigure(fn func()) {
	q.mu.Lock()
	fn()
	q.runLocked(q.nowLocked())
	q.unlock()
}
