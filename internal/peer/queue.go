package peer

import "time"

// UsageDelta is the usage one flow accrued on one gateway replica since the previous
// exchange, in the units of the policy that keeps it (tokens of service for VTC and LAS,
// completed turns for turn priority). Flow is the flow's flowcontrol.FlowID.
type UsageDelta struct {
	Flow   string
	Band   int
	Amount float64
}

// UsageSharer is implemented by a flowcontrol.Policy whose order depends on per-flow usage
// (package fairness's VTC, LAS, turn priority, hierarchy and bounded wait), so that gateway
// replicas can make a tenant's share global by exchanging what each charged. Both methods
// are called with the queue's lock held, like the rest of the policy.
type UsageSharer interface {
	// AppendUsageDeltas appends, for each flow whose usage grew on this replica since the
	// previous call, the growth, and forgets it.
	AppendUsageDeltas(dst []UsageDelta, now time.Time) []UsageDelta
	// ApplyUsageDeltas charges usage that other replicas accrued, as if it had been charged
	// here (but without reporting it back through AppendUsageDeltas). A delta that is not
	// finite and positive, or names a band the policy does not know, is ignored.
	ApplyUsageDeltas(ds []UsageDelta, now time.Time)
}

// Installed by package flowcontrol; queue is a *flowcontrol.Queue.
var (
	// AppendUsage appends the queue's policy's usage deltas since the previous call, or
	// returns dst unchanged when the policy is not a UsageSharer. O(flows charged since the
	// previous call).
	AppendUsage func(queue any, dst []UsageDelta) []UsageDelta
	// ApplyUsage charges other replicas' usage to the queue's policy and re-keys the waiting
	// flows it names, so that the next dispatch follows the global usage; a policy that is
	// not a UsageSharer ignores it. O(len(ds) log n).
	ApplyUsage func(queue any, ds []UsageDelta)
	// SetMaxInFlight changes the queue's limit on requests in flight (its
	// Options.MaxInFlight; zero: none), as a replication layer does to give each replica its
	// share of a global limit, and dispatches what now fits.
	SetMaxInFlight func(queue any, n int)
)
