package flowcontrol

import "github.com/usher-llm/usher/internal/peer"

// The replication seam (internal/peer): a replica exchanges the policy's per-flow usage and
// sets its share of a global limit on requests in flight, off the Queue's API.

func init() {
	peer.AppendUsage = func(queue any, dst []peer.UsageDelta) []peer.UsageDelta {
		return queue.(*Queue).appendUsageDeltas(dst)
	}
	peer.ApplyUsage = func(queue any, ds []peer.UsageDelta) { queue.(*Queue).applyUsageDeltas(ds) }
	peer.SetMaxInFlight = func(queue any, n int) { queue.(*Queue).setMaxInFlight(n) }
}

// appendUsageDeltas appends the policy's usage deltas since the previous call (see
// peer.UsageSharer), or returns dst unchanged when the policy keeps no shareable usage.
// O(flows charged since the previous call).
func (q *Queue) appendUsageDeltas(dst []peer.UsageDelta) []peer.UsageDelta {
	if q.sharer == nil {
		return dst
	}
	q.mu.Lock()
	dst = q.sharer.AppendUsageDeltas(dst, q.nowLocked())
	q.unlock()
	return dst
}

// applyUsageDeltas charges other replicas' usage to the policy and re-keys the waiting flows
// it names, so that the next dispatch follows the global usage. A policy that keeps no
// shareable usage ignores it. O(len(ds) log n).
func (q *Queue) applyUsageDeltas(ds []peer.UsageDelta) {
	if q.sharer == nil || len(ds) == 0 {
		return
	}
	q.mu.Lock()
	now := q.nowLocked()
	q.sharer.ApplyUsageDeltas(ds, now)
	for _, d := range ds {
		if d.Band < 0 || d.Band >= len(q.bands) {
			continue
		}
		bd := &q.bands[d.Band]
		id := FlowID(d.Flow)
		if f := bd.flows.get(id, flowHash(q.seed, id)); f != nil && f.st.Queued > 0 {
			q.keyFlowLocked(f, bd, now)
		}
	}
	q.runLocked(now)
	q.unlock()
}

// setMaxInFlight changes Options.MaxInFlight (n ≤ 0: no limit) and dispatches what now fits.
func (q *Queue) setMaxInFlight(n int) {
	q.mu.Lock()
	q.maxInFlight = max(n, 0)
	q.runLocked(q.nowLocked())
	q.unlock()
}
