// Package replicaext makes a [replica.Replica] a [proxy.Extension], so that a gateway built on
// [proxy.Handler], or an endpoint picker built on package proxy/extproc, shares its prefix
// index, load, sessions and fairness usage with the other replicas of its cluster through
// Redis. A program that builds its Handler in code passes [Wrap] of its replica in
// [proxy.Options].Extensions (a picker in extproc's Options.Extensions, as examples/epp does
// with -redis); a program configured by package gateway calls
// [Register] on the [proxy.Registry] it hands the configuration, which then builds the
// replica when it names a Redis server. [Quota] is the replica's store of the tenants' quota
// counters, which the replicas of a cluster then enforce together: package gateway's quota
// gets it through the extension, a quota Limiter built in code through its Options.Shared.
//
// It lives neither in package replica, which knows nothing of HTTP gateways and must not
// import proxy, nor under proxy, whose packages never link a Redis client: it is the glue
// between the two, beside the configuration that uses it, and only a program that imports it
// links go-redis.
package replicaext

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/internal/glue/proxyseam"
	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/proxy"
	"github.com/usher-llm/usher/replica"
)

// Wrap returns r as a [proxy.Extension], the way a gateway built on [proxy.Handler] uses a
// replica (opts.Extensions = append(opts.Extensions, replicaext.Wrap(r))):
//
//   - Prepare gives the default prefix index and the default router's session table r's
//     feeds (and the session-id hash key derived from the cluster's name), so that what they
//     learn reaches the peers, and the default keyer, when it has no Secret, the cluster's
//     (created in Redis by the first replica to ask, one round trip bounded by 2 s; if it fails, a
//     warning is logged with [slog.Default] and the keyer's secret stays random, so the
//     replicas name an API key's tenant differently). An Index, Router or Keyer given in
//     [proxy.Options] must be built alike, or what it learns stays local. With quotas
//     configured (package gateway), it gives the quota options without a Shared store
//     r's ([Quota]), so that the replicas hold each tenant's quota together; a Limiter given
//     in [proxy.Options].Quota must be built with it.
//   - Attach hands r the [proxy.Core]'s (the Handler's or the picker's) Index, Router and
//     session scorers, and — with the default queue — its per-flow usage and its
//     concurrency gate, whose limit (MaxInFlight; a picker's 64 per endpoint by default)
//     then is the limit of the whole cluster, shared among the live replicas; it registers
//     r's usher_replica_sync_* series on the Core's registry.
//   - Run runs r ([proxy.Handler.Run], or the picker's Run); Close does nothing.
//
// The extension is safe for concurrent use as [proxy.Extension] requires. Wrap returns the
// interface rather than a type of its own: it adds nothing to r, which the caller keeps and
// configures ([replica.New]), so Wrap has nothing to set and cannot fail.
func Wrap(r *replica.Replica) proxy.Extension { return extension{r, replicapeer.Of(r)} }

type extension struct {
	r    *replica.Replica
	peer replicapeer.Replica // r's wiring
}

func (e extension) Prepare(d *proxy.Defaults) error {
	if d.Quota != nil && d.Quota.Shared == nil {
		d.Quota.Shared = Quota(e.r)
	}
	d.Index.Feed = e.peer.PrefixFeed()
	d.Session.Seed, d.Session.Feed = e.peer.SessionSeed(), e.peer.SessionFeed()
	if d.Keyer != nil && d.Keyer.Secret == nil {
		// Replicas must name an API key's tenant alike (sessions and usage are keyed by
		// it): without a secret of their own they share one kept in Redis.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		secret, err := e.peer.SharedSecret(ctx)
		cancel()
		if err != nil {
			slog.Warn("no shared tenant secret (give every replica the same secret, e.g. -tenant-secret-file): tenants will differ between replicas", "err", err)
			return nil
		}
		d.Keyer.Secret = secret
	}
	return nil
}

func (e extension) Attach(h proxy.Core) error {
	parts := replicapeer.Parts{Index: h.Index(), Router: h.Router()}
	if share := proxyseam.LimitSharer(h); share != nil {
		parts.Queue, parts.Share = h.Queue(), share
	}
	if err := e.peer.Attach(parts); err != nil {
		return err
	}
	return h.Registry().Register(e.r)
}

func (e extension) Run(ctx context.Context) error { return e.r.Run(ctx) }

func (extension) Close() error { return nil }

// Register adds to reg the extension named "replica", which package gateway asks for when
// its configuration names a Redis server. Its params are
//
//	{"redis": "redis:6379", "replica_id": "gw-1", "cluster": "prod-a"}
//
// redis is host:port or a redis:// or rediss:// URL (required); replica_id and cluster are
// [replica.Options].ID and Cluster. Each use builds a new [replica.Replica] over a new Redis
// client that fails fast (500 ms dial, read and write timeouts, no retries: the replica
// retries off the request path), and returns it as [Wrap] does; nothing is dialled until the
// extension's Prepare or Run. A malformed address is an error wrapping
// [proxy.ErrInvalidOptions]; so is registering twice.
func Register(reg *proxy.Registry) error {
	return proxy.Register(reg, "replica", func(p proxy.Params) (proxy.Extension, error) {
		var o struct {
			Redis     string `json:"redis"`
			ReplicaID string `json:"replica_id"`
			Cluster   string `json:"cluster"`
		}
		if err := p.Decode(&o); err != nil {
			return nil, err
		}
		var ro *redis.Options
		switch {
		case o.Redis == "":
			return nil, fmt.Errorf("%w: redis: want host:port or a redis:// URL", proxy.ErrInvalidOptions)
		case strings.Contains(o.Redis, "://"):
			var err error
			if ro, err = redis.ParseURL(o.Redis); err != nil {
				return nil, fmt.Errorf("%w: redis %q: %v", proxy.ErrInvalidOptions, o.Redis, err)
			}
		default:
			if _, _, err := net.SplitHostPort(o.Redis); err != nil {
				return nil, fmt.Errorf("%w: redis %q: want host:port or a redis:// URL", proxy.ErrInvalidOptions, o.Redis)
			}
			ro = &redis.Options{Addr: o.Redis}
		}
		// Every call is off the request path and bounded again by the replica; fail fast and
		// let the replica retry rather than the client.
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		ro.MaxRetries, ro.PoolSize, ro.ContextTimeoutEnabled = -1, 4, true
		r, err := replica.New(replica.Options{ID: o.ReplicaID, Cluster: o.Cluster, Client: redis.NewClient(ro)})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", proxy.ErrInvalidOptions, err)
		}
		return Wrap(r), nil
	})
}
