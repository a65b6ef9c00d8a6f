//go:build pending_split

package routing

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestSessionTableSteps(t *testing.T) {
	tb := newSessionTable(SessionOptions{TTL: 10 * time.Second, MaxSessions: 4})
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
	tb := newSessionTable(SessionOptions{MaxSessions: 100})
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

func TestSessionAffinity(t *testing.T) {
	sa := newSessionAffinity(SessionOptions{TTL: time.Minute})
	now := t0
	r := mustNew(t, Options{Now: func() time.Time { return now }, Profile: Profile{
		Scorers: []Weighted{{sa, 10}, {ActiveRequests(), 1}},
	}})
	mustUpdate(t, r, fleet(5, t0))
	first, _ := r.Pick(&Request{Session: "alice"})
	home := first.Backend.Name
	// While alice's first request is in flight, the active-request scorer would avoid home;
	// affinity keeps her there.
	for range 5 {
		p, _ := r.Pick(&Request{Session: "alice"})
		if p.Backend.Name != home {
			t.Fatalf("alice moved from %s to %s", home, p.Backend.Name)
		}
	}
	// Without a session the load scorer decides: not home.
	p, _ := r.Pick(&Request{})
	if p.Backend.Name == home {
		t.Errorf("sessionless request went to the loaded %s", home)
	}
	// After the TTL, alice is placed by load again.
	now = now.Add(2 * time.Minute)
	q, _ := r.Pick(&Request{Session: "alice"})
	if q.Backend.Name == home {
		t.Errorf("expired affinity still held alice on %s", home)
	}
}

// sessionFleet is a router over 8 fresh backends, a fake index, and a SessionAware scorer.
func sessionFleet(t *testing.T, profile func(*sessionAware) Profile) (*Router, *fakeIndex, *sessionAware, []BackendState) {
	ix := newFakeIndex()
	sa := newSessionAware(SessionAwareOptions{})
	r := mustNew(t, Options{Index: ix, Profile: profile(sa)})
	s := fleet(8, t0)
	mustUpdate(t, r, s)
	return r, ix, sa, s
}

func usherWith(sa *sessionAware) Profile {
	p := Usher(UsherOptions{})
	p.Scorers[0].Scorer = sa
	return p
}

// A shared opening cached on one server pulls new sessions onto it only as far as the load
// limit when it is most of their prompt, and not at all when it is a small part of it; llm-d's
// default blend sends them all there.
func TestSessionAwareSharedOpeningPrompt(t *testing.T) {
	// placed places 8 new sessions, each the opening system plus own blocks of its own, on a
	// fleet where the server holding the opening, b0, has queued requests waiting (a busy
	// holder) or none (a quiet one).
	placed := func(profile func(*sessionAware) Profile, system []BlockHash, own, queued int) map[string]int {
		r, ix, _, states := sessionFleet(t, profile)
		states[0].Queued = queued
		mustUpdate(t, r, states)
		ix.hold("b0", system)
		on := map[string]int{}
		for i := range 8 {
			c := append([]BlockHash{}, system...)
			for k := range own {
				c = append(c, BlockHash(1000+100*i+k))
			}
			p, err := r.Pick(&Request{Chain: c, Session: fmt.Sprint("s", i)})
			if err != nil {
				t.Fatal(err)
			}
			on[p.Backend.Name]++
		}
		return on
	}
	// A 3-block opening before 4 blocks of the session's own: less than KeptFraction, so
	// SessionAware scores the share each calm server holds (3/7 on b0, 1.5 · 3/7 ≈ 0.64 in the
	// blend). While b0 has a request waiting DynamoCost weighs its in-flight sessions more than
	// that after one session, and the eight new sessions land on eight servers.
	if on := placed(usherWith, chain(3), 4, 1); len(on) != 8 {
		t.Errorf("short opening, busy holder: usher placed 8 new sessions as %v, want 8 servers", on)
	}
	// In a quiet, settled fleet DynamoCost abstains: the opening pulls sessions to the servers
	// that hold it while they are within the load limit reckoned over the others, and no further.
	on := placed(usherWith, chain(3), 4, 0)
	for name, n := range on {
		if n > 3 || n > on["b0"] {
			t.Errorf("short opening, quiet holder: %s got %d of 8 new sessions (%v), want at most 3 and no more than b0", name, n, on)
		}
	}
	if on["b0"] < 2 || len(on) < 3 {
		t.Errorf("short opening, quiet holder: placed 8 new sessions as %v, want b0 to take 2 or 3 and the rest spread", on)
	}
	// A 6-block opening before 1 block: most of each prompt is cached on b0, so sessions go
	// there — but never past its load limit (2·(mean load + 1)) — then to the next server that
	// holds the opening. While the holder has a request waiting, the others keep half their
	// balance, and DynamoCost's in-flight blocks stop the pull sooner.
	on = placed(usherWith, chain(6), 1, 1)
	if on["b0"] < 2 || on["b0"] > 3 {
		t.Errorf("long opening, busy holder: b0 got %d of 8 new sessions (%v), want 2 or 3", on["b0"], on)
	}
	for name, n := range on {
		if n > 3 {
			t.Errorf("long opening, busy holder: %s got %d new sessions, more than the load limit lets through", name, n)
		}
	}
	// With a quiet holder it outranks the rest while it is within the load limit reckoned
	// over the other servers; past it the others keep half their balance again, and the
	// sessions spread over the servers that now hold the opening.
	on = placed(usherWith, chain(6), 1, 0)
	for name, n := range on {
		if n > 3 {
			t.Errorf("long opening, quiet fleet: %s got %d new sessions (%v), more than the load limit lets through", name, n, on)
		}
	}
	if on["b0"] != 3 || len(on) > 4 {
		t.Errorf("long opening, quiet fleet: placed as %v, want 3 on b0 and the rest on few holders", on)
	}
	// BalanceWhenQuiet places the quiet holder's sessions as the busy holder's.
	busyRule := func(*sessionAware) Profile {
		return usherWith(newSessionAware(SessionAwareOptions{BalanceWhenQuiet: true}))
	}
	if on := placed(busyRule, chain(6), 1, 0); on["b0"] < 2 || on["b0"] > 3 {
		t.Errorf("long opening, BalanceWhenQuiet: b0 got %d of 8 new sessions (%v), want 2 or 3", on["b0"], on)
	}
	// With BalanceFirstTurns the opening does not pull at all.
	balanced := func(*sessionAware) Profile {
		return usherWith(newSessionAware(SessionAwareOptions{BalanceFirstTurns: true}))
	}
	if on := placed(balanced, chain(6), 1, 0); len(on) != 8 {
		t.Errorf("BalanceFirstTurns: placed 8 new sessions as %v, want 8 servers", on)
	}
	// llm-d's default blend sends all of them to the warm server (polled queues have not moved).
	ix2 := newFakeIndex()
	r2 := mustNew(t, Options{Index: ix2, Profile: LLMDDefault()})
	mustUpdate(t, r2, fleet(8, t0))
	ix2.hold("b0", chain(6))
	for i := range 8 {
		p, _ := r2.Pick(&Request{Chain: append(chain(6), BlockHash(1000+i)), Session: fmt.Sprint("s", i)})
		if p.Backend.Name != "b0" {
			t.Fatalf("llm-d default placed new session %d on %s; the comparison expects b0", i, p.Backend.Name)
		}
	}
}

// A fork — a new session whose prompt is an earlier conversation plus a message — goes where
// that conversation is cached, though that server is busier, and leaves it when it is
// overloaded.
func TestSessionAwareFork(t *testing.T) {
	r, ix, _, states := sessionFleet(t, usherWith)
	parent := chain(20)
	ix.hold("b5", parent)
	fork := append(append([]BlockHash{}, parent...), 4242)
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == "b5" {
			states[i].Queued = 2 // 2 ≤ 2·(2/8 + 1)
		}
	}
	mustUpdate(t, r, states)
	p, err := r.Pick(&Request{Chain: fork, Session: "fork-1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b5" {
		t.Errorf("fork went to %s, want b5, which holds 20 of its 21 blocks", p.Backend.Name)
	}
	p.Done(DoneInfo{FirstTokenAt: t0})
	states[5].Queued = 9 // 9 > 2·(9/8 + 1): overloaded
	mustUpdate(t, r, states)
	q, _ := r.Pick(&Request{Chain: fork, Session: "fork-2"})
	if q.Backend.Name == "b5" {
		t.Errorf("fork went to overloaded b5")
	}
}

func TestSessionAwareLaterTurns(t *testing.T) {
	r, ix, sa, states := sessionFleet(t, usherWith)
	turn1 := chain(10)
	turn2 := append(append([]BlockHash{}, turn1...), 900, 901)
	p, _ := r.Pick(&Request{Chain: turn1, Session: "s"})
	home := p.Backend.Name
	p.Done(DoneInfo{FirstTokenAt: t0}) // turn 1's blocks are now cached on home

	// Moderately loaded home (queue 2 vs 0 elsewhere: 2 ≤ 2·(0.25+1)): the turn stays.
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == home {
			states[i].Queued = 2
		}
	}
	mustUpdate(t, r, states)
	q, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if q.Backend.Name != home {
		t.Fatalf("turn 2 went to %s, want home %s", q.Backend.Name, home)
	}
	q.Done(DoneInfo{FirstTokenAt: t0})

	// Overloaded home (queue 10 > 2·(1.25+1)): the turn moves, counted.
	for i := range states {
		if states[i].Name == home {
			states[i].Queued = 10
		}
	}
	mustUpdate(t, r, states)
	m, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if m.Backend.Name == home {
		t.Fatalf("turn 3 stayed on overloaded %s", home)
	}
	if sa.Moved() != 1 {
		t.Errorf("Moved = %d, want 1", sa.Moved())
	}
	newHome := m.Backend.Name
	m.Done(DoneInfo{FirstTokenAt: t0})

	// History evicted from the new home: placed for balance, which need not be that server.
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == newHome {
			states[i].Queued = 1
		}
	}
	mustUpdate(t, r, states)
	ix.mu.Lock()
	ix.held[ix.names[newHome]] = map[BlockHash]bool{}
	ix.mu.Unlock()
	e, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if e.Backend.Name == newHome {
		t.Errorf("evicted history still held the session on %s (queue 1 vs 0)", newHome)
	}
	if sa.Moved() != 2 {
		t.Errorf("Moved = %d, want 2", sa.Moved())
	}
}

// A sessionless request weighs prefix and balance equally.
func TestSessionAwareScores(t *testing.T) {
	sa := newSessionAware(SessionAwareOptions{})
	req := &Request{Chain: chain(4), indexed: true}
	// loads 0, 2, 4: balance 1 − L/5 = 1, 0.6, 0.2; limit 2·(2+1) = 6, nobody overloaded;
	// ratios 0, 1, 0.5.
	three := func() []Candidate {
		return cands(cand{inflight: 0}, cand{inflight: 2, matched: 4}, cand{inflight: 4, matched: 2})
	}
	checkScores(t, "sessionless", score(sa, req, three()), []float64{0.5, 0.8, 0.35})
	// First turn (unknown session): the candidates holding at least half of it (2 of 4 blocks)
	// outrank the other, 1/2 + (share + balance)/4 against balance/2.
	req.Session = "new"
	checkScores(t, "first turn", score(sa, req, three()), []float64{0.5, 0.9, 0.675})
	// Nobody holds half of it: the share each candidate within the load limit reckoned over
	// the others holds (all three here: 0 ≤ 2·(3+1), 2 ≤ 2·(2+1), 4 ≤ 2·(1+1)), none of their
	// balance — the load terms beside it weigh the load.
	checkScores(t, "first turn, small matches", score(sa, req, cands(cand{inflight: 0}, cand{inflight: 2, matched: 1}, cand{inflight: 4, matched: 1})),
		[]float64{0, 0.25, 0.25})
	// A small match on a candidate past that limit (loads 0, 0, 5: 5 > 2·(0+1)) counts for
	// nothing, and scores 0 like the others that hold nothing.
	checkScores(t, "first turn, small match past the others' limit", score(sa, req, cands(cand{}, cand{matched: 1}, cand{inflight: 5, matched: 1})),
		[]float64{0, 0.25, 0})
	// Nobody holds any of it, or only candidates past that limit do: balance only.
	checkScores(t, "first turn, nothing held", score(sa, req, cands(cand{inflight: 0}, cand{inflight: 2}, cand{inflight: 4})),
		[]float64{1, 0.6, 0.2})
	checkScores(t, "first turn, held only past the limit", score(sa, req, cands(cand{}, cand{}, cand{inflight: 5, matched: 1})),
		[]float64{1, 1, 1.0 / 6})
	// The only holder is overloaded (loads 0, 0, 12: limit 2·(4+1) = 10): balance only.
	checkScores(t, "first turn, holder overloaded", score(sa, req, cands(cand{}, cand{}, cand{inflight: 12, matched: 4})),
		[]float64{1, 1, 1.0 / 13})
	// BalanceFirstTurns: balance only.
	bal := newSessionAware(SessionAwareOptions{BalanceFirstTurns: true})
	checkScores(t, "BalanceFirstTurns", score(bal, req, three()), []float64{1, 0.6, 0.2})
	// Sessionless with an overloaded candidate: loads 0, 0, 0, 12: mean 3, limit 8; balance
	// 1, 1, 1, 1 − 12/13; the full match on the overloaded one counts for nothing.
	got := score(sa, &Request{Chain: chain(4)}, cands(cand{}, cand{matched: 2}, cand{}, cand{inflight: 12, matched: 4}))
	checkScores(t, "sessionless overloaded", got, []float64{0.5, 0.75, 0.5, (1.0 / 13) / 4})
	// Stale polled load falls back to the router's own count, not to zero: loads 1, 3.
	got = score(sa, &Request{Session: "x"}, cands(cand{inflight: 1, queued: 50, known: QR, stale: true}, cand{inflight: 3}))
	checkScores(t, "stale load", got, []float64{0.75, 0.25})
	// Fresh polled load counts when larger: queued 5 + running 1 = 6 against in-flight 1.
	got = score(sa, &Request{Session: "x"}, cands(cand{inflight: 1, queued: 5, running: 1, known: QR}, cand{inflight: 3}))
	checkScores(t, "polled load", got, []float64{1 - 6.0/7, 1 - 3.0/7})
}

// In a quiet fleet — every engine reports, freshly, no request waiting — a turn's home or
// holders keep their scores and every other candidate scores 0, while the home (or a holder) is
// within the load limit reckoned over the other candidates; one waiting request anywhere, a
// queue the router cannot see, or a home past that limit brings back balance/2.
func TestSessionAwareQuiet(t *testing.T) {
	sa := newSessionAware(SessionAwareOptions{})
	// loads 0, 2, 4 as in TestSessionAwareScores: balance 1, 0.6, 0.2.
	fleet := func(queued int, known Signal, stale bool) []Candidate {
		return cands(
			cand{id: 1, inflight: 0, known: known, stale: stale},
			cand{id: 2, inflight: 2, matched: 4, known: known, stale: stale},
			cand{id: 3, inflight: 4, matched: 2, queued: queued, known: known, stale: stale})
	}
	first := &Request{Chain: chain(4), indexed: true, Session: "new"}
	checkScores(t, "first turn, quiet", score(sa, first, fleet(0, QR, false)), []float64{0, 0.9, 0.675})
	// One request waiting on the lesser holder: the other holder is still calm and idle.
	checkScores(t, "first turn, one waiting on a holder", score(sa, first, fleet(1, QR, false)), []float64{0, 0.9, 0.675})
	// A request waiting on every holder: balance/2 for the rest.
	busyHolders := cands(
		cand{id: 1, inflight: 0, known: QR},
		cand{id: 2, inflight: 2, matched: 4, queued: 1, known: QR},
		cand{id: 3, inflight: 4, matched: 2, queued: 1, known: QR})
	checkScores(t, "first turn, every holder waiting", score(sa, first, busyHolders), []float64{0.5, 0.9, 0.675})
	checkScores(t, "first turn, queues stale", score(sa, first, fleet(0, QR, true)), []float64{0.5, 0.9, 0.675})
	checkScores(t, "first turn, queues unknown", score(sa, first, fleet(0, 0, false)), []float64{0.5, 0.9, 0.675})
	// A later turn at home on the second candidate (load 2; the others' limit 2·(2 + 1)).
	later := &Request{Chain: chain(4), indexed: true, Session: "old"}
	sa.t.store(sa.t.hash("old"), 2, 4, time.Now().UnixNano())
	checkScores(t, "later turn, quiet", score(sa, later, fleet(0, QR, false)), []float64{0, 1, 0})
	checkScores(t, "later turn, busy", score(sa, later, fleet(0, 0, false)), []float64{0.5, 1, 0.1})
	// At home on a server of load 6 beside two idle ones: within the load limit (2·(2 + 1)),
	// so home, and the quiet fleet keeps the others at 0 — a later turn's history is most of its
	// prompt, so staying costs a batch slot and leaving its whole prefill.
	sa.t.store(sa.t.hash("old"), 3, 2, time.Now().UnixNano())
	lopsided := cands(cand{id: 1, known: QR}, cand{id: 2, known: QR}, cand{id: 3, inflight: 6, matched: 2, known: QR})
	checkScores(t, "later turn, home at the load limit", score(sa, later, lopsided), []float64{0, 0, 1})
	// One request waiting anywhere: balance/2 for the others.
	lopsided[0].State.Queued = 1
	checkScores(t, "later turn, home at the load limit, one waiting", score(sa, later, lopsided), []float64{0.5 * (1 - 1.0/7), 0.5, 1})
	// Sessionless requests score prefix and balance in equal parts, quiet or not.
	checkScores(t, "sessionless, quiet", score(sa, &Request{Chain: chain(4), indexed: true}, fleet(0, QR, false)), []float64{0.5, 0.8, 0.35})
	// BalanceWhenQuiet keeps balance/2 in a quiet fleet.
	bal := newSessionAware(SessionAwareOptions{BalanceWhenQuiet: true})
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
		tb := newSessionTable(SessionOptions{TTL: 100, MaxSessions: 8})
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

// A home that lost part of the history keeps the session while no other server holds more of
// the prompt, and loses it to one that does.
func TestSessionAwarePartlyEvictedHome(t *testing.T) {
	r, ix, sa, _ := sessionFleet(t, usherWith)
	turn1 := chain(10)
	p, _ := r.Pick(&Request{Chain: turn1, Session: "s"})
	home := p.Backend.Name
	p.Done(DoneInfo{FirstTokenAt: t0})
	turn2 := append(append([]BlockHash{}, turn1...), 900, 901)
	// The home keeps 3 of the 10 blocks (less than KeptFraction), nobody else holds any.
	ix.mu.Lock()
	ix.held[ix.names[home]] = map[BlockHash]bool{}
	ix.mu.Unlock()
	ix.hold(home, turn1[:3])
	q, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if q.Backend.Name != home || sa.Moved() != 0 {
		t.Errorf("turn 2 went to %s (home %s), Moved %d: what is left at home should keep it", q.Backend.Name, home, sa.Moved())
	}
	q.Done(DoneInfo{FirstTokenAt: t0})
	// Another server holds 6 blocks of the prompt (a fork's copy), the home still 3: it moves.
	other := "b0"
	if home == other {
		other = "b1"
	}
	ix.mu.Lock()
	ix.held[ix.names[home]] = map[BlockHash]bool{}
	ix.mu.Unlock()
	ix.hold(home, turn1[:3])
	ix.hold(other, turn1[:6])
	m, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if m.Backend.Name == home || sa.Moved() != 1 {
		t.Errorf("turn 3 went to %s (home %s), Moved %d: want it to leave", m.Backend.Name, home, sa.Moved())
	}
}
