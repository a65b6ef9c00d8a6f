package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/internal/glue/replicapeer"
)

// quotaStore is the cluster's quota counters in Redis, as replicapeer.Replica's Quota (which
// gateway/replicaext gives the gateway's quota Limiter as a quota.Shared).
//
// Each Sync is one round trip: one script, run atomically by Redis, sets this replica's
// cumulative use of each counter in its window and returns the cluster's totals (see the
// package doc, "Quotas"). It is bounded by ctx and Options.IOTimeout; its errors count in
// Stats.Errors. Live is this replica and the peers it last saw alive: while Redis is
// unreachable it keeps its last value, so each replica goes on enforcing its share of a limit
// rather than all of it. Safe for concurrent use; Syncs are serialized.
type quotaStore struct {
	r      *Replica
	prefix string // usher:{cluster}:quota:
	// self names this process's fields in the counters: the replica id and a random
	// incarnation, so that a gateway restarted under the same id adds to what its
	// predecessor counted rather than overwriting it.
	self   string
	script *redis.Script

	mu sync.Mutex
	// cum is this replica's cumulative use of each counter, as Redis last acknowledged it;
	// entries leave once their window's key has expired (sweep).
	cum       map[counterID]cumulative
	next      []cumulative // cum plus this Sync's deltas, per counter sent, committed on success
	keys      []string
	args      []any
	lastSweep time.Time
}

type counterID struct {
	key    string
	window int64
}

// cumulative is this replica's use of one counter, and when the counter's key expires (Unix
// ms).
type cumulative struct {
	replicapeer.QuotaTotals
	expires int64
}

// quotaScript sets this replica's cumulative use of each counter (fields r:<id> and t:<id>
// of the counter's hash), adds the difference from what it had set before to the
// counter's totals (fields r and t), extends the key's life to its window's end plus the
// grace, and returns the totals, two integers per key. Setting a cumulative value rather
// than adding a delta makes a Sync idempotent — a Sync whose answer was lost is sent again
// without counting twice — and lets each replica restore its part of the totals after
// Redis lost them (a restart without persistence, a failover).
//
// KEYS: the counters. ARGV: the replica's fields' suffix, then per key its requests, tokens and the key's
// expiry (Unix ms).
const quotaScript = `
local fr, ft = 'r:' .. ARGV[1], 't:' .. ARGV[1]
local out = {}
for i, k in ipairs(KEYS) do
  local a = 3 * i - 1
  local r, t = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local old = redis.call('HMGET', k, fr, ft)
  local dr, dt = r - (tonumber(old[1]) or 0), t - (tonumber(old[2]) or 0)
  if dr ~= 0 or dt ~= 0 then
    redis.call('HSET', k, fr, ARGV[a], ft, ARGV[a + 1])
    out[2 * i - 1] = redis.call('HINCRBY', k, 'r', dr)
    out[2 * i] = redis.call('HINCRBY', k, 't', dt)
    redis.call('PEXPIREAT', k, ARGV[a + 2])
  else
    local cur = redis.call('HMGET', k, 'r', 't')
    out[2 * i - 1], out[2 * i] = tonumber(cur[1]) or 0, tonumber(cur[2]) or 0
  end
end
return out
`

// quotaGrace is how long a counter outlives its window, at most: time for the replicas'
// last Syncs of the window and for their clocks to disagree. A window of span s is kept
// min(s, quotaGrace) past its end.
const quotaGrace = time.Minute

func newQuotaStore(r *Replica) *quotaStore {
	var b [4]byte
	rand.Read(b[:])
	return &quotaStore{
		r:      r,
		prefix: "usher:{" + r.o.Cluster + "}:quota:",
		self:   r.o.ID + ":" + hex.EncodeToString(b[:]),
		script: redis.NewScript(quotaScript),
		cum:    make(map[counterID]cumulative),
	}
}

// Live implements replicapeer.Quota: this replica and its live peers, as last seen. O(1).
func (q *quotaStore) Live() int { return int(max(q.r.live.Load(), 1)) }

// Sync implements replicapeer.Quota: one EVALSHA (a SCRIPT LOAD first when Redis does not know the
// script, after a restart or SCRIPT FLUSH) over all the deltas' counters, O(len(deltas)) here
// and in Redis. Deltas for the same counter in one call are added together. On error nothing
// is counted: the caller sends the deltas again with the next Sync.
func (q *quotaStore) Sync(ctx context.Context, deltas []replicapeer.QuotaDelta) ([]replicapeer.QuotaTotals, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.r.o.Now()
	q.sweepLocked(now)

	// Each counter's new cumulative use: what Redis acknowledged plus this call's deltas.
	// at maps a counter to its slot in keys (a counter named twice is sent once).
	q.keys, q.args, q.next = q.keys[:0], append(q.args[:0], q.self), q.next[:0]
	slot := make([]int, len(deltas))
	at := make(map[counterID]int, len(deltas))
	for i, d := range deltas {
		id := counterID{d.Key, d.Window}
		j, ok := at[id]
		if !ok {
			j = len(q.keys)
			at[id] = j
			q.keys = append(q.keys, q.prefix+d.Key+":"+strconv.FormatInt(d.Window, 10))
			c := q.cum[id]
			c.expires = d.Window + expiryAfter(d.Span).Milliseconds()
			q.next = append(q.next, c)
			q.args = append(q.args, nil, nil, c.expires)
		}
		q.next[j].Requests += d.Requests
		q.next[j].Tokens += d.Tokens
		slot[i] = j
	}
	for j, c := range q.next {
		q.args[1+3*j], q.args[2+3*j] = c.Requests, c.Tokens
	}

	cctx, cancel := context.WithTimeout(ctx, q.r.o.IOTimeout)
	defer cancel()
	res, err := q.script.EvalSha(cctx, q.r.o.Client, q.keys, q.args...).Int64Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = q.script.Load(cctx, q.r.o.Client).Err(); err == nil {
			res, err = q.script.EvalSha(cctx, q.r.o.Client, q.keys, q.args...).Int64Slice()
		}
	}
	q.r.outcome(err)
	if err == nil && len(res) != 2*len(q.keys) {
		err = fmt.Errorf("%w: quota script returned %d values for %d counters", ErrBadPayload, len(res), len(q.keys))
	}
	if err != nil {
		return nil, fmt.Errorf("replica: quota sync: %w", err)
	}
	for id, j := range at {
		q.cum[id] = q.next[j]
	}
	totals := make([]replicapeer.QuotaTotals, len(deltas))
	for i, j := range slot {
		totals[i] = replicapeer.QuotaTotals{Requests: res[2*j], Tokens: res[2*j+1]}
	}
	return totals, nil
}

// expiryAfter is how long after its window's start a counter of span s is kept: the window
// and min(s, quotaGrace).
func expiryAfter(s time.Duration) time.Duration {
	return max(s, 0) + min(max(s, time.Second), quotaGrace)
}

// sweepLocked forgets the cumulative use of counters whose keys have expired, at most once a
// second; O(counters).
func (q *quotaStore) sweepLocked(now time.Time) {
	if now.Sub(q.lastSweep) < time.Second {
		return
	}
	q.lastSweep = now
	ms := now.UnixMilli()
	for id, c := range q.cum {
		if c.expires < ms {
			delete(q.cum, id)
		}
	}
}
