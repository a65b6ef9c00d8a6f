package gateway

import (
	"context"

	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/replica"
)

// ReplicaExtension returns r as a proxy.Extension, the way a gateway built on proxy.Handler uses a
// replica (opts.Extensions = append(opts.Extensions, ReplicaExtension(r))):
//
//   - Prepare gives the default prefix index and the default router's session table r's
//     feeds (PrefixFeed; SessionSeed and SessionFeed), so that what they learn reaches the
//     peers. An Index or Router given in proxy.Options must be built with them, or what it
//     learns stays local.
//   - Attach hands r the Handler's Index, Router and session scorers, and — with the
//     default queue — its per-flow usage and its concurrency gate, whose limit
//     (MaxInFlight) then is the limit of the whole cluster, shared among the live replicas;
//     it registers r's usher_replica_sync_* series on the Handler's registry.
//   - Run runs r (Handler.Run).
func ReplicaExtension(r *replica.Replica) proxy.Extension { return replicaExtension{r} }

type replicaExtension struct{ r *replica.Replica }

func (e replicaExtension) Prepare(d *proxy.Defaults) error {
	d.Index.Feed = e.r.PrefixFeed()
	d.Session.Seed, d.Session.Feed = e.r.SessionSeed(), e.r.SessionFeed()
	return nil
}

func (e replicaExtension) Attach(h *proxy.Handler) error {
	parts := replica.Parts{Index: h.Index(), Router: h.Router()}
	if limit := h.ConcurrencyLimit(); limit != nil {
		q := h.Queue()
		parts.Usage, parts.GlobalLimit = q, limit.Limit
		parts.SetLimit = func(n int) { q.Reconfigure(func() { limit.Limit = n }) }
	}
	if err := e.r.Attach(parts); err != nil {
		return err
	}
	return h.Registry().Register(e.r)
}

func (e replicaExtension) Run(ctx context.Context) error { return e.r.Run(ctx) }

func (replicaExtension) Close() error { return nil }
