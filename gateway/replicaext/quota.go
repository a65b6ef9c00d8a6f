package replicaext

import (
	"context"

	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/proxy/quota"
	"github.com/usher-llm/usher/replica"
)

// Quota returns r's cluster's quota counters in Redis as the [quota.Shared] of a quota
// Limiter, so that the replicas of a cluster enforce one limit together. Every call for the
// same r returns a view of the same store.
//
//   - Sync is one round trip, off the request path: one script per 512 counters, which Redis
//     runs atomically, sets this replica's cumulative use of each counter in its window
//     and returns the cluster's totals. Sending cumulative values rather than the deltas
//     themselves makes a Sync whose answer was lost safe to send again (nothing is counted
//     twice), and lets each replica restore its part of the totals when Redis lost them (a
//     restart without persistence, a failover). Counters live under r's cluster's hash tag,
//     usher:{cluster}:quota:…, so the script's keys share a slot on a Redis Cluster, and
//     expire after their window's end plus the span, at most a minute. It is bounded by ctx
//     and [replica.Options].IOTimeout; its failures count in [replica.Stats].Errors; on
//     error nothing was counted.
//   - Live is r and the peers it last saw alive: it keeps its value while Redis is
//     unreachable, so each replica then enforces its share of a limit, not all of it. It is
//     1 until r's Run has read its peers once.
//
// The store is safe for concurrent use; Syncs are serialized, and each is O(deltas) here and
// in Redis. Quota returns the interface because the store has nothing of its own to
// configure: it is r's.
func Quota(r *replica.Replica) quota.Shared { return shared{replicapeer.Of(r).Quota()} }

// shared converts between quota's types and replicapeer's, whose fields are the same.
type shared struct{ q replicapeer.Quota }

func (s shared) Live() int { return s.q.Live() }

func (s shared) Sync(ctx context.Context, deltas []quota.Delta) ([]quota.Totals, error) {
	in := make([]replicapeer.QuotaDelta, len(deltas))
	for i, d := range deltas {
		in[i] = replicapeer.QuotaDelta(d)
	}
	out, err := s.q.Sync(ctx, in)
	if err != nil || out == nil {
		return nil, err
	}
	totals := make([]quota.Totals, len(out))
	for i, t := range out {
		totals[i] = quota.Totals(t)
	}
	return totals, nil
}
