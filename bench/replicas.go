package bench

import (
	"time"

	"github.com/usher-llm/usher/flowcontrol"
	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/internal/mix"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/session"
)

// Gateway replicas (Config.Replicas). K replicas stand behind a Kubernetes Service without
// session affinity: arrivals are dealt to them round-robin, so the turns of one conversation
// land on different replicas. Each replica is a whole gateway — a flowcontrol.Queue whose
// concurrency gate has its share of the global limit (MaxInFlight·Servers/K rounded up, as the
// replica package sets it), a routing.Router built from the same Router with a seed of its
// own, its own prefixcache.Index and session table — in front of the same servers, whose
// metrics every replica scrapes at the same instants.
//
// What one replica learns reaches the others through exactly the seams a replication layer
// (package replica) uses, so that the simulation exercises them:
//
//   - prefix chains: each index is built with prefixcache.Options.Feed = a prefixpeer.Buffer
//     (internal/glue/prefixpeer, as the replica package's); at a flush its Drain is copied
//     out, and the others apply it with prefixpeer.InsertRemote and RemoveRemote under the
//     index id Lookup gives for the backend's name;
//   - session placements: the profile is built by Router.NewReplica with SessionOptions{Seed,
//     Feed}, the same nonzero Seed on every replica; the others apply what the Feed heard
//     with LearnPlacement on each of their Profile.SessionScorers, under the router id
//     Router.Lookup gives for the name;
//   - load: Router.AppendInFlight; each replica is given the sum of the others' latest
//     counts with SetPeerInFlight;
//   - fairness usage: peer.AppendUsage, the usage each flow accrued under the replica's
//     policy since the last flush (VTC's and LAS's service, turn priority's completed turns;
//     see fairness, "Gateway replicas"); the others apply it with peer.ApplyUsage,
//     which re-keys their waiting flows. A policy that keeps no usage (FCFS, the figures'
//     policy) flushes none.
//
// Every SyncInterval (50 ms by default) every replica flushes; what it flushed is applied by every other
// replica SyncLag later (at the flush instant when SyncLag is 0), in flush order. With NoSync
// nothing is flushed. In exact mode no chain is shared — every replica's index applies every
// engine's KV events itself — and what a router predicts at pick (Dynamo's predict-on-route)
// stays with that replica, as with the replica package.
//
// Rejected: one shared index and session table for all replicas with a delay line in front
// (simpler, but it would test nothing of the seams a real deployment uses, and would hide the
// cost of K indexes evicting on their own); exchanging state at every event (no gateway can).

// gateway is one gateway replica.
type gateway struct {
	q      *flowcontrol.Queue
	router *routing.Router
	index  *prefixcache.Index     // nil with Config.NoIndex
	ixIDs  []prefixcache.HolderID // index id of each server
	tickAt time.Duration          // when the queue's tick is scheduled; -1: none

	// Shared with the other replicas (nil or empty without sync):
	feed     *prefixpeer.Buffer // chains its index learnt since the last flush (approximate mode)
	placed   *placeLog          // placements its session scorers learnt since the last flush
	sessions []peer.Placer      // its session scorers, which apply the others' placements
	latest   []peer.Load        // its in-flight counts as the others last received them
}

// syncs reports whether the replicas share state: more than one, and SyncLag not NoSync.
func (s *sim) syncs() bool { return len(s.gw) > 1 && s.cfg.SyncLag >= 0 }

// profile builds the routing profile of replica g: Router.New with one replica; with several
// and Router.NewReplica, one whose session tables hash with the seed every replica shares and,
// with sync, report to g's placement log.
func (s *sim) profile(g *gateway) routing.Profile {
	r := s.cfg.Router
	if len(s.gw) == 1 || r.NewReplica == nil {
		return r.New()
	}
	opts := session.AffinityOptions{Seed: sessionSeed(s.cfg.Seed)}
	if s.syncs() {
		g.placed = &placeLog{}
		opts.Feed = g.placed
	}
	return r.NewReplica(opts)
}

// replicaSeed is the router seed of replica k: the configuration's seed for the first (so one
// replica is today's gateway), a mix of it and k for the others, never 0 (routing reads 0 as
// "seed from the clock").
func replicaSeed(seed uint64, k int) uint64 {
	if k == 0 {
		return seed
	}
	x := mix.Mix64(seed + uint64(k)*0x9e3779b97f4a7c15)
	if x == 0 {
		x = 1
	}
	return x
}

// sessionSeed is the SessionOptions.Seed every replica of a run shares: nonzero, derived from
// the configuration's seed.
func sessionSeed(seed uint64) uint64 { return mix.Mix64(seed^0x5e55_1075_eed5_0000) | 1 }

// placement is one session placement a replica's session scorers learnt.
type placement struct {
	session uint64
	backend string
	blocks  int
	expires time.Time
}

// placeLog is the session.Feed of one replica's session scorers: the placements since
// the last flush, in pick order. It is not safe for concurrent use, which a run, in one
// goroutine, does not need (the replica package's buffer locks).
type placeLog struct{ buf []placement }

// Placed implements session.Feed. O(1) amortised.
func (l *placeLog) Placed(session uint64, backend string, blocks int, expires time.Time) {
	l.buf = append(l.buf, placement{session, backend, blocks, expires})
}

// syncState holds what the replicas flushed and the others have not applied yet.
type syncState struct {
	queue []*syncBatch // in flush order, so by due time
	head  int
	free  []*syncBatch
	peers []peer.Load // SetPeerInFlight's argument, reused

	// Applied, counted once per receiving replica.
	chains, placements, usage int64
}

// syncBatch is what one replica flushed at one instant.
type syncBatch struct {
	at       time.Duration // when the others apply it
	from     int
	changes  []chainChange
	hashes   []prefixcache.BlockHash // the changes' chains, back to back
	places   []placement
	inflight []peer.Load
	usage    []peer.UsageDelta
}

// chainChange is one chain a replica's index inserted or removed.
type chainChange struct {
	backend string
	removed bool
	blocks  int
}

// add copies one change of a prefixpeer.Buffer's Drain.
func (b *syncBatch) add(backend string, chain []prefixcache.BlockHash, removed bool) {
	b.changes = append(b.changes, chainChange{backend, removed, len(chain)})
	b.hashes = append(b.hashes, chain...)
}

// flush takes what every replica learnt since the last flush, its in-flight counts and its
// policy's usage deltas, for the others to apply SyncLag from now. O(replicas · servers +
// what was learnt).
func (s *sim) flush() {
	at := s.now + s.cfg.SyncLag
	q := &s.sync
	for k := range s.gw {
		g := &s.gw[k]
		var b *syncBatch
		if n := len(q.free); n > 0 {
			b, q.free = q.free[n-1], q.free[:n-1]
		} else {
			b = &syncBatch{}
		}
		b.at, b.from = at, k
		g.feed.Drain(b.add) // a nil feed (exact mode, no index) drains nothing
		if g.placed != nil {
			b.places = append(b.places, g.placed.buf...)
			clear(g.placed.buf)
			g.placed.buf = g.placed.buf[:0]
		}
		b.inflight = peer.AppendLoads(g.router, b.inflight[:0])
		b.usage = peer.AppendUsage(g.q, b.usage[:0])
		q.queue = append(q.queue, b)
	}
	if s.cfg.SyncLag == 0 {
		s.applySync()
		return
	}
	s.schedule(at, evSyncApply, 0)
}

// applySync applies every flushed batch due by now to every replica but the one that flushed
// it, then gives each replica the sum of the others' latest in-flight counts. O(what the
// batches hold · replicas + replicas² · servers).
func (s *sim) applySync() {
	q := &s.sync
	applied := false
	for q.head < len(q.queue) && q.queue[q.head].at <= s.now {
		b := q.queue[q.head]
		q.queue[q.head] = nil
		q.head++
		for k := range s.gw {
			if k != b.from {
				s.applyBatch(&s.gw[k], b)
			}
		}
		from := &s.gw[b.from]
		from.latest = append(from.latest[:0], b.inflight...)
		clear(b.places) // let go of the names
		clear(b.inflight)
		clear(b.usage)
		b.changes, b.hashes, b.places, b.inflight, b.usage = b.changes[:0], b.hashes[:0], b.places[:0], b.inflight[:0], b.usage[:0]
		q.free = append(q.free, b)
		applied = true
	}
	if q.head == len(q.queue) {
		q.queue, q.head = q.queue[:0], 0
	}
	if !applied {
		return
	}
	for k := range s.gw {
		peers := q.peers[:0]
		for j := range s.gw {
			if j != k {
				peers = append(peers, s.gw[j].latest...)
			}
		}
		peer.SetPeerLoads(s.gw[k].router, peers)
		q.peers = peers
	}
}

// applyBatch applies another replica's chains, placements and usage to g, chains and
// placements by backend name. Applying usage may dispatch (the queue re-keys its waiting
// flows); the outcomes are settled after the event, as any other's.
func (s *sim) applyBatch(g *gateway, b *syncBatch) {
	if len(b.usage) > 0 {
		peer.ApplyUsage(g.q, b.usage)
		s.sync.usage += int64(len(b.usage))
	}
	off := 0
	for _, c := range b.changes {
		chain := b.hashes[off : off+c.blocks]
		off += c.blocks
		if g.index == nil {
			continue
		}
		id, ok := g.index.Lookup(c.backend)
		if !ok {
			continue // not a server of this replica's (every replica scrapes every server)
		}
		var err error
		if c.removed {
			err = prefixpeer.RemoveRemote(g.index, id, chain)
		} else {
			err = prefixpeer.InsertRemote(g.index, id, chain)
		}
		if err != nil {
			panic("bench: applying a peer's chain: " + err.Error()) // the id was just looked up
		}
		s.sync.chains++
	}
	if len(g.sessions) == 0 {
		return
	}
	for _, p := range b.places {
		for _, place := range g.sessions {
			if _, applied := place(p.session, p.backend, p.blocks, p.expires); applied {
				s.sync.placements++
			}
		}
	}
}
