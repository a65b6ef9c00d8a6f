package replica

import (
	"context"

	"github.com/usher-llm/usher/metrics"
	"github.com/usher-llm/usher/proxy"
)

// Extension returns r as a proxy.Extension, the way a gateway built on proxy.Handler uses a
// replica (opts.Extensions = append(opts.Extensions, replica.Extension(r))):
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
func Extension(r *Replica) proxy.Extension { return extension{r} }

type extension struct{ r *Replica }

func (e extension) Prepare(d *proxy.Defaults) error {
	d.Index.Feed = e.r.PrefixFeed()
	d.Session.Seed, d.Session.Feed = e.r.SessionSeed(), e.r.SessionFeed()
	return nil
}

func (e extension) Attach(h *proxy.Handler) error {
	parts := Parts{Index: h.Index(), Router: h.Router()}
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

func (e extension) Run(ctx context.Context) error { return e.r.Run(ctx) }

func (extension) Close() error { return nil }

func (extension) Gauges(*metrics.Gateway) {}
