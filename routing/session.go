package routing

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"
)

// Session defaults.
const (
	// DefaultSessionTTL is how long a session's placement is remembered after its last pick
	// (llm-d's session affinity uses 300 s).
	DefaultSessionTTL = 300 * time.Second
	// DefaultMaxSessions bounds the remembered sessions.
	DefaultMaxSessions = 1 << 16
)

// SessionOptions configures the session table of SessionAffinity and SessionAware.
type SessionOptions struct {
	// TTL is how long a placement is remembered after the session's last pick. Zero:
	// DefaultSessionTTL.
	TTL time.Duration
	// MaxSessions bounds the table; it is rounded up to a power of two (at least 4, at most
	// 2^30). When full, a new session takes the slot of the entry closest to expiry in its
	// bucket of four. Zero: DefaultMaxSessions. Memory is 24 bytes per slot.
	MaxSessions int
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
	seed  maphash.Seed
}

type sessionSlot struct {
	key atomic.Uint64 // hashed session id; 0 = empty
	val atomic.Uint64 // BackendID<<32 | blocks
	exp atomic.Int64  // expiry, Unix ns
}

func newSessionTable(opts SessionOptions) *sessionTable {
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	size := sessionSlots(opts.MaxSessions)
	return &sessionTable{
		slots: make([]sessionSlot, size),
		mask:  uint64(size - 1),
		ttl:   int64(ttl),
		seed:  maphash.MakeSeed(),
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

func (t *sessionTable) hash(session string) uint64 {
	h := maphash.String(t.seed, session)
	if h == 0 {
		h = 1
	}
	return h
}

// lookup returns the placement of session hash h, if it is remembered and not expired. O(1).
func (t *sessionTable) lookup(h uint64, now int64) (BackendID, int, bool) {
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
		return BackendID(v >> 32), int(uint32(v)), true
	}
	return 0, 0, false
}

// store remembers that session hash h was placed on id with a chain of blocks blocks. O(1).
func (t *sessionTable) store(h uint64, id BackendID, blocks int, now int64) {
	base := h & t.mask &^ 3
	victim := -1
	oldest := int64(math.MaxInt64)
	for i := range 4 {
		s := &t.slots[base+uint64(i)]
		k := s.key.Load()
		if k == h {
			victim = i
			break
		}
		if e := s.exp.Load(); k == 0 || e < oldest {
			victim, oldest = i, e
			if k == 0 {
				oldest = math.MinInt64
			}
		}
	}
	s := &t.slots[base+uint64(victim)]
	s.key.Store(0)
	s.val.Store(uint64(id)<<32 | min(uint64(max(blocks, 0)), math.MaxUint32))
	s.exp.Store(now + t.ttl)
	s.key.Store(h)
}

// SessionAffinity scores the backend that served a session's previous turn 1 and every other
// candidate 0 (llm-d's session-affinity scorer, 300 s TTL). A request without a session, or whose
// session is unknown or expired, scores 0 everywhere. It learns placements as an Observer. O(n)
// per pick, O(1) to learn; no allocation; safe for concurrent use.
type SessionAffinity struct {
	t *sessionTable
}

// NewSessionAffinity returns a SessionAffinity with its own bounded session table.
func NewSessionAffinity(opts SessionOptions) *SessionAffinity {
	return &SessionAffinity{t: newSessionTable(opts)}
}

// Score implements Scorer.
func (s *SessionAffinity) Score(req *Request, cands []Candidate, dst []float64) {
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

// Picked implements Observer.
func (s *SessionAffinity) Picked(req *Request, chosen *Candidate, now time.Time) {
	if req.Session != "" {
		s.t.store(s.t.hash(req.Session), chosen.ID, len(req.Chain), now.UnixNano())
	}
}

// nowOf returns the pick time for a scorer: Request.Now, which Pick always resolves, else the
// wall clock (a scorer called outside a Router).
func nowOf(req *Request, _ []Candidate) int64 {
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

// SessionAwareOptions configures SessionAware. Zero values are the documented defaults.
type SessionAwareOptions struct {
	SessionOptions
	// Overload is the multiple of the mean load beyond which a home backend is abandoned:
	// load(home) > Overload · (mean load + 1). Zero: DefaultOverload (2).
	Overload float64
	// KeptFraction is the share of the previous turn's blocks the home backend must still hold
	// for the history to count as cached. Zero: DefaultKeptFraction (0.5).
	KeptFraction float64
	// IgnoreEviction skips the eviction check. Without a prefix index in the Router the check
	// is skipped anyway (MatchedBlocks would always be 0 and every history would look evicted).
	IgnoreEviction bool
	// PrefixFirstTurns scores a session's first turn (and a turn whose home is gone) as a
	// request without a session: prefix reuse and balance in equal parts, never onto an
	// overloaded server. Off, such turns are placed for balance alone.
	PrefixFirstTurns bool
}

// SessionAware is usher's session-aware placement scorer, from production studies of coding
// agents, where most reusable KV cache is within a session. With L a candidate's load (below),
// balance(c) = 1 − L(c)/(max L + 1) and overloaded(c) ⇔ L(c) > Overload · (mean L + 1):
//
//   - A session's first turn, and any turn whose history is gone, is placed for balance:
//     score = balance, with no regard to prefix matches. A shared opening prompt (the same
//     system instructions for everyone) is cached on whichever servers saw it first; scoring it
//     would pull every new session onto them.
//   - A later turn stays where its history is cached: the home backend scores 1 and every other
//     candidate balance/2 — unless the home is overloaded, or its history was evicted
//     (MatchedBlocks(home) < KeptFraction · the blocks of the previous turn; checked only when
//     the Router has a prefix index). Then the turn is placed for balance, the new backend
//     becomes home, and Moved counts it.
//   - A request without a session scores (MatchedBlocks/len(Chain) + balance)/2, or balance/4
//     when the candidate is overloaded: prefix reuse and balance in equal parts, never onto a
//     server already carrying twice its share.
//
// balance is relative to the busiest candidate rather than min-max normalised, so one request
// more or less moves it by 1/(max L + 1), not from 1 to 0: a prefix match can outweigh a small
// load difference but not a large one. The "+ 1" in both formulas keeps a nearly idle pool from
// treating 1 request against 0 as overload.
//
// L is the larger of the router's in-flight requests and the server's queued + running requests
// when those are fresh (the router's own counter is never stale, so a missing or stale metric
// falls back to it instead of being read as zero). O(n) per pick, O(1) to learn; no allocation;
// safe for concurrent use.
type SessionAware struct {
	t        *sessionTable
	overload float64
	kept     float64
	noEvict  bool
	prefix1  bool
	moved    atomic.Uint64
}

// NewSessionAware returns a SessionAware configured by opts.
func NewSessionAware(opts SessionAwareOptions) *SessionAware {
	s := &SessionAware{t: newSessionTable(opts.SessionOptions), overload: opts.Overload, kept: opts.KeptFraction, noEvict: opts.IgnoreEviction, prefix1: opts.PrefixFirstTurns}
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
func (s *SessionAware) Moved() uint64 { return s.moved.Load() }

// load is a candidate's load as SessionAware sees it.
func load(c *Candidate) float64 {
	l := float64(c.InFlight.Requests)
	polled, ok := 0, false
	if c.Has(SignalQueued) {
		polled += c.State.Queued
		ok = true
	}
	if c.Has(SignalRunning) {
		polled += c.State.Running
		ok = true
	}
	if ok {
		l = max(l, float64(polled))
	}
	return l
}

// Score implements Scorer.
func (s *SessionAware) Score(req *Request, cands []Candidate, dst []float64) {
	hi, sum := 0.0, 0.0
	for i := range cands {
		l := load(&cands[i])
		dst[i] = l // raw load; turned into a score below
		hi = max(hi, l)
		sum += l
	}
	limit := s.overload * (sum/float64(len(cands)) + 1)
	home := -1
	if req.Session != "" {
		if id, blocks, ok := s.t.lookup(s.t.hash(req.Session), nowOf(req, cands)); ok {
			for i := range cands {
				if cands[i].ID != id {
					continue
				}
				overloaded := dst[i] > limit
				evicted := !s.noEvict && req.indexed && blocks > 0 && len(req.Chain) > 0 &&
					float64(cands[i].MatchedBlocks) < s.kept*float64(min(blocks, len(req.Chain)))
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
	for i := range cands {
		l := dst[i]
		b := 1 - l/(hi+1)
		switch {
		case home >= 0 && i == home:
			dst[i] = 1
		case home >= 0:
			dst[i] = b / 2
		case mixed && n > 0 && l > limit:
			dst[i] = b / 4
		case mixed && n > 0:
			dst[i] = (float64(min(cands[i].MatchedBlocks, len(req.Chain)))/n + b) / 2
		default:
			dst[i] = b
		}
	}
}

// Picked implements Observer: the chosen backend becomes the session's home.
func (s *SessionAware) Picked(req *Request, chosen *Candidate, now time.Time) {
	if req.Session != "" {
		s.t.store(s.t.hash(req.Session), chosen.ID, len(req.Chain), now.UnixNano())
	}
}
