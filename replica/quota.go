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

// quotaScript sets this replica's cumulative use of each counter (fields r:<self> and
// t:<self> of the counter's hash), adds the difference from what it had set before to the
// counter's totals (fields r and t), sets the key to expire at its window's end plus the
// grace when this replica's fields are new, and returns the totals, two integers per key:
// two commands per counter (HMGET, HSET), three the first time. Setting a cumulative value rather
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
  local v = redis.call('HMGET', k, fr, ft, 'r', 't')
  local tr = (tonumber(v[3]) or 0) + r - (tonumber(v[1]) or 0)
  local tt = (tonumber(v[4]) or 0) + t - (tonumber(v[2]) or 0)
  if r ~= (tonumber(v[1]) or 0) or t ~= (tonumber(v[2]) or 0) then
    if redis.call('HSET', k, fr, ARGV[a], ft, ARGV[a + 1], 'r', tr, 't', tt) > 0 then
      redis.call('PEXPIREAT', k, ARGV[a + 2])
    end
  end
  out[2 * i - 1], out[2 * i] = tr, tt
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

// Sync implements replicapeer.Quota: one round trip of EVALSHA, one per quotaBatch counters
// (and a SCRIPT LOAD and the round trip again when Redis does not know the script, after a
// restart or SCRIPT FLUSH), O(len(deltas)) here and in Redis. Deltas for the same counter in one call are added together. On error nothing
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
	q.keys, q.args, q.next = q.keys[:0], q.args[:0], q.next[:0]
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
		q.args[3*j], q.args[3*j+1] = c.Requests, c.Tokens
	}

	cctx, cancel := context.WithTimeout(ctx, q.r.o.IOTimeout)
	defer cancel()
	res, err := q.runLocked(cctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Redis lost the script (a restart, SCRIPT FLUSH): load it and send everything
		// again, which the cumulative values make safe for the batches that did run.
		if err = q.script.Load(cctx, q.r.o.Client).Err(); err == nil {
			res, err = q.runLocked(cctx)
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

// quotaBatch bounds the counters of one script: Redis runs nothing else while a script runs,
// so a Sync of many counters is cut into scripts of this many, pipelined in one round trip.
const quotaBatch = 512

// runLocked runs the script over q.keys and q.args, quotaBatch counters a script, in one
// pipelined round trip, and returns the totals, two per counter. On error nothing is
// committed here; batches that did run have set the same cumulative values the next Sync
// sends again, so the totals count each delta once however a Sync failed.
func (q *quotaStore) runLocked(ctx context.Context) ([]int64, error) {
	pipe := q.r.o.Client.Pipeline()
	cmds := make([]*redis.Cmd, 0, (len(q.keys)+quotaBatch-1)/quotaBatch)
	for a := 0; a < len(q.keys); a += quotaBatch {
		b := min(a+quotaBatch, len(q.keys))
		args := make([]any, 0, 1+3*(b-a))
		args = append(append(args, q.self), q.args[3*a:3*b]...)
		cmds = append(cmds, q.script.EvalSha(ctx, pipe, q.keys[a:b], args...))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, c := range cmds {
			if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				return nil, err
			}
		}
		return nil, err
	}
	res := make([]int64, 0, 2*len(q.keys))
	for _, c := range cmds {
		vals, err := c.Int64Slice()
		if err != nil {
			return nil, err
		}
		res = append(res, vals...)
	}
	return res, nil
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
