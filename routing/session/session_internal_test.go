package session

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
)

// The session table's and the session scorers' own tests, over hand-made candidates.

// markedIndexed holds the hand-made requests scored as a Router with a prefix index would
// resolve them (Request's indexed field is the Router's to set).
var markedIndexed sync.Map // *Request → struct{}

func init() {
	routerSays := indexed
	indexed = func(req *Request) bool {
		if _, ok := markedIndexed.Load(req); ok {
			return true
		}
		return routerSays(req)
	}
}

// withIndex marks req as resolved by a Router with a prefix index and returns it.
func withIndex(req *Request) *Request {
	markedIndexed.Store(req, struct{}{})
	return req
}

// spec builds a candidate by hand for scorer tables.
type spec = routingtest.Spec

func TestSessionTableSteps(t *testing.T) {
	tb := newSessionTable(AffinityOptions{TTL: 10 * time.Second, MaxSessions: 4})
	if len(tb.slots) != 4 {
		t.Fatalf("slots = %d, want 4", len(tb.slots))
	}
	sec := int64(time.Second)
	type step struct {
		op        string // "store" or "lookup"
		key       uint64
		id        BackendID
		blocks    int
		at        int64
		wantOK    bool
		wantID    BackendID
		wantBlock int
	}
	steps := []step{
		{op: "lookup", key: 1, at: 0, wantOK: false},
		{op: "store", key: 1, id: 3, blocks: 7, at: 0},
		{op: "lookup", key: 1, at: 5 * sec, wantOK: true, wantID: 3, wantBlock: 7},
		{op: "lookup", key: 1, at: 10 * sec, wantOK: false}, // expired at exactly TTL
		{op: "store", key: 1, id: 4, blocks: 9, at: 10 * sec},
		{op: "lookup", key: 1, at: 19 * sec, wantOK: true, wantID: 4, wantBlock: 9},
		// Fill the bucket of four: 2, 3, 4 take the free slots.
		{op: "store", key: 2, id: 1, at: 11 * sec},
		{op: "store", key: 3, id: 1, at: 12 * sec},
		{op: "store", key: 4, id: 1, at: 13 * sec},
		// A fifth session evicts the entry closest to expiry: key 1 (expires at 20 s).
		{op: "store", key: 5, id: 2, at: 14 * sec},
		{op: "lookup", key: 1, at: 14 * sec, wantOK: false},
		{op: "lookup", key: 5, at: 14 * sec, wantOK: true, wantID: 2},
		{op: "lookup", key: 2, at: 14 * sec, wantOK: true, wantID: 1},
		// Refreshing a session keeps its slot and extends it.
		{op: "store", key: 2, id: 6, at: 15 * sec},
		{op: "store", key: 6, id: 0, at: 16 * sec}, // evicts key 3 (expires 22 s)
		{op: "lookup", key: 3, at: 16 * sec, wantOK: false},
		{op: "lookup", key: 2, at: 24 * sec, wantOK: true, wantID: 6},
	}
	for i, s := range steps {
		switch s.op {
		case "store":
			tb.store(s.key, s.id, s.blocks, s.at)
		case "lookup":
			id, blocks, ok := tb.lookup(s.key, s.at)
			if ok != s.wantOK || (ok && (id != s.wantID || blocks != s.wantBlock)) {
				t.Errorf("step %d lookup(%d) = %d, %d, %v; want %d, %d, %v", i, s.key, id, blocks, ok, s.wantID, s.wantBlock, s.wantOK)
			}
		}
	}
}

// The table is bounded whatever the number of sessions.
func TestSessionTableBounded(t *testing.T) {
	tb := newSessionTable(AffinityOptions{MaxSessions: 100})
	if len(tb.slots) != 128 {
		t.Fatalf("slots = %d, want 128", len(tb.slots))
	}
	for i := range 10_000 {
		tb.store(tb.hash(fmt.Sprint("s", i)), BackendID(i%7), i, int64(i))
	}
	if len(tb.slots) != 128 {
		t.Fatalf("table grew to %d", len(tb.slots))
	}
	// The most recent session is remembered.
	if id, _, ok := tb.lookup(tb.hash("s9999"), 10_000); !ok || id != BackendID(9999%7) {
		t.Errorf("latest session lost: %d %v", id, ok)
	}
}

// A sessionless request weighs prefix and balance equally.
func TestSessionAwareScores(t *testing.T) {
	sa := newSessionAware(AwareOptions{})
	req := withIndex(&Request{Chain: routingtest.Chain(4)})
	// loads 0, 2, 4: balance 1 − L/5 = 1, 0.6, 0.2; limit 2·(2+1) = 6, nobody overloaded;
	// ratios 0, 1, 0.5.
	three := func() []Candidate {
		return routingtest.Cands(spec{InFlight: 0}, spec{InFlight: 2, Matched: 4}, spec{InFlight: 4, Matched: 2})
	}
	routingtest.CheckScores(t, "sessionless", routingtest.Score(sa, req, three()), []float64{0.5, 0.8, 0.35})
	// First turn (unknown session): the candidates holding at least half of it (2 of 4 blocks)
	// outrank the other, 1/2 + (share + balance)/4 against balance/2.
	req.Session = "new"
	routingtest.CheckScores(t, "first turn", routingtest.Score(sa, req, three()), []float64{0.5, 0.9, 0.675})
	// Nobody holds half of it: the share each candidate within the load limit reckoned over
	// the others holds (all three here: 0 ≤ 2·(3+1), 2 ≤ 2·(2+1), 4 ≤ 2·(1+1)), none of their
	// balance — the load terms beside it weigh the load.
	routingtest.CheckScores(t, "first turn, small matches", routingtest.Score(sa, req, routingtest.Cands(spec{InFlight: 0}, spec{InFlight: 2, Matched: 1}, spec{InFlight: 4, Matched: 1})),
		[]float64{0, 0.25, 0.25})
	// A small match on a candidate past that limit (loads 0, 0, 5: 5 > 2·(0+1)) counts for
	// nothing, and scores 0 like the others that hold nothing.
	routingtest.CheckScores(t, "first turn, small match past the others' limit", routingtest.Score(sa, req, routingtest.Cands(spec{}, spec{Matched: 1}, spec{InFlight: 5, Matched: 1})),
		[]float64{0, 0.25, 0})
	// Nobody holds any of it, or only candidates past that limit do: balance only.
	routingtest.CheckScores(t, "first turn, nothing held", routingtest.Score(sa, req, routingtest.Cands(spec{InFlight: 0}, spec{InFlight: 2}, spec{InFlight: 4})),
		[]float64{1, 0.6, 0.2})
	routingtest.CheckScores(t, "first turn, held only past the limit", routingtest.Score(sa, req, routingtest.Cands(spec{}, spec{}, spec{InFlight: 5, Matched: 1})),
		[]float64{1, 1, 1.0 / 6})
	// The only holder is overloaded (loads 0, 0, 12: limit 2·(4+1) = 10): balance only.
	routingtest.CheckScores(t, "first turn, holder overloaded", routingtest.Score(sa, req, routingtest.Cands(spec{}, spec{}, spec{InFlight: 12, Matched: 4})),
		[]float64{1, 1, 1.0 / 13})
	// BalanceFirstTurns: balance only.
	bal := newSessionAware(AwareOptions{BalanceFirstTurns: true})
	routingtest.CheckScores(t, "BalanceFirstTurns", routingtest.Score(bal, req, three()), []float64{1, 0.6, 0.2})
	// Sessionless with an overloaded candidate: loads 0, 0, 0, 12: mean 3, limit 8; balance
	// 1, 1, 1, 1 − 12/13; the full match on the overloaded one counts for nothing.
	got := routingtest.Score(sa, &Request{Chain: routingtest.Chain(4)}, routingtest.Cands(spec{}, spec{Matched: 2}, spec{}, spec{InFlight: 12, Matched: 4}))
	routingtest.CheckScores(t, "sessionless overloaded", got, []float64{0.5, 0.75, 0.5, (1.0 / 13) / 4})
	// Stale polled load falls back to the router's own count, not to zero: loads 1, 3.
	got = routingtest.Score(sa, &Request{Session: "x"}, routingtest.Cands(spec{InFlight: 1, Queued: 50, Known: routingtest.QR, Stale: true}, spec{InFlight: 3}))
	routingtest.CheckScores(t, "stale load", got, []float64{0.75, 0.25})
	// Fresh polled load counts when larger: queued 5 + running 1 = 6 against in-flight 1.
	got = routingtest.Score(sa, &Request{Session: "x"}, routingtest.Cands(spec{InFlight: 1, Queued: 5, Running: 1, Known: routingtest.QR}, spec{InFlight: 3}))
	routingtest.CheckScores(t, "polled load", got, []float64{1 - 6.0/7, 1 - 3.0/7})
}

// In a quiet fleet — every engine reports, freshly, no request waiting — a turn's home or
// holders keep their scores and every other candidate scores 0, while the home (or a holder) is
// within the load limit reckoned over the other candidates; one waiting request anywhere, a
// queue the router cannot see, or a home past that limit brings back balance/2.
func TestSessionAwareQuiet(t *testing.T) {
	sa := newSessionAware(AwareOptions{})
	// loads 0, 2, 4 as in TestSessionAwareScores: balance 1, 0.6, 0.2.
	fleet := func(queued int, known Signal, stale bool) []Candidate {
		return routingtest.Cands(
			spec{ID: 1, InFlight: 0, Known: known, Stale: stale},
			spec{ID: 2, InFlight: 2, Matched: 4, Known: known, Stale: stale},
			spec{ID: 3, InFlight: 4, Matched: 2, Queued: queued, Known: known, Stale: stale})
	}
	first := withIndex(&Request{Chain: routingtest.Chain(4), Session: "new"})
	routingtest.CheckScores(t, "first turn, quiet", routingtest.Score(sa, first, fleet(0, routingtest.QR, false)), []float64{0, 0.9, 0.675})
	// One request waiting on the lesser holder: the other holder is still calm and idle.
	routingtest.CheckScores(t, "first turn, one waiting on a holder", routingtest.Score(sa, first, fleet(1, routingtest.QR, false)), []float64{0, 0.9, 0.675})
	// A request waiting on every holder: balance/2 for the rest.
	busyHolders := routingtest.Cands(
		spec{ID: 1, InFlight: 0, Known: routingtest.QR},
		spec{ID: 2, InFlight: 2, Matched: 4, Queued: 1, Known: routingtest.QR},
		spec{ID: 3, InFlight: 4, Matched: 2, Queued: 1, Known: routingtest.QR})
	routingtest.CheckScores(t, "first turn, every holder waiting", routingtest.Score(sa, first, busyHolders), []float64{0.5, 0.9, 0.675})
	routingtest.CheckScores(t, "first turn, queues stale", routingtest.Score(sa, first, fleet(0, routingtest.QR, true)), []float64{0.5, 0.9, 0.675})
	routingtest.CheckScores(t, "first turn, queues unknown", routingtest.Score(sa, first, fleet(0, 0, false)), []float64{0.5, 0.9, 0.675})
	// A later turn at home on the second candidate (load 2; the others' limit 2·(2 + 1)).
	later := withIndex(&Request{Chain: routingtest.Chain(4), Session: "old"})
	sa.t.store(sa.t.hash("old"), 2, 4, time.Now().UnixNano())
	routingtest.CheckScores(t, "later turn, quiet", routingtest.Score(sa, later, fleet(0, routingtest.QR, false)), []float64{0, 1, 0})
	routingtest.CheckScores(t, "later turn, busy", routingtest.Score(sa, later, fleet(0, 0, false)), []float64{0.5, 1, 0.1})
	// At home on a server of load 6 beside two idle ones: within the load limit (2·(2 + 1)),
	// so home, and the quiet fleet keeps the others at 0 — a later turn's history is most of its
	// prompt, so staying costs a batch slot and leaving its whole prefill.
	sa.t.store(sa.t.hash("old"), 3, 2, time.Now().UnixNano())
	lopsided := routingtest.Cands(spec{ID: 1, Known: routingtest.QR}, spec{ID: 2, Known: routingtest.QR}, spec{ID: 3, InFlight: 6, Matched: 2, Known: routingtest.QR})
	routingtest.CheckScores(t, "later turn, home at the load limit", routingtest.Score(sa, later, lopsided), []float64{0, 0, 1})
	// One request waiting anywhere: balance/2 for the others.
	lopsided[0].State.Queued = 1
	routingtest.CheckScores(t, "later turn, home at the load limit, one waiting", routingtest.Score(sa, later, lopsided), []float64{0.5 * (1 - 1.0/7), 0.5, 1})
	// Sessionless requests score prefix and balance in equal parts, quiet or not.
	routingtest.CheckScores(t, "sessionless, quiet", routingtest.Score(sa, withIndex(&Request{Chain: routingtest.Chain(4)}), fleet(0, routingtest.QR, false)), []float64{0.5, 0.8, 0.35})
	// BalanceWhenQuiet keeps balance/2 in a quiet fleet.
	bal := newSessionAware(AwareOptions{BalanceWhenQuiet: true})
	routingtest.CheckScores(t, "BalanceWhenQuiet", routingtest.Score(bal, first, fleet(0, routingtest.QR, false)), []float64{0.5, 0.9, 0.675})
}

// FuzzSessionTable checks the session table against a naive map of the last placement of each
// session: a lookup may miss (the bounded table evicts), but what it returns is always the
// latest placement stored for that session and never an expired one, and a placement just
// stored is always found.
func FuzzSessionTable(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 0, 0, 255, 255, 255, 17, 17})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tb := newSessionTable(AffinityOptions{TTL: 100, MaxSessions: 8})
		type placement struct {
			id     BackendID
			blocks int
			exp    int64
		}
		ref := map[uint64]placement{}
		now := int64(0)
		for i := 0; i+2 < len(ops); i += 3 {
			key := uint64(ops[i]%24) + 1 // 24 sessions over 8 slots: evictions happen
			now += int64(ops[i+2] % 16)
			if ops[i+1]&1 == 0 {
				id, blocks := BackendID(ops[i+1]>>1), int(ops[i+2])
				tb.store(key, id, blocks, now)
				ref[key] = placement{id, blocks, now + 100}
				if gid, gb, ok := tb.lookup(key, now); !ok || gid != id || gb != blocks {
					t.Fatalf("op %d: stored %d→(%d,%d), lookup gives (%d,%d,%v)", i, key, id, blocks, gid, gb, ok)
				}
				continue
			}
			id, blocks, ok := tb.lookup(key, now)
			if !ok {
				continue
			}
			want, seen := ref[key]
			if !seen || want.exp <= now || want.id != id || want.blocks != blocks {
				t.Fatalf("op %d: lookup(%d) at %d = (%d,%d); reference %+v (present %v)", i, key, now, id, blocks, want, seen)
			}
		}
	})
}

func TestSessionSlots(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, DefaultMaxSessions}, {-1, DefaultMaxSessions}, {1, 4}, {4, 4}, {5, 8}, {100, 128},
		{maxSessionSlots, maxSessionSlots}, {maxSessionSlots + 1, maxSessionSlots},
		{math.MaxInt/2 + 2, maxSessionSlots}, {math.MaxInt, maxSessionSlots}, // above 2^62 (64-bit): used to loop forever
	} {
		if got := sessionSlots(c.n); got != c.want {
			t.Errorf("sessionSlots(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestStickyFilter(t *testing.T) {
	req := &Request{Chain: routingtest.Chain(10), BlockSize: 16, PromptTokens: 160}
	tests := []struct {
		name   string
		opts   StickyOptions
		req    *Request
		in     []spec
		want   []BackendID
		opened uint64
	}{
		{"keeps sticky", StickyOptions{}, req,
			[]spec{{Matched: 8}, {Matched: 7}, {Matched: 10}}, []BackendID{0, 2}, 0},
		{"no sticky keeps all", StickyOptions{}, req,
			[]spec{{Matched: 1}, {Matched: 7}}, []BackendID{0, 1}, 0},
		{"no chain keeps all", StickyOptions{}, &Request{},
			[]spec{{Matched: 1}, {Matched: 7}}, []BackendID{0, 1}, 0},
		// Sticky TTFT 318560/15928 = 20 s, non-sticky 0 s: 20 s > 18 s → gate opens.
		{"gate opens", StickyOptions{}, req,
			[]spec{{Matched: 10, Prefill: 318560}, {Matched: 0}}, []BackendID{0, 1}, 1},
		// 15928·17 tokens = 17 s ≤ 18 s → stays sticky.
		{"gate holds", StickyOptions{}, req,
			[]spec{{Matched: 10, Prefill: 15928 * 17}, {Matched: 0}}, []BackendID{0}, 0},
		// Custom threshold 0.5 and penalty 1 s at 1000 tok/s: sticky best 1.5 s, other best 0.2 s.
		{"custom gate", StickyOptions{Threshold: 0.5, MaxTTFTPenalty: time.Second, PeakPrefillThroughput: 1000}, req,
			[]spec{{Matched: 5, Prefill: 1500}, {Matched: 4, Prefill: 200}}, []BackendID{0, 1}, 1},
	}
	for _, tt := range tests {
		f := newStickyFilter(tt.opts)
		got := f.Filter(tt.req, routingtest.Cands(tt.in...))
		if !routingtest.SameIDs(got, tt.want) {
			t.Errorf("%s: kept %v, want %v", tt.name, routingtest.IDs(got), tt.want)
		}
		if f.Opened() != tt.opened {
			t.Errorf("%s: opened %d, want %d", tt.name, f.Opened(), tt.opened)
		}
	}
}

// LearnPlacement keeps whichever placement expires later, and does not evict a placement that
// outlives the one learnt.
func TestLearnPlacementKeepsLater(t *testing.T) {
	tb := newSessionTable(AffinityOptions{TTL: 10 * time.Second, MaxSessions: 4})
	at := func(sec int) time.Time { return routingtest.T0.Add(time.Duration(sec) * time.Second) }
	ns := func(sec int) int64 { return at(sec).UnixNano() }
	type step struct {
		op      string // "learn", "store" (a local pick at a time) or "lookup"
		key     uint64
		id      BackendID
		sec     int // expiry for learn, pick time for store, time for lookup
		want    bool
		wantID  BackendID
		comment string
	}
	steps := []step{
		{op: "learn", key: 1, id: 1, sec: 100, want: true, comment: "new session"},
		{op: "lookup", key: 1, sec: 50, want: true, wantID: 1},
		{op: "learn", key: 1, id: 2, sec: 60, want: false, comment: "expires earlier"},
		{op: "learn", key: 1, id: 2, sec: 100, want: false, comment: "expires at the same time"},
		{op: "lookup", key: 1, sec: 50, want: true, wantID: 1},
		{op: "learn", key: 1, id: 3, sec: 120, want: true, comment: "expires later"},
		{op: "lookup", key: 1, sec: 110, want: true, wantID: 3},
		{op: "store", key: 1, id: 4, sec: 115, comment: "a local pick: expires at 125"},
		{op: "learn", key: 1, id: 5, sec: 124, want: false, comment: "older than the local pick"},
		{op: "lookup", key: 1, sec: 116, want: true, wantID: 4},
		{op: "learn", key: 0, id: 1, sec: 500, want: false, comment: "session 0 is the empty slot"},
		// Fill the bucket (keys 1..4 share it): 2, 3, 4 take the free slots.
		{op: "learn", key: 2, id: 1, sec: 200, want: true},
		{op: "learn", key: 3, id: 1, sec: 200, want: true},
		{op: "learn", key: 4, id: 1, sec: 200, want: true},
		{op: "learn", key: 5, id: 2, sec: 110, want: false, comment: "would evict placements that outlive it"},
		{op: "lookup", key: 1, sec: 116, want: true, wantID: 4},
		{op: "learn", key: 5, id: 2, sec: 150, want: true, comment: "evicts key 1, expiring at 125"},
		{op: "lookup", key: 1, sec: 116, want: false},
		{op: "lookup", key: 5, sec: 116, want: true, wantID: 2},
	}
	for i, s := range steps {
		switch s.op {
		case "learn":
			if got := tb.learn(s.key, s.id, 3, at(s.sec)); got != s.want {
				t.Errorf("step %d (%s): learn = %v, want %v", i, s.comment, got, s.want)
			}
		case "store":
			tb.store(s.key, s.id, 3, ns(s.sec))
		case "lookup":
			id, _, ok := tb.lookup(s.key, ns(s.sec))
			if ok != s.want || (ok && id != s.wantID) {
				t.Errorf("step %d: lookup(%d) = %d, %v; want %d, %v", i, s.key, id, ok, s.wantID, s.want)
			}
		}
	}
	if tb.learn(9, 1, 3, time.Time{}) {
		t.Error("learnt a placement with a zero expiry")
	}
}

// Tables with the same nonzero Seed hash ids alike; other seeds, and Seed 0 (random per table),
// do not.
func TestSessionSeed(t *testing.T) {
	a, b := newSessionTable(AffinityOptions{Seed: 42}), newSessionTable(AffinityOptions{Seed: 42, MaxSessions: 8})
	other := newSessionTable(AffinityOptions{Seed: 43})
	r1, r2 := newSessionTable(AffinityOptions{}), newSessionTable(AffinityOptions{})
	same, sameOther, sameRandom := 0, 0, 0
	const n = 1000
	for i := range n {
		id := fmt.Sprint("session-", i)
		ha := a.hash(id)
		if ha == 0 {
			t.Fatalf("hash(%q) = 0", id)
		}
		if ha == b.hash(id) {
			same++
		}
		if ha == other.hash(id) {
			sameOther++
		}
		if r1.hash(id) == r2.hash(id) {
			sameRandom++
		}
	}
	if same != n || sameOther != 0 || sameRandom != 0 {
		t.Errorf("equal hashes: same seed %d of %d (want all), other seed %d, random seeds %d (want 0)", same, n, sameOther, sameRandom)
	}
	if a.hash("") == 0 {
		t.Error("hash of the empty id is 0")
	}
}

// Session hashing with a Seed allocates nothing.
func TestSessionSeedAllocs(t *testing.T) {
	tb := newSessionTable(AffinityOptions{Seed: 5})
	id := "a-session-id-longer-than-thirty-two-bytes-0123456789"
	if n := testing.AllocsPerRun(100, func() { _ = tb.hash(id) }); n != 0 {
		t.Errorf("hash allocates %v times", n)
	}
}
