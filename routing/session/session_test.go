package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

// The session scorers through Routers, and the tests that need routing/profiles (which
// imports this package).

// aware is the scorer session.NewAware returns.
type aware interface {
	Scorer
	Moved() uint64
}

// placer is a session scorer's LearnPlacement.
type placer interface {
	LearnPlacement(session uint64, id BackendID, blocks int, expires time.Time) bool
}

func newAware(t *testing.T, opts session.AwareOptions) aware {
	t.Helper()
	s, err := session.NewAware(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s.(aware)
}

func TestSessionAffinity(t *testing.T) {
	sa := routingtest.MustScorer(session.NewAffinity(session.AffinityOptions{TTL: time.Minute}))
	now := routingtest.T0
	r := routingtest.MustNew(t, Options{Now: func() time.Time { return now }, Profile: Profile{
		Scorers: []Weighted{{Scorer: sa, Weight: 10}, {Scorer: load.Active(), Weight: 1}},
	}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(5, routingtest.T0))
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
func sessionFleet(t *testing.T, profile func(aware) Profile) (*Router, *routingtest.FakeIndex, aware, []BackendState) {
	ix := routingtest.NewFakeIndex()
	sa := newAware(t, session.AwareOptions{})
	r := routingtest.MustNew(t, Options{Index: ix, Profile: profile(sa)})
	s := routingtest.Fleet(8, routingtest.T0)
	routingtest.MustUpdate(t, r, s)
	return r, ix, sa, s
}

func usherWith(sa aware) Profile {
	p := profiles.Usher(profiles.UsherOptions{})
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
	placed := func(profile func(aware) Profile, system []prefixcache.BlockHash, own, queued int) map[string]int {
		r, ix, _, states := sessionFleet(t, profile)
		states[0].Queued = queued
		routingtest.MustUpdate(t, r, states)
		ix.Hold("b0", system)
		on := map[string]int{}
		for i := range 8 {
			c := append([]prefixcache.BlockHash{}, system...)
			for k := range own {
				c = append(c, prefixcache.BlockHash(1000+100*i+k))
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
	if on := placed(usherWith, routingtest.Chain(3), 4, 1); len(on) != 8 {
		t.Errorf("short opening, busy holder: usher placed 8 new sessions as %v, want 8 servers", on)
	}
	// In a quiet, settled fleet DynamoCost abstains: the opening pulls sessions to the servers
	// that hold it while they are within the load limit reckoned over the others, and no further.
	on := placed(usherWith, routingtest.Chain(3), 4, 0)
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
	on = placed(usherWith, routingtest.Chain(6), 1, 1)
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
	on = placed(usherWith, routingtest.Chain(6), 1, 0)
	for name, n := range on {
		if n > 3 {
			t.Errorf("long opening, quiet fleet: %s got %d new sessions (%v), more than the load limit lets through", name, n, on)
		}
	}
	if on["b0"] != 3 || len(on) > 4 {
		t.Errorf("long opening, quiet fleet: placed as %v, want 3 on b0 and the rest on few holders", on)
	}
	// BalanceWhenQuiet places the quiet holder's sessions as the busy holder's.
	busyRule := func(aware) Profile {
		return usherWith(newAware(t, session.AwareOptions{BalanceWhenQuiet: true}))
	}
	if on := placed(busyRule, routingtest.Chain(6), 1, 0); on["b0"] < 2 || on["b0"] > 3 {
		t.Errorf("long opening, BalanceWhenQuiet: b0 got %d of 8 new sessions (%v), want 2 or 3", on["b0"], on)
	}
	// With BalanceFirstTurns the opening does not pull at all.
	balanced := func(aware) Profile {
		return usherWith(newAware(t, session.AwareOptions{BalanceFirstTurns: true}))
	}
	if on := placed(balanced, routingtest.Chain(6), 1, 0); len(on) != 8 {
		t.Errorf("BalanceFirstTurns: placed 8 new sessions as %v, want 8 servers", on)
	}
	// llm-d's default blend sends all of them to the warm server (polled queues have not moved).
	ix2 := routingtest.NewFakeIndex()
	r2 := routingtest.MustNew(t, Options{Index: ix2, Profile: profiles.LLMDDefault()})
	routingtest.MustUpdate(t, r2, routingtest.Fleet(8, routingtest.T0))
	ix2.Hold("b0", routingtest.Chain(6))
	for i := range 8 {
		p, _ := r2.Pick(&Request{Chain: append(routingtest.Chain(6), prefixcache.BlockHash(1000+i)), Session: fmt.Sprint("s", i)})
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
	parent := routingtest.Chain(20)
	ix.Hold("b5", parent)
	fork := append(append([]prefixcache.BlockHash{}, parent...), 4242)
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == "b5" {
			states[i].Queued = 2 // 2 ≤ 2·(2/8 + 1)
		}
	}
	routingtest.MustUpdate(t, r, states)
	p, err := r.Pick(&Request{Chain: fork, Session: "fork-1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b5" {
		t.Errorf("fork went to %s, want b5, which holds 20 of its 21 blocks", p.Backend.Name)
	}
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0})
	states[5].Queued = 9 // 9 > 2·(9/8 + 1): overloaded
	routingtest.MustUpdate(t, r, states)
	q, _ := r.Pick(&Request{Chain: fork, Session: "fork-2"})
	if q.Backend.Name == "b5" {
		t.Errorf("fork went to overloaded b5")
	}
}

func TestSessionAwareLaterTurns(t *testing.T) {
	r, ix, sa, states := sessionFleet(t, usherWith)
	turn1 := routingtest.Chain(10)
	turn2 := append(append([]prefixcache.BlockHash{}, turn1...), 900, 901)
	p, _ := r.Pick(&Request{Chain: turn1, Session: "s"})
	home := p.Backend.Name
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0}) // turn 1's blocks are now cached on home

	// Moderately loaded home (queue 2 vs 0 elsewhere: 2 ≤ 2·(0.25+1)): the turn stays.
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == home {
			states[i].Queued = 2
		}
	}
	routingtest.MustUpdate(t, r, states)
	q, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if q.Backend.Name != home {
		t.Fatalf("turn 2 went to %s, want home %s", q.Backend.Name, home)
	}
	q.Done(DoneInfo{FirstTokenAt: routingtest.T0})

	// Overloaded home (queue 10 > 2·(1.25+1)): the turn moves, counted.
	for i := range states {
		if states[i].Name == home {
			states[i].Queued = 10
		}
	}
	routingtest.MustUpdate(t, r, states)
	m, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if m.Backend.Name == home {
		t.Fatalf("turn 3 stayed on overloaded %s", home)
	}
	if sa.Moved() != 1 {
		t.Errorf("Moved = %d, want 1", sa.Moved())
	}
	newHome := m.Backend.Name
	m.Done(DoneInfo{FirstTokenAt: routingtest.T0})

	// History evicted from the new home: placed for balance, which need not be that server.
	for i := range states {
		states[i].Queued = 0
		if states[i].Name == newHome {
			states[i].Queued = 1
		}
	}
	routingtest.MustUpdate(t, r, states)
	ix.Forget(newHome)
	e, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if e.Backend.Name == newHome {
		t.Errorf("evicted history still held the session on %s (queue 1 vs 0)", newHome)
	}
	if sa.Moved() != 2 {
		t.Errorf("Moved = %d, want 2", sa.Moved())
	}
}

// A home that lost part of the history keeps the session while no other server holds more of
// the prompt, and loses it to one that does.
func TestSessionAwarePartlyEvictedHome(t *testing.T) {
	r, ix, sa, _ := sessionFleet(t, usherWith)
	turn1 := routingtest.Chain(10)
	p, _ := r.Pick(&Request{Chain: turn1, Session: "s"})
	home := p.Backend.Name
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0})
	turn2 := append(append([]prefixcache.BlockHash{}, turn1...), 900, 901)
	// The home keeps 3 of the 10 blocks (less than KeptFraction), nobody else holds any.
	ix.Forget(home)
	ix.Hold(home, turn1[:3])
	q, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if q.Backend.Name != home || sa.Moved() != 0 {
		t.Errorf("turn 2 went to %s (home %s), Moved %d: what is left at home should keep it", q.Backend.Name, home, sa.Moved())
	}
	q.Done(DoneInfo{FirstTokenAt: routingtest.T0})
	// Another server holds 6 blocks of the prompt (a fork's copy), the home still 3: it moves.
	other := "b0"
	if home == other {
		other = "b1"
	}
	ix.Forget(home)
	ix.Hold(home, turn1[:3])
	ix.Hold(other, turn1[:6])
	m, _ := r.Pick(&Request{Chain: turn2, Session: "s"})
	if m.Backend.Name == home || sa.Moved() != 1 {
		t.Errorf("turn 3 went to %s (home %s), Moved %d: want it to leave", m.Backend.Name, home, sa.Moved())
	}
}

// LearnPlacement through the scorers' API, not reported to the feed.
func TestLearnPlacementScorers(t *testing.T) {
	log := &routingtest.PlacementLog{}
	opts := session.AffinityOptions{Seed: 77, Feed: log}
	h := session.TableHash(opts, "alice")
	for _, sp := range []placer{routingtest.MustScorer(session.NewAffinity(opts)).(placer), routingtest.MustScorer(session.NewAware(session.AwareOptions{AffinityOptions: opts})).(placer)} {
		if !sp.LearnPlacement(h, 2, 5, routingtest.T0.Add(time.Minute)) {
			t.Errorf("%T: LearnPlacement = false", sp)
		}
		if sp.LearnPlacement(h, 3, 5, routingtest.T0.Add(time.Second)) {
			t.Errorf("%T: an earlier placement replaced a later one", sp)
		}
	}
	if got := log.Take(); len(got) != 0 {
		t.Errorf("feed heard learnt placements: %+v", got)
	}
}

// The feed hears each placement a pick makes: hashed session, backend name, blocks, expiry.
func TestSessionFeedPlaced(t *testing.T) {
	log := &routingtest.PlacementLog{}
	sa := routingtest.MustScorer(session.NewAffinity(session.AffinityOptions{TTL: time.Minute, Seed: 3, Feed: log}))
	now := routingtest.T0
	r := routingtest.MustNew(t, Options{Now: func() time.Time { return now }, Profile: Profile{Scorers: []Weighted{{Scorer: sa, Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(3, routingtest.T0))
	home := routingtest.PickName(t, r, &Request{Session: "bob", Chain: routingtest.Chain(6)})
	now = now.Add(time.Second)
	routingtest.PickName(t, r, &Request{}) // no session: not reported
	routingtest.PickName(t, r, &Request{Session: "bob", Chain: routingtest.Chain(9)})
	h := session.ScorerHash(sa, "bob")
	want := []routingtest.Placement{{Session: h, Backend: home, Blocks: 6, Expires: routingtest.T0.Add(time.Minute)}, {Session: h, Backend: home, Blocks: 9, Expires: routingtest.T0.Add(time.Minute + time.Second)}}
	got := log.Take()
	if len(got) != len(want) {
		t.Fatalf("feed heard %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Session != want[i].Session || got[i].Backend != want[i].Backend || got[i].Blocks != want[i].Blocks || !got[i].Expires.Equal(want[i].Expires) {
			t.Errorf("placement %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
