package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/internal/glue/replicapeer"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing/session"
)

// Defaults of Options.
const (
	DefaultCluster      = "usher"
	DefaultInterval     = 50 * time.Millisecond
	DefaultStreamLength = 100_000
	DefaultWarm         = 5 * time.Minute
	DefaultIOTimeout    = 250 * time.Millisecond
	DefaultBufferBytes  = 4 << 20
	// DefaultMaxPlacements bounds the session placements buffered between two flushes.
	DefaultMaxPlacements = 1 << 16
)

// ErrInvalidOptions is wrapped by New's errors, and by those of wiring the replica into a
// gateway (gateway/replicaext) after Run has started.
var ErrInvalidOptions = errors.New("replica: invalid options")

// Options configures a Replica. Zero values are the documented defaults.
type Options struct {
	// ID names this replica among its peers, unique per process: 1–128 bytes of letters,
	// digits and ".-_:". Zero: the host name, the process id and a random suffix.
	ID string
	// Client is the Redis (or Valkey) client every replica of the cluster points at.
	// Required. Its own timeouts bound each call; IOTimeout bounds them again when the
	// client honours context deadlines (redis.Options.ContextTimeoutEnabled, as the gateway
	// sets it).
	Client redis.UniversalClient
	// Cluster namespaces the keys: replicas with the same Cluster share state. Zero:
	// DefaultCluster. Same character set as ID.
	Cluster string
	// Interval is how often a replica flushes what it learnt and publishes its in-flight
	// counts, and reads its peers'. Zero: DefaultInterval (50 ms).
	Interval time.Duration
	// PeerTTL is how long a replica's published counts stay valid, and how long a replica
	// counts as alive after its last report. Zero: 10 × Interval, at least 500 ms.
	PeerTTL time.Duration
	// StreamLength is the approximate number of entries the change stream keeps (each is
	// one Interval's changes of one replica). Zero: DefaultStreamLength.
	StreamLength int64
	// Warm is how far back a starting replica reads the change stream, so that it starts
	// with the placements and prefixes its peers learnt in that window. Zero: DefaultWarm;
	// negative: only what arrives after the start.
	Warm time.Duration
	// IOTimeout bounds each Redis round trip. Zero: DefaultIOTimeout.
	IOTimeout time.Duration
	// BufferBytes bounds the prefix chains buffered between two flushes (a full buffer
	// drops, counted in Stats.Dropped). Zero: DefaultBufferBytes.
	BufferBytes int
	// Logger gets one line when Redis becomes unreachable and one when it is back. Nil:
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Stats are a Replica's counters and gauges.
type Stats struct {
	// Connected reports whether the last Redis round trip succeeded.
	Connected bool
	// Peers is the number of other replicas alive (reported within PeerTTL).
	Peers int
	// Lag is the age of the newest applied change-stream entry when it was applied: the
	// delay from a peer's flush to this replica's use of it (Redis's clock against ours).
	Lag time.Duration
	// Share is this replica's share of the cluster's concurrency limit, last given to the
	// gateway's queue (0: none given).
	Share int
	// Sent and Applied count records (chains, placements, usage deltas) written and read.
	Sent, Applied uint64
	// Errors counts failed Redis round trips; Rejected, entries or load keys that did not
	// decode (bad or foreign data, never applied); Unknown, records naming a backend this
	// replica does not know (skipped); Dropped, local changes lost to a full buffer.
	Errors, Rejected, Unknown, Dropped uint64
	// Resyncs counts the times Redis came back after being unreachable.
	Resyncs uint64
}

// Replica keeps one gateway's prefix index, router load, session placements and fairness
// usage in step with the other replicas of its cluster through Redis. All Redis I/O happens
// in Run's goroutines, off the request path: a request never waits on Redis, and when Redis
// is down or slow every replica goes on alone with what it last knew (peers' counts expire
// after PeerTTL) and catches up from the change stream when it returns.
//
// A Replica is safe for concurrent use: the feeds the gateway's index and session scorers are
// built with take any number of request goroutines and never block; Stats may be called at
// any time. A program built on proxy.Handler wires it with gateway/replicaext before Run,
// which is called once.
type Replica struct {
	o       Options
	keys    keys
	prefix  *prefixpeer.Buffer
	places  placeBuffer
	parts   replicapeer.Parts
	placers []peer.Placer // the router's session scorers (Attach)
	log     *slog.Logger
	running atomic.Bool
	quota   *quotaStore
	// live is this replica and its live peers at the last successful read of the peers (1
	// before the first): kept through outages, as the limit share is.
	live atomic.Int64

	connected                                                atomic.Bool
	peers, share                                             atomic.Int64
	lag                                                      atomic.Int64
	sent, applied, errs, rejected, unknown, dropped, resyncs atomic.Uint64
	lastPeerRead                                             atomic.Int64 // Unix ns of the last successful read of peers
	down                                                     atomic.Bool  // logged as unreachable
	downMu                                                   sync.Mutex
	upAt                                                     atomic.Int64 // when Redis was last found back, Unix ns
	// back wakes the reader from its backoff when the writer finds Redis reachable again.
	back chan struct{}
}

type keys struct {
	changes, replicas, loadPrefix string
}

// New returns a Replica for opts; it starts nothing (see Run).
func New(opts Options) (*Replica, error) {
	o := opts
	if o.Client == nil {
		return nil, fmt.Errorf("%w: no Redis client", ErrInvalidOptions)
	}
	if o.ID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		o.ID = sanitize(host) + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if err := checkName("ID", o.ID); err != nil {
		return nil, err
	}
	if err := checkName("Cluster", o.Cluster); err != nil {
		return nil, err
	}
	switch {
	case o.Interval < 0, o.PeerTTL < 0, o.StreamLength < 0, o.IOTimeout < 0, o.BufferBytes < 0:
		return nil, fmt.Errorf("%w: negative Interval, PeerTTL, StreamLength, IOTimeout or BufferBytes", ErrInvalidOptions)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.PeerTTL == 0 {
		o.PeerTTL = max(10*o.Interval, 500*time.Millisecond)
	}
	if o.StreamLength == 0 {
		o.StreamLength = DefaultStreamLength
	}
	if o.Warm == 0 {
		o.Warm = DefaultWarm
	}
	if o.IOTimeout == 0 {
		o.IOTimeout = DefaultIOTimeout
	}
	if o.BufferBytes == 0 {
		o.BufferBytes = DefaultBufferBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Replica{
		back:   make(chan struct{}, 1),
		o:      o,
		prefix: prefixpeer.NewBuffer(o.BufferBytes),
		log:    o.Logger,
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.places.max = DefaultMaxPlacements
	r.live.Store(1)
	r.quota = newQuotaStore(r)
	base := "usher:{" + o.Cluster + "}:"
	r.keys = keys{changes: base + "changes", replicas: base + "replicas", loadPrefix: base + "load:"}
	return r, nil
}

func checkName(field, s string) error {
	if len(s) == 0 || len(s) > 128 {
		return fmt.Errorf("%w: %s %q must be 1–128 bytes", ErrInvalidOptions, field, s)
	}
	for _, c := range []byte(s) {
		if !nameByte(c) {
			return fmt.Errorf("%w: %s %q: only letters, digits and .-_: are allowed", ErrInvalidOptions, field, s)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_:", c) >= 0
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !nameByte(c) {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "replica"
	}
	return string(b)
}

// sessionSeed is replicapeer.Replica's SessionSeed.
func (r *Replica) sessionSeed() uint64 {
	return xxhash.Sum64String("usher session placements:"+r.o.Cluster) | 1
}

// ID returns the replica's id.
func (r *Replica) ID() string { return r.o.ID }

// seam is a Replica as internal/glue/replicapeer hands it to the gateway that wires it.
type seam struct{ r *Replica }

func init() {
	replicapeer.Of = func(r any) replicapeer.Replica {
		rep, ok := r.(*Replica)
		if !ok {
			panic(fmt.Sprintf("replica: replicapeer.Of(%T), want a *replica.Replica", r))
		}
		return seam{rep}
	}
}

func (s seam) PrefixFeed() prefixcache.Feed                     { return s.r.prefix }
func (s seam) SessionFeed() session.Feed                        { return &s.r.places }
func (s seam) SessionSeed() uint64                              { return s.r.sessionSeed() }
func (s seam) SharedSecret(ctx context.Context) ([]byte, error) { return s.r.sharedSecret(ctx) }
func (s seam) Attach(p replicapeer.Parts) error                 { return s.r.attach(p) }
func (s seam) Quota() replicapeer.Quota                         { return s.r.quota }

// attach is replicapeer.Replica's Attach.
func (r *Replica) attach(p replicapeer.Parts) error {
	if r.running.Load() {
		return fmt.Errorf("%w: Attach after Run", ErrInvalidOptions)
	}
	r.parts = p
	if p.Router != nil {
		r.placers = peer.Placers(p.Router)
	}
	if p.Share != nil {
		r.share.Store(int64(p.Share(1)))
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (r *Replica) Stats() Stats {
	return Stats{
		Connected: r.connected.Load(),
		Peers:     int(r.peers.Load()),
		Lag:       time.Duration(r.lag.Load()),
		Share:     int(r.share.Load()),
		Sent:      r.sent.Load(),
		Applied:   r.applied.Load(),
		Errors:    r.errs.Load(),
		Rejected:  r.rejected.Load(),
		Unknown:   r.unknown.Load(),
		Dropped:   r.dropped.Load() + r.prefix.Dropped() + r.places.droppedCount(),
		Resyncs:   r.resyncs.Load(),
	}
}

// Run exchanges state with the peers until ctx is done: a writer flushes this replica's
// changes and counts every Interval and reads its peers' counts; a reader follows the change
// stream. It returns ctx's error. Redis errors never end it: they are counted, logged once
// per outage, and retried with backoff.
func (r *Replica) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrInvalidOptions)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.writeLoop(ctx) }()
	go func() { defer wg.Done(); r.readLoop(ctx) }()
	wg.Wait()
	return ctx.Err()
}

// recoveryHold is how long a recovery stands: failures within it (connections of the pool
// broken by the outage, a server still loading) count as errors but do not make a new outage.
const recoveryHold = time.Second

// outcome records a Redis round trip's result, logging an outage once, at its first failure,
// and its end once, at the first success after it. A recovery is not reversed within
// recoveryHold, so a server coming back does not flap between the two.
func (r *Replica) outcome(err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		r.connected.Store(true)
		if r.down.Load() {
			r.downMu.Lock()
			if r.down.CompareAndSwap(true, false) {
				r.upAt.Store(time.Now().UnixNano())
				r.resyncs.Add(1)
				select {
				case r.back <- struct{}{}:
				default:
				}
				r.log.Info("replica: Redis reachable again; resyncing from the change stream", "replica", r.o.ID)
			}
			r.downMu.Unlock()
		}
		return
	}
	r.errs.Add(1)
	if up := r.upAt.Load(); up != 0 && time.Since(time.Unix(0, up)) < recoveryHold {
		return // the recovery stands for now
	}
	r.connected.Store(false)
	if !r.down.Load() {
		r.downMu.Lock()
		if r.down.CompareAndSwap(false, true) {
			r.log.Warn("replica: Redis unreachable; continuing alone", "replica", r.o.ID, "err", err)
		}
		r.downMu.Unlock()
	}
}

// writeLoop flushes and publishes every Interval.
func (r *Replica) writeLoop(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	var w writer
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.flush(ctx, &w)
	}
}

// writer is the write loop's reusable scratch space.
type writer struct {
	changes []byte
	load    []byte
	loads   []peer.Load
	usage   []peer.UsageDelta
	places  []placement
	peerIDs []string
	keys    []string
	peer    []peer.Load    // the peers' counts summed per backend
	scratch []peer.Load    // one peer's counts
	at      map[string]int // backend → index in peer
	// pending holds the records of failed flushes (pendingN of them), sent with the next
	// one, up to half a payload.
	pending  []byte
	pendingN int
}

// flush sends what this replica learnt since the last flush and its in-flight counts, then
// reads the live peers and their counts.
func (r *Replica) flush(ctx context.Context, w *writer) {
	now := r.o.Now()
	n := r.encodeChanges(w)
	w.loads = w.loads[:0]
	if r.parts.Router != nil {
		w.loads = peer.AppendLoads(r.parts.Router, w.loads)
	}
	w.load = appendLoad(w.load[:0], now, w.loads)
	cctx, cancel := context.WithTimeout(ctx, r.o.IOTimeout)
	defer cancel()
	nowMs := now.UnixMilli()
	candidates := nowMs - 10*r.o.PeerTTL.Milliseconds()
	pipe := r.o.Client.Pipeline()
	if n > 0 {
		pipe.XAdd(cctx, &redis.XAddArgs{
			Stream: r.keys.changes, MaxLen: r.o.StreamLength, Approx: true,
			Values: []any{"r", r.o.ID, "d", w.changes},
		})
	}
	// A replica is alive while its load key is: Redis expires it PeerTTL after the last
	// flush, on Redis's own clock. The member set only names the candidates, with a window
	// wide enough for the replicas' clocks to disagree by seconds.
	pipe.Set(cctx, r.keys.loadPrefix+r.o.ID, w.load, r.o.PeerTTL)
	pipe.ZAdd(cctx, r.keys.replicas, redis.Z{Score: float64(nowMs), Member: r.o.ID})
	pipe.ZRemRangeByScore(cctx, r.keys.replicas, "-inf", "("+strconv.FormatInt(nowMs-100*r.o.PeerTTL.Milliseconds(), 10))
	live := pipe.ZRangeByScore(cctx, r.keys.replicas, &redis.ZRangeBy{Min: strconv.FormatInt(candidates, 10), Max: "+inf"})
	_, err := pipe.Exec(cctx)
	r.outcome(err)
	if err != nil {
		// Keep the records for the next flush, as long as they fit in half a payload: a
		// short outage loses nothing, a long one drops what it had kept (counted).
		if recs := w.changes[len(magic)+2:]; len(recs) <= MaxPayloadBytes/2 {
			w.pending, w.pendingN = append(w.pending[:0], recs...), n
		} else {
			r.dropped.Add(uint64(n))
			w.pending, w.pendingN = w.pending[:0], 0
		}
		r.expirePeers(now)
		return
	}
	w.pending, w.pendingN = w.pending[:0], 0
	r.sent.Add(uint64(n))
	w.peerIDs = w.peerIDs[:0]
	for _, id := range live.Val() {
		if id != r.o.ID {
			w.peerIDs = append(w.peerIDs, id)
		}
	}
	r.readPeers(ctx, w, now)
}

// encodeChanges drains the feeds into one change-stream payload and returns the records in
// it (0: nothing to send). A payload that would exceed MaxPayloadBytes is cut there and the
// rest counted as dropped.
func (r *Replica) encodeChanges(w *writer) int {
	w.changes = appendHeader(w.changes[:0], kindChanges)
	w.changes = append(w.changes, w.pending...)
	n := w.pendingN
	full := func() bool { return len(w.changes) > MaxPayloadBytes-64<<10 }
	r.prefix.Drain(func(backend string, chain []prefixcache.BlockHash, removed bool) {
		if full() {
			r.dropped.Add(1)
			return
		}
		rec := byte(recInsert)
		if removed {
			rec = recRemove
		}
		var ok bool
		if w.changes, ok = appendChain(w.changes, rec, backend, chain); ok {
			n++
		}
	})
	w.places = r.places.drain(w.places[:0])
	for _, p := range w.places {
		if full() {
			r.dropped.Add(1)
			continue
		}
		var ok bool
		if w.changes, ok = appendPlace(w.changes, p.session, p.backend, int(p.blocks), time.UnixMilli(p.expires)); ok {
			n++
		}
	}
	if r.parts.Queue != nil {
		w.usage = peer.AppendUsage(r.parts.Queue, w.usage[:0])
		for _, d := range w.usage {
			if full() {
				r.dropped.Add(1)
				continue
			}
			var ok bool
			if w.changes, ok = appendUsage(w.changes, d); ok {
				n++
			}
		}
	}
	return n
}

// readPeers reads the live peers' counts, gives their sum to the router and this replica's
// share of the global limit to the gate.
func (r *Replica) readPeers(ctx context.Context, w *writer, now time.Time) {
	alive := 0
	w.peer = w.peer[:0]
	if len(w.peerIDs) > 0 {
		w.keys = w.keys[:0]
		for _, id := range w.peerIDs {
			w.keys = append(w.keys, r.keys.loadPrefix+id)
		}
		cctx, cancel := context.WithTimeout(ctx, r.o.IOTimeout)
		defer cancel()
		vals, err := r.o.Client.MGet(cctx, w.keys...).Result()
		r.outcome(err)
		if err != nil {
			r.expirePeers(now)
			return
		}
		if w.at == nil {
			w.at = make(map[string]int)
		}
		clear(w.at)
		for _, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // its load key expired: that replica is gone (or was never ours)
			}
			loads, _, err := decodeLoad([]byte(str), w.scratch[:0])
			w.scratch = loads
			if err != nil {
				r.rejected.Add(1)
				continue
			}
			alive++
			for _, l := range loads {
				if i, ok := w.at[l.Backend]; ok {
					w.peer[i].Requests += l.Requests
					w.peer[i].PrefillTokens += l.PrefillTokens
					w.peer[i].Blocks += l.Blocks
					continue
				}
				w.at[l.Backend] = len(w.peer)
				w.peer = append(w.peer, l)
			}
		}
	}
	r.peers.Store(int64(alive))
	r.live.Store(int64(alive + 1))
	if r.parts.Share != nil {
		r.share.Store(int64(r.parts.Share(alive + 1)))
	}
	if r.parts.Router != nil {
		peer.SetPeerLoads(r.parts.Router, w.peer)
	}
	r.lastPeerRead.Store(now.UnixNano())
}

// expirePeers forgets the peers' counts once PeerTTL has passed since they were last read:
// the replica then goes on alone. The last share of the global limit is kept, so replicas
// that cannot see each other do not together exceed it.
func (r *Replica) expirePeers(now time.Time) {
	last := r.lastPeerRead.Load()
	if last != 0 && now.UnixNano()-last < int64(r.o.PeerTTL) {
		return
	}
	r.peers.Store(0)
	if r.parts.Router != nil {
		peer.SetPeerLoads(r.parts.Router, nil)
	}
}

// readLoop follows the change stream and applies the peers' entries.
func (r *Replica) readLoop(ctx context.Context) {
	last := "$"
	if r.o.Warm > 0 {
		last = strconv.FormatInt(r.o.Now().Add(-r.o.Warm).UnixMilli(), 10) + "-0"
	}
	block := max(4*r.o.Interval, 100*time.Millisecond)
	// The first failure after a success is retried at once: after an outage each pooled
	// connection fails once before a fresh one is dialled. Then the backoff doubles.
	backoff, fails := time.Duration(0), 0
	var a applier
	for ctx.Err() == nil {
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-r.back:
				t.Stop()
			}
		}
		cctx, cancel := context.WithTimeout(ctx, block+r.o.IOTimeout)
		res, err := r.o.Client.XRead(cctx, &redis.XReadArgs{
			Streams: []string{r.keys.changes, last}, Count: 256, Block: block,
		}).Result()
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.outcome(err)
		if err != nil && !errors.Is(err, redis.Nil) {
			if fails++; fails > 1 {
				backoff = min(max(2*backoff, 50*time.Millisecond), max(10*r.o.Interval, time.Second))
			}
			continue
		}
		backoff, fails = 0, 0
		if last == "$" && len(res) == 0 {
			// Nothing yet: keep waiting for entries after the start, not after each poll.
			if id, err := r.latestID(ctx); err == nil && id != "" {
				last = id
			}
		}
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				r.applyEntry(&a, m)
			}
		}
	}
}

// latestID returns the id of the newest entry of the change stream ("0-0" when empty).
func (r *Replica) latestID(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, r.o.IOTimeout)
	defer cancel()
	ms, err := r.o.Client.XRevRangeN(cctx, r.keys.changes, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "0-0", nil
	}
	return ms[0].ID, nil
}

// applier is the read loop's reusable scratch space.
type applier struct {
	chain []prefixcache.BlockHash
	usage []peer.UsageDelta
}

// applyEntry applies one change-stream entry of a peer; this replica's own entries and
// anything that does not decode are skipped (the latter counted as Rejected).
func (r *Replica) applyEntry(a *applier, m redis.XMessage) {
	from, _ := m.Values["r"].(string)
	data, ok := m.Values["d"].(string)
	if from == r.o.ID {
		return
	}
	if from == "" || !ok || checkName("ID", from) != nil {
		r.rejected.Add(1)
		return
	}
	if ms, ok := entryMillis(m.ID); ok {
		r.lag.Store(int64(max(r.o.Now().Sub(time.UnixMilli(ms)), 0)))
	}
	a.usage = a.usage[:0]
	var applied, unknown uint64
	err := decodeChanges([]byte(data), &a.chain, func(c *change) {
		switch c.kind {
		case recInsert, recRemove:
			ix := r.parts.Index
			if ix == nil {
				return
			}
			id, ok := ix.Lookup(c.backend)
			if !ok {
				unknown++
				return
			}
			if c.kind == recInsert {
				prefixpeer.InsertRemote(ix, id, c.chain)
			} else {
				prefixpeer.RemoveRemote(ix, id, c.chain)
			}
			applied++
		case recPlace:
			if len(r.placers) == 0 {
				return
			}
			for _, place := range r.placers {
				if known, _ := place(c.session, c.backend, c.blocks, c.expires); !known {
					unknown++
					return
				}
			}
			applied++
		case recUsage:
			if r.parts.Queue != nil {
				a.usage = append(a.usage, c.usage)
			}
		}
	})
	if len(a.usage) > 0 {
		peer.ApplyUsage(r.parts.Queue, a.usage)
		applied += uint64(len(a.usage))
	}
	r.applied.Add(applied)
	r.unknown.Add(unknown)
	if err != nil {
		r.rejected.Add(1)
	}
}

// entryMillis returns the millisecond part of a stream entry id ("1700000000000-3").
func entryMillis(id string) (int64, bool) {
	i := strings.IndexByte(id, '-')
	if i <= 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(id[:i], 10, 64)
	return ms, err == nil && ms > 0 && ms < 1<<50
}

// sharedSecret is replicapeer.Replica's SharedSecret.
func (r *Replica) sharedSecret(ctx context.Context) ([]byte, error) {
	var b [32]byte
	rand.Read(b[:])
	cctx, cancel := context.WithTimeout(ctx, r.o.IOTimeout)
	defer cancel()
	key := strings.TrimSuffix(r.keys.loadPrefix, "load:") + "tenant-secret"
	r.o.Client.SetNX(cctx, key, hex.EncodeToString(b[:]), 0)
	v, err := r.o.Client.Get(cctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("replica: shared secret: %w", err)
	}
	secret, err := hex.DecodeString(v)
	if err != nil || len(secret) != len(b) {
		return nil, fmt.Errorf("%w: %s is not a 32-byte hex secret", ErrBadPayload, key)
	}
	return secret, nil
}
