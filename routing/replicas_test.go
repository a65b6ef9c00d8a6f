//go:build pending_split

package routing

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/prefixcache"
)

// inflightSpy is a scorer that records the Candidate.InFlight it was shown, by name.
type inflightSpy struct {
	mu  sync.Mutex
	saw map[string]InFlight
}

func (s *inflightSpy) Score(_ *Request, cands []Candidate, dst []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saw = make(map[string]InFlight, len(cands))
	for i := range cands {
		s.saw[cands[i].State.Name] = cands[i].InFlight
	}
	clear(dst)
}

func (s *inflightSpy) seen(name string) InFlight {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saw[name]
}

func pickName(t *testing.T, r *Router, req *Request) string {
	t.Helper()
	p, err := r.Pick(req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Done(DoneInfo{})
	return p.Backend.Name
}

// Peers' counts change the scores: the load scorers prefer the backend the peers are not using.
func TestPeerInFlightSteersPicks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile Profile
		peers   []backendInFlight
		want    string
	}{
		{"least-request, peers on b0", LeastRequest(), []backendInFlight{{"b0", InFlight{Requests: 3}}}, "b1"},
		{"least-request, peers on b1", LeastRequest(), []backendInFlight{{"b1", InFlight{Requests: 3}}}, "b0"},
		{"token-load, peers' prefill on b0", Profile{Scorers: []Weighted{{TokenLoad(0), 1}}},
			[]backendInFlight{{"b0", InFlight{PrefillTokens: 50_000}}}, "b1"},
		{"token-load, peers' prefill on b1", Profile{Scorers: []Weighted{{TokenLoad(0), 1}}},
			[]backendInFlight{{"b1", InFlight{PrefillTokens: 50_000}}}, "b0"},
		{"dynamo, peers' blocks on b0", Dynamo(DynamoOptions{}),
			[]backendInFlight{{"b0", InFlight{Blocks: 500}}}, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, Options{Profile: tc.profile})
			mustUpdate(t, r, fleet(2, t0))
			r.setPeerInFlight(tc.peers)
			for i := range 5 {
				if got := pickName(t, r, &Request{PromptTokens: 512}); got != tc.want {
					t.Fatalf("pick %d went to %s, want %s", i, got, tc.want)
				}
			}
		})
	}
}

// Candidate.InFlight is own + peers'; Router.InFlight and appendInFlight stay the router's own.
func TestPeerInFlightSums(t *testing.T) {
	spy := &inflightSpy{}
	r := mustNew(t, Options{Profile: Profile{Scorers: []Weighted{{spy, 1}}, Picker: RoundRobinPicker()}})
	mustUpdate(t, r, fleet(2, t0))
	p, _ := r.Pick(&Request{PromptTokens: 32}) // b0 (round robin), 32 tokens = 2 blocks
	defer p.Done(DoneInfo{})
	if p.Backend.Name != "b0" {
		t.Fatalf("picked %s, want b0", p.Backend.Name)
	}
	own := InFlight{Requests: 1, PrefillTokens: 32, Blocks: 2}
	peers := InFlight{Requests: 4, PrefillTokens: 1000, Blocks: 70}
	r.setPeerInFlight([]backendInFlight{{"b0", peers}})
	q, _ := r.Pick(&Request{PromptTokens: 16})
	q.Done(DoneInfo{})
	if got, want := spy.seen("b0"), (InFlight{Requests: 5, PrefillTokens: 1032, Blocks: 72}); got != want {
		t.Errorf("candidate b0 in flight %+v, want own + peers %+v", got, want)
	}
	if got := spy.seen("b1"); got != (InFlight{}) {
		t.Errorf("candidate b1 in flight %+v, want zero", got)
	}
	if got, _ := r.InFlight("b0"); got != own {
		t.Errorf("InFlight(b0) = %+v, want the router's own %+v", got, own)
	}
	if got := r.peerInFlight("b0"); got != peers {
		t.Errorf("peerInFlight(b0) = %+v, want %+v", got, peers)
	}
	got := r.appendInFlight([]backendInFlight{{"keep", InFlight{}}})
	want := []backendInFlight{{"keep", InFlight{}}, {"b0", own}, {"b1", InFlight{}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("appendInFlight = %v, want %v", got, want)
	}
}

// Each setPeerInFlight replaces the last: entries for one name add up, names left out drop to
// zero, negative counts read as zero.
func TestSetPeerInFlightReplaces(t *testing.T) {
	r := mustNew(t, Options{})
	mustUpdate(t, r, fleet(3, t0))
	steps := []struct {
		set  []backendInFlight
		want [3]InFlight // b0, b1, b2
	}{
		{
			set:  []backendInFlight{{"b0", InFlight{Requests: 2, Blocks: 10}}, {"b0", InFlight{Requests: 3, PrefillTokens: 7}}, {"b1", InFlight{Requests: 1}}},
			want: [3]InFlight{{Requests: 5, PrefillTokens: 7, Blocks: 10}, {Requests: 1}},
		},
		{
			set:  []backendInFlight{{"b2", InFlight{Requests: 4}}},
			want: [3]InFlight{{}, {}, {Requests: 4}},
		},
		{
			set:  []backendInFlight{{"b1", InFlight{Requests: -5, PrefillTokens: 3}}, {"", InFlight{Requests: 9}}},
			want: [3]InFlight{{}, {PrefillTokens: 3}, {}},
		},
		{set: nil},
	}
	for i, s := range steps {
		r.setPeerInFlight(s.set)
		for k, name := range []string{"b0", "b1", "b2"} {
			if got := r.peerInFlight(name); got != s.want[k] {
				t.Errorf("step %d: peerInFlight(%s) = %+v, want %+v", i, name, got, s.want[k])
			}
			if own, _ := r.InFlight(name); own != (InFlight{}) {
				t.Errorf("step %d: own InFlight(%s) = %+v, want zero", i, name, own)
			}
		}
	}
}

// Counts for a backend the router does not know yet are kept until Update adds it, within
// maxUnknownPeerNames names.
func TestPeerInFlightUnknownNames(t *testing.T) {
	spy := &inflightSpy{}
	r := mustNew(t, Options{Profile: Profile{Scorers: []Weighted{{spy, 1}}}})
	mustUpdate(t, r, fleet(1, t0))
	later := InFlight{Requests: 7, PrefillTokens: 70}
	r.setPeerInFlight([]backendInFlight{{"later", InFlight{Requests: 3}}, {"later", InFlight{Requests: 4, PrefillTokens: 70}}, {"b0", InFlight{Requests: 1}}})
	if got := r.peerInFlight("later"); got != later {
		t.Fatalf("peerInFlight(later) before Update = %+v, want %+v", got, later)
	}
	if _, ok := r.Lookup("later"); ok {
		t.Fatal("Lookup knows a backend no Update named")
	}
	s := fleet(1, t0)
	s = append(s, BackendState{Name: "later", Health: Healthy, UpdatedAt: t0})
	mustUpdate(t, r, s)
	if id, ok := r.Lookup("later"); !ok || id != 1 {
		t.Errorf("Lookup(later) = %d, %v; want 1, true", id, ok)
	}
	pickName(t, r, &Request{})
	if got := spy.seen("later"); got != later {
		t.Errorf("candidate later sees %+v, want the kept %+v", got, later)
	}
	if got := r.peerInFlight("later"); got != later {
		t.Errorf("peerInFlight(later) after Update = %+v, want %+v", got, later)
	}

	// The bound: names beyond maxUnknownPeerNames are dropped and counted.
	const extra = 10
	peers := make([]backendInFlight, maxUnknownPeerNames+extra)
	for i := range peers {
		peers[i] = backendInFlight{fmt.Sprint("unknown-", i), InFlight{Requests: 1}}
	}
	peers = append(peers, backendInFlight{"unknown-0", InFlight{Requests: 1}}) // a kept name adds up
	r.setPeerInFlight(peers)
	if got := r.Stats().DroppedPeerNames; got != extra {
		t.Errorf("DroppedPeerNames = %d, want %d", got, extra)
	}
	if got := r.peerInFlight("unknown-0"); got.Requests != 2 {
		t.Errorf("peerInFlight(unknown-0) = %+v, want 2 requests", got)
	}
	if got := r.peerInFlight(fmt.Sprint("unknown-", maxUnknownPeerNames)); got != (InFlight{}) {
		t.Errorf("a name past the bound was kept: %+v", got)
	}
	if got := r.peerInFlight("later"); got != (InFlight{}) {
		t.Errorf("peerInFlight(later) = %+v after a set that left it out, want zero", got)
	}
	// Replacing forgets the unknown names too.
	r.setPeerInFlight(nil)
	if got := r.peerInFlight("unknown-0"); got != (InFlight{}) {
		t.Errorf("peerInFlight(unknown-0) = %+v after an empty set, want zero", got)
	}
}

// Saturation counts the peers' requests as waiting, like the router's own.
func TestSaturationCountsPeers(t *testing.T) {
	r := mustNew(t, Options{})
	mustUpdate(t, r, []BackendState{{Name: "a", Health: Healthy, UpdatedAt: t0, Known: SignalQueued | SignalRunning}})
	if got := r.Saturation(SaturationOptions{}); got != 0 {
		t.Fatalf("idle saturation %v", got)
	}
	r.setPeerInFlight([]backendInFlight{{"a", InFlight{Requests: 2}}})
	if got := r.Saturation(SaturationOptions{}); got != 0.5 {
		t.Errorf("saturation with 2 peer requests = %v, want 2/4", got)
	}
	p, _ := r.Pick(&Request{})
	defer p.Done(DoneInfo{})
	p2, _ := r.Pick(&Request{})
	defer p2.Done(DoneInfo{})
	if got := r.Saturation(SaturationOptions{}); got != 1 {
		t.Errorf("saturation with 2 own + 2 peer requests = %v, want 1", got)
	}
}

// setPeerInFlight and Update run while picks do (meant for -race).
func TestSetPeerInFlightConcurrent(t *testing.T) {
	r, req := benchRouter(t, 16, LeastRequest())
	states := r.Backends(nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := r.Pick(req)
				if err != nil {
					t.Error(err)
					return
				}
				p.Done(DoneInfo{})
			}
		})
	}
	peers := make([]backendInFlight, 0, 32)
	for i := range 200 {
		peers = peers[:0]
		for k := range states {
			peers = append(peers, backendInFlight{states[k].Name, InFlight{Requests: int64((i + k) % 5)}})
		}
		peers = append(peers, backendInFlight{fmt.Sprint("new-", i%3), InFlight{Requests: 1}})
		r.setPeerInFlight(peers)
		if i%50 == 0 {
			mustUpdate(t, r, states)
		}
		_ = r.appendInFlight(nil)
	}
	close(stop)
	wg.Wait()
}

// Pick stays allocation-free with peers' counts set.
func TestPickWithPeersAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, tc := range []struct {
		name    string
		profile Profile
	}{
		{"four scorers", benchProfile()},
		{"usher", Usher(UsherOptions{Session: SessionAwareOptions{SessionOptions: SessionOptions{Seed: 9, Feed: discardFeed{}}}})},
	} {
		r, req := benchRouter(t, 100, tc.profile)
		req.Session = "s1"
		var peers []backendInFlight
		for i, b := range r.Backends(nil) {
			peers = append(peers, backendInFlight{b.Name, InFlight{Requests: int64(i % 4), PrefillTokens: int64(i * 100), Blocks: int64(i)}})
		}
		r.setPeerInFlight(peers)
		allocs := pickAllocs(t, r, req)
		if allocs != 0 {
			t.Errorf("%s: Pick+FirstToken+Done with peers allocates %v times, want 0", tc.name, allocs)
		}
	}
}

// A pick that learns a fresh chain and a Done that retracts it, with the index reporting both
// to a prefixpeer.Buffer (the replica package's) that is drained every few picks: still no
// allocation.
func TestPickWithPrefixFeedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	fb := prefixpeer.NewBuffer(0)
	r, req := benchRouterIndex(t, 100, RoundRobinProfile(), prefixcache.Options{Feed: fb})
	if got := fb.Drain(nil); got != 100 {
		t.Fatalf("the feed heard %d inserts while the fleet was set up, want 100", got)
	}
	chains := make([][]BlockHash, 16)
	for i := range chains {
		chains[i] = make([]BlockHash, len(req.Chain))
		for k := range chains[i] {
			chains[i][k] = BlockHash(uint64(i+1)<<32 | uint64(k+1))
		}
	}
	n, heard := 0, 0
	count := func(string, []BlockHash, bool) { heard++ }
	cycle := func() {
		req.Chain = chains[n%len(chains)]
		n++
		p, err := r.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(DoneInfo{Err: errBench}) // retracts the prediction: a Remove
		if n%8 == 0 {
			fb.Drain(count)
		}
	}
	for range 64 {
		cycle()
	}
	if allocs := testing.AllocsPerRun(200, cycle); allocs != 0 {
		t.Errorf("Pick+Done with a prefix feed allocates %v times, want 0", allocs)
	}
	fb.Drain(count)
	if want := 2 * n; heard != want || fb.Dropped() != 0 {
		t.Errorf("the feed heard %d changes (%d dropped), want %d: an insert and a removal per pick", heard, fb.Dropped(), want)
	}
}

type discardFeed struct{}

func (discardFeed) Placed(uint64, string, int, time.Time) {}

// placement is one SessionFeed call.
type placement struct {
	session uint64
	backend string
	blocks  int
	expires time.Time
}

// placementLog is a SessionFeed that keeps what it hears.
type placementLog struct {
	mu  sync.Mutex
	got []placement
}

func (l *placementLog) Placed(session uint64, backend string, blocks int, expires time.Time) {
	l.mu.Lock()
	l.got = append(l.got, placement{session, backend, blocks, expires})
	l.mu.Unlock()
}

func (l *placementLog) take() []placement {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// Two routers share placements: A places a session's first turn, its feed's placement is
// applied to B, and B sends the next turn to the same backend although it never saw the
// session, where a router without the placement goes elsewhere. Both session scorers.
func TestSessionSharingBetweenRouters(t *testing.T) {
	const seed = 0x5eed
	for _, tc := range []struct {
		name  string
		build func(SessionOptions) Profile
	}{
		{"session-aware", func(o SessionOptions) Profile {
			return Usher(UsherOptions{Session: SessionAwareOptions{SessionOptions: o}})
		}},
		{"session-affinity", func(o SessionOptions) Profile {
			return Profile{Scorers: []Weighted{{newSessionAffinity(o), 10}, {ActiveRequests(), 1}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feedA, feedB := &placementLog{}, &placementLog{}
			pa, pb, pc := tc.build(SessionOptions{Seed: seed, Feed: feedA}), tc.build(SessionOptions{Seed: seed, Feed: feedB}), tc.build(SessionOptions{Seed: seed})
			a, b, c := mustNew(t, Options{Profile: pa}), mustNew(t, Options{Profile: pb}), mustNew(t, Options{Profile: pc})
			// B and C list the backends in another order, so their ids differ from A's.
			s := fleet(4, t0)
			mustUpdate(t, a, s)
			rev := []BackendState{s[3], s[2], s[1], s[0]}
			mustUpdate(t, b, rev)
			mustUpdate(t, c, rev)

			req := &Request{Session: "conversation-1", PromptTokens: 256}
			home := pickName(t, a, req)
			got := feedA.take()
			if len(got) != 1 || got[0].backend != home || got[0].blocks != 0 || !got[0].expires.Equal(t0.Add(DefaultSessionTTL)) {
				t.Fatalf("A's feed heard %+v, want one placement on %s expiring %v", got, home, t0.Add(DefaultSessionTTL))
			}
			pl0 := got[0]
			// B and C have one peer request on home (not enough to overload it): placed for
			// balance, the turn would go elsewhere.
			for _, r := range []*Router{b, c} {
				r.setPeerInFlight([]backendInFlight{{home, InFlight{Requests: 1}}})
			}
			placers := pb.sessionScorers()
			if len(placers) != 1 {
				t.Fatalf("sessionScorers found %d, want 1", len(placers))
			}
			for _, pl := range got {
				id, ok := b.Lookup(pl.backend)
				if !ok || !placers[0].LearnPlacement(pl.session, id, pl.blocks, pl.expires) {
					t.Fatalf("B did not learn %+v (known %v)", pl, ok)
				}
			}
			if echo := feedB.take(); len(echo) != 0 {
				t.Errorf("B's feed heard the learnt placement: %+v", echo)
			}
			if got := pickName(t, c, req); got == home {
				t.Fatalf("the control router without the placement also chose %s: the test shows nothing", home)
			}
			if got := pickName(t, b, req); got != home {
				t.Errorf("B placed the next turn on %s, want %s where A placed the session", got, home)
			}
			// B's own pick is reported, under the same hash as A's (the Seed is shared).
			if got := feedB.take(); len(got) != 1 || got[0].session != pl0.session || got[0].backend != home {
				t.Errorf("B's own pick: feed heard %+v, want session %d on %s", got, pl0.session, home)
			}
		})
	}
}

// LearnPlacement keeps whichever placement expires later, and does not evict a placement that
// outlives the one learnt.
func TestLearnPlacementKeepsLater(t *testing.T) {
	tb := newSessionTable(SessionOptions{TTL: 10 * time.Second, MaxSessions: 4})
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

// LearnPlacement through the scorers' API, not reported to the feed.
func TestLearnPlacementScorers(t *testing.T) {
	log := &placementLog{}
	opts := SessionOptions{Seed: 77, Feed: log}
	h := newSessionTable(opts).hash("alice")
	for _, sp := range []sessionPlacer{newSessionAffinity(opts), newSessionAware(SessionAwareOptions{SessionOptions: opts})} {
		if !sp.LearnPlacement(h, 2, 5, t0.Add(time.Minute)) {
			t.Errorf("%T: LearnPlacement = false", sp)
		}
		if sp.LearnPlacement(h, 3, 5, t0.Add(time.Second)) {
			t.Errorf("%T: an earlier placement replaced a later one", sp)
		}
	}
	if got := log.take(); len(got) != 0 {
		t.Errorf("feed heard learnt placements: %+v", got)
	}
}

// The feed hears each placement a pick makes: hashed session, backend name, blocks, expiry.
func TestSessionFeedPlaced(t *testing.T) {
	log := &placementLog{}
	sa := newSessionAffinity(SessionOptions{TTL: time.Minute, Seed: 3, Feed: log})
	now := t0
	r := mustNew(t, Options{Now: func() time.Time { return now }, Profile: Profile{Scorers: []Weighted{{sa, 1}}}})
	mustUpdate(t, r, fleet(3, t0))
	home := pickName(t, r, &Request{Session: "bob", Chain: chain(6)})
	now = now.Add(time.Second)
	pickName(t, r, &Request{}) // no session: not reported
	pickName(t, r, &Request{Session: "bob", Chain: chain(9)})
	h := sa.t.hash("bob")
	want := []placement{{h, home, 6, t0.Add(time.Minute)}, {h, home, 9, t0.Add(time.Minute + time.Second)}}
	got := log.take()
	if len(got) != len(want) {
		t.Fatalf("feed heard %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].session != want[i].session || got[i].backend != want[i].backend || got[i].blocks != want[i].blocks || !got[i].expires.Equal(want[i].expires) {
			t.Errorf("placement %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Tables with the same nonzero Seed hash ids alike; other seeds, and Seed 0 (random per table),
// do not.
func TestSessionSeed(t *testing.T) {
	a, b := newSessionTable(SessionOptions{Seed: 42}), newSessionTable(SessionOptions{Seed: 42, MaxSessions: 8})
	other := newSessionTable(SessionOptions{Seed: 43})
	r1, r2 := newSessionTable(SessionOptions{}), newSessionTable(SessionOptions{})
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
	tb := newSessionTable(SessionOptions{Seed: 5})
	id := "a-session-id-longer-than-thirty-two-bytes-0123456789"
	if n := testing.AllocsPerRun(100, func() { _ = tb.hash(id) }); n != 0 {
		t.Errorf("hash allocates %v times", n)
	}
}

func TestProfileSessionScorers(t *testing.T) {
	sa := newSessionAffinity(SessionOptions{})
	o, err := NewOutlier(OutlierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		profile Profile
		want    int
	}{
		{"usher", Usher(UsherOptions{}), 1},
		{"usher with outlier", WithOutlier(Usher(UsherOptions{}), o, 1), 1},
		{"llm-d default", LLMDDefault(), 0},
		{"one scorer twice", Profile{Scorers: []Weighted{{sa, 1}, {sa, 2}}}, 1},
		{"two tables", Profile{Scorers: []Weighted{{sa, 1}, {newSessionAware(SessionAwareOptions{}), 2}}}, 2},
	} {
		if got := tc.profile.sessionScorers(); len(got) != tc.want {
			t.Errorf("%s: %d session scorers, want %d", tc.name, len(got), tc.want)
		}
	}
	p := Usher(UsherOptions{})
	if got := p.sessionScorers(); got[0] != p.Scorers[0].Scorer.(sessionPlacer) {
		t.Error("Usher's session scorer is not its sessionAware")
	}
}

func TestRouterSessionScorers(t *testing.T) {
	p := Usher(UsherOptions{})
	r, err := New(Options{Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	got, want := r.sessionScorers(), p.sessionScorers()
	if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		t.Errorf("Router.sessionScorers = %v, want the profile's %v", got, want)
	}
	rr, _ := New(Options{Profile: RoundRobinProfile()})
	if s := rr.sessionScorers(); len(s) != 0 {
		t.Errorf("round-robin has session scorers %v", s)
	}
}
