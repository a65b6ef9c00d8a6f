package session

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cand"
	"github.com/usher-llm/usher/routing/internal/hook"
)

// Session defaults.
const (
	// DefaultPlacementTTL is how long a session's placement is remembered after its last pick
	// (llm-d's session affinity uses 300 s).
	DefaultPlacementTTL = 300 * time.Second
	// DefaultMaxSessions bounds the remembered sessions.
	DefaultMaxSessions = 1 << 16
)

// AffinityOptions configures the session table of SessionAffinity and SessionAware.
type AffinityOptions struct {
	// TTL is how long a placement is remembered after the session's last pick. Zero:
	// DefaultPlacementTTL.
	TTL time.Duration
	// MaxSessions bounds the table; it is rounded up to a power of two (at least 4, at most
	// 2^30). When full, a new session takes the slot of the entry closest to expiry in its
	// bucket of four. Zero: DefaultMaxSessions. Memory is 24 bytes per slot.
	MaxSessions int
	// Seed keys the hash of session ids. Gateway replicas that share placements (Feed and
	// LearnPlacement, which carry the hashed id) must use the same nonzero Seed, or their
	// hashes will not agree and shared placements will never be found. It is the key of a
	// seeded xxhash64, which spreads ids that clients choose over the table: keep it as private
	// as the gateway's configuration. Zero: a random key per table, as hash/maphash picks it.
	Seed uint64
	// Feed, if set, hears of every placement the scorer learns from a pick, for replication
	// to other gateway replicas (not of those applied with LearnPlacement, so replicas do not
	// echo each other). Nil: nobody hears.
	Feed Feed
}

// Feed receives each placement a session scorer (SessionAffinity, SessionAware) learns
// from a pick, so that a replication layer can send it to other gateway replicas, which apply
// it with LearnPlacement. session is the hashed session id (see AffinityOptions.Seed), backend
// the chosen backend's name (ids differ between routers), blocks the request's chain length and
// expires when the placement will be forgotten (the pick's time plus the TTL).
//
// Placed is called from the scorer's Picked, inside Pick, on the picking goroutine: it must be
// safe for concurrent use and must not block (buffer and send from another goroutine). Its
// arguments are values it may keep.
type Feed interface {
	Placed(session uint64, backend string, blocks int, expires time.Time)
}

// sessionTable maps a session id to the backend of its last pick, with an expiry. It is a
// fixed-size, 4-way set-associative table of atomic words: lock-free, allocation-free, bounded.
//
// A slot is written as key←0, value, expiry, key←h; a reader checks the key before and after
// reading the value. Two writers racing on one slot can, rarely, leave a value belonging to the
// other session; a placement is a hint validated against the candidates, so such a race costs at
// most one misplaced turn, never an invalid pick.
type sessionTable struct {
	slots []sessionSlot
	mask  uint64
	ttl   int64
	key   uint64       // AffinityOptions.Seed; 0: hash with seed
	seed  maphash.Seed // when key is 0
	feed  Feed
}

type sessionSlot struct {
	key atomic.Uint64 // hashed session id; 0 = empty
	val atomic.Uint64 // routing.BackendID<<32 | blocks
	exp atomic.Int64  // expiry, Unix ns
}

func newSessionTable(opts AffinityOptions) *sessionTable {
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultPlacementTTL
	}
	size := sessionSlots(opts.MaxSessions)
	return &sessionTable{
		slots: make([]sessionSlot, size),
		mask:  uint64(size - 1),
		ttl:   int64(ttl),
		key:   opts.Seed,
		seed:  maphash.MakeSeed(),
		feed:  opts.Feed,
	}
}

// maxSessionSlots caps the table at 2^30 slots (24 GiB); larger requests are clamped, so
// the rounding below can neither overflow nor loop forever.
const maxSessionSlots = 1 << 30

// sessionSlots is the table size for MaxSessions n: n rounded up to a power of two in
// [4, maxSessionSlots], DefaultMaxSessions when n ≤ 0.
func sessionSlots(n int) int {
	if n <= 0 {
		n = DefaultMaxSessions
	}
	size := 4
	for size < n && size < maxSessionSlots {
		size <<= 1
	}
	return size
}

// hash returns the table's hash of a session id, never 0 (the empty slot). O(len(session)).
func (t *sessionTable) hash(session string) uint64 {
	var h uint64
	if t.key != 0 {
		var d xxhash.Digest
		d.ResetWithSeed(t.key)
		_, _ = d.WriteString(session)
		h = d.Sum64()
	} else {
		h = maphash.String(t.seed, session)
	}
	if h == 0 {
		h = 1
	}
	return h
}

// lookup returns the placement of session hash h, if it is remembered and not expired. O(1).
func (t *sessionTable) lookup(h uint64, now int64) (routing.BackendID, int, bool) {
	base := h & t.mask &^ 3
	for i := range uint64(4) {
		s := &t.slots[base+i]
		if s.key.Load() != h {
			continue
		}
		v, e := s.val.Load(), s.exp.Load()
		if s.key.Load() != h || e <= now {
			return 0, 0, false
		}
		return routing.BackendID(v >> 32), int(uint32(v)), true
	}
	return 0, 0, false
}

// store remembers that session hash h was placed on id with a chain of blocks blocks, until
// now + TTL, which it returns. O(1).
func (t *sessionTable) store(h uint64, id routing.BackendID, blocks int, now int64) int64 {
	exp := now + t.ttl
	t.put(h, id, blocks, exp, false)
	return exp
}

// put writes the placement of session hash h into its bucket: over h's own slot, else an empty
// one, else the one closest to expiry. With keepLater (a placement another replica learnt) it
// writes nothing, and returns false, when h's slot already expires at or after exp, or when h
// has no slot and every slot of the bucket outlives exp. O(1).
func (t *sessionTable) put(h uint64, id routing.BackendID, blocks int, exp int64, keepLater bool) bool {
	base := h & t.mask &^ 3
	victim := -1
	oldest := int64(math.MaxInt64)
	for i := range 4 {
		s := &t.slots[base+uint64(i)]
		k := s.key.Load()
		if k == h {
			if keepLater && s.exp.Load() >= exp {
				return false
			}
			victim, oldest = i, math.MinInt64
			break
		}
		if e := s.exp.Load(); k == 0 || e < oldest {
			victim, oldest = i, e
			if k == 0 {
				oldest = math.MinInt64
			}
		}
	}
	if keepLater && oldest >= exp {
		return false
	}
	s := &t.slots[base+uint64(victim)]
	s.key.Store(0)
	s.val.Store(uint64(id)<<32 | min(uint64(max(blocks, 0)), math.MaxUint32))
	s.exp.Store(exp)
	s.key.Store(h)
	return true
}

// picked learns the placement of req's session, if it has one, and tells the feed. O(1).
func (t *sessionTable) picked(req *routing.Request, chosen *routing.Candidate, now time.Time) {
	if req.Session == "" {
		return
	}
	h := t.hash(req.Session)
	exp := t.store(h, chosen.ID, len(req.Chain), now.UnixNano())
	if t.feed != nil && chosen.State != nil {
		t.feed.Placed(h, chosen.State.Name, len(req.Chain), time.Unix(0, exp))
	}
}

// learn applies a placement another replica learnt; see SessionAware.LearnPlacement. O(1).
func (t *sessionTable) learn(session uint64, id routing.BackendID, blocks int, expires time.Time) bool {
	if session == 0 || expires.IsZero() {
		return false
	}
	return t.put(session, id, blocks, expires.UnixNano(), true)
}

// sessionAffinity is the scorer NewSessionAffinity returns.
type sessionAffinity struct {
	t *sessionTable
}

// newSessionAffinity builds the scorer NewSessionAffinity returns.
func newSessionAffinity(opts AffinityOptions) *sessionAffinity {
	return &sessionAffinity{t: newSessionTable(opts)}
}

// Score implements routing.Scorer.
func (s *sessionAffinity) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	clear(dst)
	if req.Session == "" {
		return
	}
	id, _, ok := s.t.lookup(s.t.hash(req.Session), nowOf(req, cands))
	if !ok {
		return
	}
	for i := range cands {
		if cands[i].ID == id {
			dst[i] = 1
		}
	}
}

// Picked implements Observer: the chosen backend becomes the session's, and AffinityOptions.Feed
// hears of it.
func (s *sessionAffinity) Picked(req *routing.Request, chosen *routing.Candidate, now time.Time) {
	s.t.picked(req, chosen, now)
}

// LearnPlacement applies a placement another gateway replica learnt; see
// SessionAware.LearnPlacement. O(1), no allocation, safe for concurrent use with picks.
func (s *sessionAffinity) LearnPlacement(session uint64, id routing.BackendID, blocks int, expires time.Time) bool {
	return s.t.learn(session, id, blocks, expires)
}

// indexed reports whether the Router resolving req has a prefix index (a variable so that
// tests can score hand-made requests as a Router with an index would).
var indexed = func(req *routing.Request) bool { return hook.Indexed(req) }

// nowOf returns the pick time for a scorer: routing.Request.Now, which Pick always resolves, else the
// wall clock (a scorer called outside a Router).
func nowOf(req *routing.Request, _ []routing.Candidate) int64 {
	if !req.Now.IsZero() {
		return req.Now.UnixNano()
	}
	return time.Now().UnixNano()
}

// Defaults of SessionAware.
const (
	// DefaultOverload: a session leaves its home backend when the home's load exceeds this
	// multiple of the pool's mean load (plus one request, so that near-idle pools do not churn).
	DefaultOverload = 2.0
	// DefaultKeptFraction: a session's history counts as evicted when its home backend holds less
	// than this share of the blocks the previous turn sent there.
	DefaultKeptFraction = 0.5
)

// AwareOptions configures SessionAware. Zero values are the documented defaults.
type AwareOptions struct {
	AffinityOptions
	// Overload is the multiple of the mean load beyond which a home backend is abandoned:
	// the home's load > Overload · (mean load + 1). Zero: DefaultOverload (2).
	Overload float64
	// KeptFraction is the share of the previous turn's blocks the home backend must still hold
	// for the history to count as cached — unless no other candidate holds more of the prompt,
	// when what is left still keeps the turn at home. It is also the share of a turn without a
	// home that a candidate must hold to be its home. Zero: DefaultKeptFraction (0.5).
	KeptFraction float64
	// IgnoreEviction skips the eviction check. Without a prefix index in the Router the check
	// is skipped anyway (MatchedBlocks would always be 0 and every history would look evicted).
	IgnoreEviction bool
	// PrefixFirstTurns scores a session's first turn (and a turn whose home is gone) as a
	// request without a session: prefix reuse and balance in equal parts, never onto an
	// overloaded server.
	PrefixFirstTurns bool
	// BalanceFirstTurns places every turn without a home for balance alone, even one whose
	// prompt a candidate mostly holds (usher's rule before forks were homed; see
	// NewSessionAware). PrefixFirstTurns takes precedence.
	BalanceFirstTurns bool
	// BalanceWhenQuiet gives the candidates other than a turn's home or holders balance/2
	// even while the fleet (or a holder) is quiet, where they would score 0, and places a turn
	// without a home that no candidate mostly holds for balance alone, where it would follow the
	// share each calm candidate holds (usher's rules before the quiet rule; see
	// NewSessionAware).
	BalanceWhenQuiet bool
}

// sessionAware is the scorer NewSessionAware returns.
type sessionAware struct {
	t        *sessionTable
	overload float64
	kept     float64
	noEvict  bool
	prefix1  bool
	balance1 bool
	quiet    bool // the quiet rule is on (not BalanceWhenQuiet)
	moved    atomic.Uint64
}

// newSessionAware builds the scorer NewSessionAware returns.
func newSessionAware(opts AwareOptions) *sessionAware {
	s := &sessionAware{t: newSessionTable(opts.AffinityOptions), overload: opts.Overload, kept: opts.KeptFraction, noEvict: opts.IgnoreEviction,
		prefix1: opts.PrefixFirstTurns, balance1: opts.BalanceFirstTurns, quiet: !opts.BalanceWhenQuiet}
	if s.overload <= 0 {
		s.overload = DefaultOverload
	}
	if s.kept <= 0 {
		s.kept = DefaultKeptFraction
	}
	return s
}

// Moved is the number of later turns that left their home because it was overloaded or its
// history was evicted. O(1).
func (s *sessionAware) Moved() uint64 { return s.moved.Load() }

// Score implements routing.Scorer.
func (s *sessionAware) Score(req *routing.Request, cands []routing.Candidate, dst []float64) {
	hi, sum := 0.0, 0.0
	quiet := s.quiet // no candidate has a request waiting (while the quiet rule is on)
	for i := range cands {
		if !cand.Idle(&cands[i]) {
			quiet = false
		}
		l := cand.Load(&cands[i])
		dst[i] = l // raw load; turned into a score below
		hi = max(hi, l)
		sum += l
	}
	limit := s.overload * (sum/float64(len(cands)) + 1)
	// calm reports whether a candidate of load l is within the load limit reckoned over the
	// other candidates alone: with few candidates its own load lifts the mean it is measured
	// against (on two servers l ≤ 2·(mean + 1) always holds).
	calm := func(l float64) bool { return cand.UnderOthers(l, sum, len(cands), s.overload) }
	home := -1
	if req.Session != "" {
		if id, blocks, ok := s.t.lookup(s.t.hash(req.Session), nowOf(req, cands)); ok {
			for i := range cands {
				if cands[i].ID != id {
					continue
				}
				overloaded := dst[i] > limit
				evicted := !s.noEvict && indexed(req) && blocks > 0 && len(req.Chain) > 0 &&
					float64(cands[i].MatchedBlocks) < s.kept*float64(min(blocks, len(req.Chain)))
				if evicted && cands[i].MatchedBlocks > 0 {
					// What is left of the history still counts where nobody holds more.
					evicted = heldMore(cands, i)
				}
				if overloaded || evicted {
					s.moved.Add(1)
				} else {
					home = i
				}
				break
			}
		}
	}
	n := float64(len(req.Chain))
	mixed := req.Session == "" || s.prefix1
	first := home < 0 && !mixed && !s.balance1 && indexed(req) && n > 0
	// A turn without a home whose prompt is mostly held by some candidate that is not
	// overloaded — a fork of another conversation, an agent's sub-task, a shared document —
	// is homed among those holders: need is the blocks a holder must hold, 0 when none does.
	// Such a turn keeps the others at none of their balance when a holder is calm and has no
	// request waiting itself (the state of the rest of the fleet does not change what going
	// there costs).
	need := 0
	if first {
		need = max(1, int(math.Ceil(s.kept*n)))
		held, light := false, false
		for i := range cands {
			if cands[i].MatchedBlocks >= need && dst[i] <= limit {
				held = true
				if light = light || (calm(dst[i]) && cand.Idle(&cands[i])); light {
					break
				}
			}
		}
		quiet = s.quiet && light
		if !held {
			need = 0
		}
	}
	// away is the share of its balance a candidate other than the turn's home or holders
	// keeps: half, and none while the fleet is quiet (a later turn) or a holder is calm and
	// idle (a first turn) — no engine that matters has a request waiting, so a turn placed on
	// its cache costs a batch slot, and one placed elsewhere its prefill. The load scorers
	// beside this one still weigh the load.
	away := 0.5
	if quiet {
		away = 0
	}
	// share: a first turn that no candidate mostly holds (a shared system prompt or
	// document opening a longer prompt) scores the share of its prompt each calm candidate
	// holds, and the rest 0: only what has no reuse is left to the load terms to balance.
	share := false
	if first && need == 0 && s.quiet {
		for i := range cands {
			if cands[i].MatchedBlocks > 0 && calm(dst[i]) {
				share = true
				break
			}
		}
	}
	for i := range cands {
		l := dst[i]
		b := 1 - l/(hi+1)
		switch {
		case home >= 0 && i == home:
			dst[i] = 1
		case home >= 0:
			dst[i] = b * away
		case need > 0 && cands[i].MatchedBlocks >= need && l <= limit:
			dst[i] = 0.5 + (float64(min(cands[i].MatchedBlocks, len(req.Chain)))/n+b)/4
		case need > 0:
			dst[i] = b * away
		case share && calm(l):
			dst[i] = float64(min(cands[i].MatchedBlocks, len(req.Chain))) / n
		case share:
			dst[i] = 0
		case mixed && n > 0 && l > limit:
			dst[i] = b / 4
		case mixed && n > 0:
			dst[i] = (float64(min(cands[i].MatchedBlocks, len(req.Chain)))/n + b) / 2
		default:
			dst[i] = b
		}
	}
}

// heldMore reports whether a candidate other than cands[i] holds more of the prompt. O(n).
func heldMore(cands []routing.Candidate, i int) bool {
	for j := range cands {
		if j != i && cands[j].MatchedBlocks > cands[i].MatchedBlocks {
			return true
		}
	}
	return false
}

// Picked implements Observer: the chosen backend becomes the session's home, and
// AffinityOptions.Feed hears of it.
func (s *sessionAware) Picked(req *routing.Request, chosen *routing.Candidate, now time.Time) {
	s.t.picked(req, chosen, now)
}

// LearnPlacement applies a placement another gateway replica learnt, as its Feed
// reported it: session is the hashed session id (the replicas must share
// AffinityOptions.Seed), id this router's routing.BackendID for the backend (Router.Lookup of the name
// the feed gave), blocks the chain length of the turn placed and expires the placement's
// expiry (an absolute time: the replicas' clocks should agree to well within the TTL). The next
// turn of that session then goes home here as if this router had placed it.
//
// It keeps the existing placement, and returns false, when that one expires at the same time or
// later (a pick here since, or a fresher copy of the same placement); it also ignores, rather
// than evict a placement that outlives it, a session whose bucket is full of such placements,
// and it ignores session 0 and a zero expires. Otherwise it returns true. It is not reported
// to the Feed. An id the router does not route to is harmless: it matches no candidate. O(1),
// no allocation, lock-free and safe for concurrent use with picks; a write racing with a pick
// of the same session may lose, which costs at most one misplaced turn.
func (s *sessionAware) LearnPlacement(session uint64, id routing.BackendID, blocks int, expires time.Time) bool {
	return s.t.learn(session, id, blocks, expires)
}
