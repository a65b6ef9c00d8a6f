// Package replica lets several usher gateway replicas run active-active behind one Service:
// each keeps its own prefix index, router load, session table and fairness counters, and
// Redis (or Valkey) carries what each learns to the others, so that a conversation whose
// turns land on different replicas still finds its cache-warm backend, load seen by one
// replica counts for all, and a tenant's fair share is global.
//
// # What is shared, and how
//
// Every Interval (50 ms) a replica's writer does one pipelined round trip:
//
//   - XADD to the change stream usher:{cluster}:changes one entry with what this replica
//     learnt since the last flush: the prefix chains its index inserted (and retracted) with
//     the backend's name, the session placements its session scorers made, and the usage
//     each flow accrued under the queue's policy (VTC, LAS, turn counts) as deltas. The
//     stream is trimmed to about StreamLength entries.
//   - SET usher:{cluster}:load:<id> to its own in-flight counts per backend (requests,
//     uncached prefill tokens, KV blocks), expiring after PeerTTL, and ZADD its id with the
//     time to the member set usher:{cluster}:replicas.
//   - then MGET the load keys of the member set's recent replicas. A replica is alive while
//     its load key is (Redis expires it on its own clock, so the gateways' clocks need not
//     agree). The router adds the live peers' counts to its own,
//     and the concurrency gate is given this replica's share of the global limit, the limit
//     over the live replicas rounded up.
//
// A reader follows the change stream with a blocking XREAD and applies every peer's entry:
// chains go into the local index (not reported to its Feed, so nothing echoes), placements
// into the router's session tables (the later expiry wins), usage deltas into the
// policy. A replica that starts reads the stream from Warm (5 minutes) back, so it starts
// with what its peers learnt rather than cold.
//
// Matching a prefix, picking a backend and admitting a request stay local, lock-free and
// allocation-free: the request path only appends to two bounded in-memory buffers, which the
// writer drains. The cost of replication on the hot path is one more atomic load per
// candidate in Pick (the peers' counts) and a buffered copy of each inserted chain.
//
// Exact mode needs none of the prefix feed: every replica subscribes to every engine's KV
// events itself (prefixcache/kvevents), so each index follows the engines directly. Load,
// placements and usage are shared as above either way.
//
// # Quotas
//
// A gateway's quota Limiter (package proxy/quota) counts each tenant's requests and tokens per
// window locally and, every interval of its own Run, syncs what it counted with the cluster's
// counters (gateway/replicaext's Quota gives it this replica's store). A counter is a hash
// usher:{cluster}:quota:<key>:<window start, Unix ms>, under the cluster's hash tag so that
// one script's keys share a slot on a Redis Cluster. A Sync is one round trip: an EVALSHA per
// 512 counters, pipelined (the script is loaded on first use and again after NOSCRIPT: a
// restart or SCRIPT FLUSH; Redis runs nothing else during a script, hence the batches). For
// each counter the script sets this replica's cumulative use in fields r:<id>:<incarnation> and
// t:<id>:<incarnation>, adds the change to the totals in fields r and t, sets the key to
// expire at the window's end plus the span (at most a minute: time for the last Syncs and
// for the clocks to disagree), and returns the totals. Cumulative values make a Sync
// idempotent (a Sync whose answer was lost is sent again without counting twice) and let each
// replica restore its part after Redis lost the counters; the incarnation, random per process,
// keeps a gateway restarted under the same id from overwriting its predecessor's part.
//
// Cost, measured (gateway/replicaext's TestExactness with USHER_QUOTA_LONG=1: 3 replicas, 200
// requests a second each, one tenant, a 60 s window): 0.10 EVALSHA and 0.26 Redis commands
// per request for the quotas (the script's HMGET and HSET included; 0.80 with the replicas'
// own exchange), counted with INFO commandstats. A Sync goes every Interval whatever the
// traffic, so the figure per request falls as traffic rises, and grows with the tenants
// active in a window (two commands per counter). BenchmarkQuotaSync, on a loopback server
// of a loaded 2-core machine: 34 µs a Sync of 1 counter, 165 µs of 16, 1.9 ms of 256, 52 ms
// of 4096 (of which Redis's own time 9 µs, 106 µs, 1.2 ms, 37 ms).
//
// The over-grant that measured: 0.09% of the limit (a token limit of half the tokens offered),
// and 0.10% with Redis killed (SIGKILL, restarted empty) for 15 s of the window: while Sync
// fails each Limiter enforces its share of the limit, and when Redis returns each replica's
// first Sync restores its part of the totals. A store that added deltas would have lost the
// first 15 s of the window's count with the restart (by estimate some 60% of the limit,
// then granted again; not measured).
//
// The counters are fixed windows, as the Limiter's are: the window and its reset are what the
// rate-limit headers report, and a fixed window's counter takes batched deltas as they come.
// GCRA keeps one theoretical arrival time per limit that every request must move: batching
// would make it a sum of deltas in all but name, and a per-request update would put Redis on
// the request path. A sliding window costs two counters per limit for a smoother edge that
// the headers cannot express.
//
// # When Redis is down or slow
//
// No request waits on Redis and none fails because of it. Each round trip is bounded by
// IOTimeout; a failure is counted (usher_replica_sync_errors_total{kind="redis"}), logged
// once per outage, and retried with backoff. Meanwhile each replica goes on alone: its
// peers' counts expire after PeerTTL, its index and session table keep what they learnt, and
// its share of the global limit stays at the last value (so replicas that cannot see each
// other do not together exceed the limit). The changes of failed flushes are kept for the
// next, up to half a payload (2 MiB); beyond that they are dropped and counted. When Redis
// returns, the writer resumes and the reader continues the stream from the last entry it applied — or, after a Redis
// restart that lost the stream, from what arrives next.
//
// # Trust
//
// Everything read from Redis is decoded by a bounds-checked parser of a versioned binary
// format: data that is foreign, corrupt or of another version is rejected and
// counted (kind="rejected"), never applied; records naming a backend this replica does not
// know are skipped and counted (kind="unknown_backend"). Redis must still be trusted not to
// lie within the format — a writer with access to it can steer placements — so give it the
// network exposure of the gateways' own configuration.
//
// # Concurrency and goroutines
//
// New starts nothing. Run, called once after the gateway has wired the replica (see
// gateway/replicaext), runs the writer and the reader on two goroutines of its own and returns
// ctx's error after both have stopped. The feeds the gateway's index and session scorers are
// built with are safe for concurrent use by any number of request goroutines and never block;
// Stats may be called at any time.
//
// # Alternatives not taken
//
//   - Redis on the request path (a look-up per pick or admission): every request would wait on
//     the network and fail with it; here Redis carries hints, off the path.
//   - Absolute state (each replica publishing whole tables): large payloads and a merge rule per
//     kind; deltas and placements with expiries compose without one.
//   - Pub/Sub instead of a stream: a replica that restarts or falls behind loses what was sent
//     meanwhile, where a stream lets it read back Warm.
//
// # Metrics
//
// A Replica is a prometheus.Collector: usher_replica_sync_connected, _peers,
// _lag_seconds (age of the newest applied peer change), _limit_share,
// _records_total{direction}, _errors_total{kind} and _resyncs_total, each labelled with the
// replica id.
package replica
