package session

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
)

// The session table's and the session scorers' own tests, over hand-made candidates.

var t0 = time.Unix(1_000_000, 0)

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

// spec describes a candidate built by hand for scorer tables.
type spec struct {
	queued, running int
	kv              float64
	capBlocks       int
	known           Signal
	stale           bool
	inflight        int64
	prefill         int64
	blocks          int64
	matched         int
	uncached        int
	id              BackendID
	health          Health
}

func cands(cs ...spec) []Candidate {
	out := make([]Candidate, len(cs))
	for i, c := range cs {
		st := &BackendState{
			Name: "b" + itoa(i), Queued: c.queued, Running: c.running, KVUtilization: c.kv,
			KVCapacityBlocks: c.capBlocks, BlockSize: 16, Known: c.known, Health: c.health,
			UpdatedAt: time.Unix(1, 0),
		}
		fresh := c.known
		if c.stale {
			fresh = 0
		}
		out[i] = Candidate{
			State: st, ID: c.id, InFlight: InFlight{Requests: c.inflight, PrefillTokens: c.prefill, Blocks: c.blocks},
			MatchedBlocks: c.matched, MatchedTokens: c.matched * 16, Fresh: fresh, Stale: c.stale,
			UncachedTokens: c.uncached,
		}
		if c.id == 0 {
			out[i].ID = BackendID(i)
		}
	}
	return out
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func chain(n int) []prefixcache.BlockHash {
	c := make([]prefixcache.BlockHash, n)
	for i := range c {
		c[i] = prefixcache.BlockHash(i + 1)
	}
	return c
}

func score(s Scorer, req *Request, cs []Candidate) []float64 {
	dst := make([]float64, len(cs))
	s.Score(req, cs, dst)
	return dst
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func checkScores(t *testing.T, name string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d scores, want %d", name, len(got), len(want))
	}
	for i := range got {
		if !near(got[i], want[i]) {
			t.Errorf("%s: score[%d] = %v, want %v (all: got %v, want %v)", name, i, got[i], want[i], got, want)
		}
	}
}

const QR = SignalQueued | SignalRunning

func ids(cs []Candidate) []BackendID {
	var out []BackendID
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}
func sameIDs(cs []Candidate, want []BackendID) bool {
	got := ids(cs)
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
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
	req := withIndex(&Request{Chain: chain(4)})
	// loads 0, 2, 4: balance 1 − L/5 = 1, 0.6, 0.2; limit 2·(2+1) = 6, nobody overloaded;
	// ratios 0, 1, 0.5.
	three := func() []Candidate {
		return cands(spec{inflight: 0}, spec{inflight: 2, matched: 4}, spec{inflight: 4, matched: 2})
	}
	checkScores(t, "sessionless", score(sa, req, three()), []float64{0.5, 0.8, 0.35})
	// First turn (unknown session): the candidates holding at least half of it (2 of 4 blocks)
	// outrank the other, 1/2 + (share + balance)/4 against balance/2.
	req.Session = "new"
	checkScores(t, "first turn", score(sa, req, three()), []float64{0.5, 0.9, 0.675})
	// Nobody holds half of it: the share each candidate within the load limit reckoned over
	// the others holds (all three here: 0 ≤ 2·(3+1), 2 ≤ 2·(2+1), 4 ≤ 2·(1+1)), none of their
	// balance — the load terms beside it weigh the load.
	checkScores(t, "first turn, small matches", score(sa, req, cands(spec{inflight: 0}, spec{inflight: 2, matched: 1}, spec{inflight: 4, matched: 1})),
		[]float64{0, 0.25, 0.25})
	// A small match on a candidate past that limit (loads 0, 0, 5: 5 > 2·(0+1)) counts for
	// nothing, and scores 0 like the others that hold nothing.
	checkScores(t, "first turn, small match past the others' limit", score(sa, req, cands(spec{}, spec{matched: 1}, spec{inflight: 5, matched: 1})),
		[]float64{0, 0.25, 0})
	// Nobody holds any of it, or only candidates past that limit do: balance only.
	checkScores(t, "first turn, nothing held", score(sa, req, cands(spec{inflight: 0}, spec{inflight: 2}, spec{inflight: 4})),
		[]float64{1, 0.6, 0.2})
	checkScores(t, "first turn, held only past the limit", score(sa, req, cands(spec{}, spec{}, spec{inflight: 5, matched: 1})),
		[]float64{1, 1, 1.0 / 6})
	// The only holder is overloaded (loads 0, 0, 12: limit 2·(4+1) = 10): balance only.
	checkScores(t, "first turn, holder overloaded", score(sa, req, cands(spec{}, spec{}, spec{inflight: 12, matched: 4})),
		[]float64{1, 1, 1.0 / 13})
	// BalanceFirstTurns: balance only.
	bal := newSessionAware(AwareOptions{BalanceFirstTurns: true})
	checkScores(t, "BalanceFirstTurns", score(bal, req, three()), []float64{1, 0.6, 0.2})
	// Sessionless with an overloaded candidate: loads 0, 0, 0, 12: mean 3, limit 8; balance
	// 1, 1, 1, 1 − 12/13; the full match on the overloaded one counts for nothing.
	got := score(sa, &Request{Chain: chain(4)}, cands(spec{}, spec{matched: 2}, spec{}, spec{inflight: 12, matched: 4}))
	checkScores(t, "sessionless overloaded", got, []float64{0.5, 0.75, 0.5, (1.0 / 13) / 4})
	// Stale polled load falls back to the router's own count, not to zero: loads 1, 3.
	got = score(sa, &Request{Session: "x"}, cands(spec{inflight: 1, queued: 50, known: QR, stale: true}, spec{inflight: 3}))
	checkScores(t, "stale load", got, []float64{0.75, 0.25})
	// Fresh polled load counts when larger: queued 5 + running 1 = 6 against in-flight 1.
	got = score(sa, &Request{Session: "x"}, cands(spec{inflight: 1, queued: 5, running: 1, known: QR}, spec{inflight: 3}))
	checkScores(t, "polled load", got, []float64{1 - 6.0/7, 1 - 3.0/7})
}

// In a quiet fleet — every engine reports, freshly, no request waiting — a turn's home or
// holders keep their scores and every other candidate scores 0, while the home (or a holder) is
// within the load limit reckoned over the other candidates; one waiting request anywhere, a
// queue the router cannot see, or a home past that limit brings back balance/2.
func TestSessionAwareQuiet(t *testing.T) {
	sa := newSessionAware(AwareOptions{})
	// loads 0, 2, 4 as in TestSessionAwareScores: balance 1, 0.6, 0.2.
	fleet := func(queued int, known Signal, stale bool) []Candidate {
		return cands(
			spec{id: 1, inflight: 0, known: known, stale: stale},
			spec{id: 2, inflight: 2, matched: 4, known: known, stale: stale},
			spec{id: 3, inflight: 4, matched: 2, queued: queued, known: known, stale: stale})
	}
	first := withIndex(&Request{Chain: chain(4), Session: "new"})
	checkScores(t, "first turn, quiet", score(sa, first, fleet(0, QR, false)), []float64{0, 0.9, 0.675})
	// One request waiting on the lesser holder: the other holder is still calm and idle.
	checkScores(t, "first turn, one waiting on a holder", score(sa, first, fleet(1, QR, false)), []float64{0, 0.9, 0.675})
	// A request waiting on every holder: balance/2 for the rest.
	busyHolders := cands(
		spec{id: 1, inflight: 0, known: QR},
		spec{id: 2, inflight: 2, matched: 4, queued: 1, known: QR},
		spec{id: 3, inflight: 4, matched: 2, queued: 1, known: QR})
	checkScores(t, "first turn, every holder waiting", score(sa, first, busyHolders), []float64{0.5, 0.9, 0.675})
	checkScores(t, "first turn, queues stale", score(sa, first, fleet(0, QR, true)), []float64{0.5, 0.9, 0.675})
	checkScores(t, "first turn, queues unknown", score(sa, first, fleet(0, 0, false)), []float64{0.5, 0.9, 0.675})
	// A later turn at home on the second candidate (load 2; the others' limit 2·(2 + 1)).
	later := withIndex(&Request{Chain: chain(4), Session: "old"})
	sa.t.store(sa.t.hash("old"), 2, 4, time.Now().UnixNano())
	checkScores(t, "later turn, quiet", score(sa, later, fleet(0, QR, false)), []float64{0, 1, 0})
	checkScores(t, "later turn, busy", score(sa, later, fleet(0, 0, false)), []float64{0.5, 1, 0.1})
	// At home on a server of load 6 beside two idle ones: within the load limit (2·(2 + 1)),
	// so home, and the quiet fleet keeps the others at 0 — a later turn's history is most of its
	// prompt, so staying costs a batch slot and leaving its whole prefill.
	sa.t.store(sa.t.hash("old"), 3, 2, time.Now().UnixNano())
	lopsided := cands(spec{id: 1, known: QR}, spec{id: 2, known: QR}, spec{id: 3, inflight: 6, matched: 2, known: QR})
	checkScores(t, "later turn, home at the load limit", score(sa, later, lopsided), []float64{0, 0, 1})
	// One request waiting anywhere: balance/2 for the others.
	lopsided[0].State.Queued = 1
	checkScores(t, "later turn, home at the load limit, one waiting", score(sa, later, lopsided), []float64{0.5 * (1 - 1.0/7), 0.5, 1})
	// Sessionless requests score prefix and balance in equal parts, quiet or not.
	checkScores(t, "sessionless, quiet", score(sa, withIndex(&Request{Chain: chain(4)}), fleet(0, QR, false)), []float64{0.5, 0.8, 0.35})
	// BalanceWhenQuiet keeps balance/2 in a quiet fleet.
	bal := newSessionAware(AwareOptions{BalanceWhenQuiet: true})
	checkScores(t, "BalanceWhenQuiet", score(bal, first, fleet(0, QR, false)), []float64{0.5, 0.9, 0.675})
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
	req := &Request{Chain: chain(10), BlockSize: 16, PromptTokens: 160}
	tests := []struct {
		name   string
		opts   StickyOptions
		req    *Request
		in     []spec
		want   []BackendID
		opened uint64
	}{
		{"keeps sticky", StickyOptions{}, req,
			[]spec{{matched: 8}, {matched: 7}, {matched: 10}}, []BackendID{0, 2}, 0},
		{"no sticky keeps all", StickyOptions{}, req,
			[]spec{{matched: 1}, {matched: 7}}, []BackendID{0, 1}, 0},
		{"no chain keeps all", StickyOptions{}, &Request{},
			[]spec{{matched: 1}, {matched: 7}}, []BackendID{0, 1}, 0},
		// Sticky TTFT 318560/15928 = 20 s, non-sticky 0 s: 20 s > 18 s → gate opens.
		{"gate opens", StickyOptions{}, req,
			[]spec{{matched: 10, prefill: 318560}, {matched: 0}}, []BackendID{0, 1}, 1},
		// 15928·17 tokens = 17 s ≤ 18 s → stays sticky.
		{"gate holds", StickyOptions{}, req,
			[]spec{{matched: 10, prefill: 15928 * 17}, {matched: 0}}, []BackendID{0}, 0},
		// Custom threshold 0.5 and penalty 1 s at 1000 tok/s: sticky best 1.5 s, other best 0.2 s.
		{"custom gate", StickyOptions{Threshold: 0.5, MaxTTFTPenalty: time.Second, PeakPrefillThroughput: 1000}, req,
			[]spec{{matched: 5, prefill: 1500}, {matched: 4, prefill: 200}}, []BackendID{0, 1}, 1},
	}
	for _, tt := range tests {
		f := newStickyFilter(tt.opts)
		got := f.Filter(tt.req, cands(tt.in...))
		if !sameIDs(got, tt.want) {
			t.Errorf("%s: kept %v, want %v", tt.name, ids(got), tt.want)
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
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
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
