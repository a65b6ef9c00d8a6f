package routing_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/prefixpeer"
	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
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

// Peers' counts change the scores: the load scorers prefer the backend the peers are not using.
func TestPeerInFlightSteersPicks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile Profile
		peers   []BackendInFlight
		want    string
	}{
		{"least-request, peers on b0", profiles.LeastRequest(), []BackendInFlight{{"b0", InFlight{Requests: 3}}}, "b1"},
		{"least-request, peers on b1", profiles.LeastRequest(), []BackendInFlight{{"b1", InFlight{Requests: 3}}}, "b0"},
		{"token-load, peers' prefill on b0", Profile{Scorers: []Weighted{{Scorer: load.TokenBacklog(0), Weight: 1}}},
			[]BackendInFlight{{"b0", InFlight{PrefillTokens: 50_000}}}, "b1"},
		{"token-load, peers' prefill on b1", Profile{Scorers: []Weighted{{Scorer: load.TokenBacklog(0), Weight: 1}}},
			[]BackendInFlight{{"b1", InFlight{PrefillTokens: 50_000}}}, "b0"},
		{"dynamo, peers' blocks on b0", profiles.Dynamo(profiles.DynamoCostOptions{}),
			[]BackendInFlight{{"b0", InFlight{Blocks: 500}}}, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := routingtest.MustNew(t, Options{Profile: tc.profile})
			routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
			SetPeerInFlight(r, tc.peers)
			for i := range 5 {
				if got := routingtest.PickName(t, r, &Request{PromptTokens: 512}); got != tc.want {
					t.Fatalf("pick %d went to %s, want %s", i, got, tc.want)
				}
			}
		})
	}
}

// Candidate.InFlight is own + peers'; Router.InFlight and appendInFlight stay the router's own.
func TestPeerInFlightSums(t *testing.T) {
	spy := &inflightSpy{}
	r := routingtest.MustNew(t, Options{Profile: Profile{Scorers: []Weighted{{Scorer: spy, Weight: 1}}, Picker: pick.RoundRobin()}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	p, _ := r.Pick(&Request{PromptTokens: 32}) // b0 (round robin), 32 tokens = 2 blocks
	defer p.Done(DoneInfo{})
	if p.Backend.Name != "b0" {
		t.Fatalf("picked %s, want b0", p.Backend.Name)
	}
	own := InFlight{Requests: 1, PrefillTokens: 32, Blocks: 2}
	peers := InFlight{Requests: 4, PrefillTokens: 1000, Blocks: 70}
	SetPeerInFlight(r, []BackendInFlight{{"b0", peers}})
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
	if got := PeerInFlight(r, "b0"); got != peers {
		t.Errorf("peerInFlight(b0) = %+v, want %+v", got, peers)
	}
	got := AppendInFlight(r, []BackendInFlight{{"keep", InFlight{}}})
	want := []BackendInFlight{{"keep", InFlight{}}, {"b0", own}, {"b1", InFlight{}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("appendInFlight = %v, want %v", got, want)
	}
}

// Each setPeerInFlight replaces the last: entries for one name add up, names left out drop to
// zero, negative counts read as zero.
func TestSetPeerInFlightReplaces(t *testing.T) {
	r := routingtest.MustNew(t, Options{})
	routingtest.MustUpdate(t, r, routingtest.Fleet(3, routingtest.T0))
	steps := []struct {
		set  []BackendInFlight
		want [3]InFlight // b0, b1, b2
	}{
		{
			set:  []BackendInFlight{{"b0", InFlight{Requests: 2, Blocks: 10}}, {"b0", InFlight{Requests: 3, PrefillTokens: 7}}, {"b1", InFlight{Requests: 1}}},
			want: [3]InFlight{{Requests: 5, PrefillTokens: 7, Blocks: 10}, {Requests: 1}},
		},
		{
			set:  []BackendInFlight{{"b2", InFlight{Requests: 4}}},
			want: [3]InFlight{{}, {}, {Requests: 4}},
		},
		{
			set:  []BackendInFlight{{"b1", InFlight{Requests: -5, PrefillTokens: 3}}, {"", InFlight{Requests: 9}}},
			want: [3]InFlight{{}, {PrefillTokens: 3}, {}},
		},
		{set: nil},
	}
	for i, s := range steps {
		SetPeerInFlight(r, s.set)
		for k, name := range []string{"b0", "b1", "b2"} {
			if got := PeerInFlight(r, name); got != s.want[k] {
				t.Errorf("step %d: peerInFlight(%s) = %+v, want %+v", i, name, got, s.want[k])
			}
			if own, _ := r.InFlight(name); own != (InFlight{}) {
				t.Errorf("step %d: own InFlight(%s) = %+v, want zero", i, name, own)
			}
		}
	}
}

// Counts for a backend the router does not know yet are kept until Update adds it, within
// MaxUnknownPeerNames names.
func TestPeerInFlightUnknownNames(t *testing.T) {
	spy := &inflightSpy{}
	r := routingtest.MustNew(t, Options{Profile: Profile{Scorers: []Weighted{{Scorer: spy, Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(1, routingtest.T0))
	later := InFlight{Requests: 7, PrefillTokens: 70}
	SetPeerInFlight(r, []BackendInFlight{{"later", InFlight{Requests: 3}}, {"later", InFlight{Requests: 4, PrefillTokens: 70}}, {"b0", InFlight{Requests: 1}}})
	if got := PeerInFlight(r, "later"); got != later {
		t.Fatalf("peerInFlight(later) before Update = %+v, want %+v", got, later)
	}
	if _, ok := r.Lookup("later"); ok {
		t.Fatal("Lookup knows a backend no Update named")
	}
	s := routingtest.Fleet(1, routingtest.T0)
	s = append(s, BackendState{Name: "later", Health: Healthy, UpdatedAt: routingtest.T0})
	routingtest.MustUpdate(t, r, s)
	if id, ok := r.Lookup("later"); !ok || id != 1 {
		t.Errorf("Lookup(later) = %d, %v; want 1, true", id, ok)
	}
	routingtest.PickName(t, r, &Request{})
	if got := spy.seen("later"); got != later {
		t.Errorf("candidate later sees %+v, want the kept %+v", got, later)
	}
	if got := PeerInFlight(r, "later"); got != later {
		t.Errorf("peerInFlight(later) after Update = %+v, want %+v", got, later)
	}

	// The bound: names beyond MaxUnknownPeerNames are dropped and counted.
	const extra = 10
	peers := make([]BackendInFlight, MaxUnknownPeerNames+extra)
	for i := range peers {
		peers[i] = BackendInFlight{fmt.Sprint("unknown-", i), InFlight{Requests: 1}}
	}
	peers = append(peers, BackendInFlight{"unknown-0", InFlight{Requests: 1}}) // a kept name adds up
	SetPeerInFlight(r, peers)
	if got := r.Stats().DroppedPeerNames; got != extra {
		t.Errorf("DroppedPeerNames = %d, want %d", got, extra)
	}
	if got := PeerInFlight(r, "unknown-0"); got.Requests != 2 {
		t.Errorf("peerInFlight(unknown-0) = %+v, want 2 requests", got)
	}
	if got := PeerInFlight(r, fmt.Sprint("unknown-", MaxUnknownPeerNames)); got != (InFlight{}) {
		t.Errorf("a name past the bound was kept: %+v", got)
	}
	if got := PeerInFlight(r, "later"); got != (InFlight{}) {
		t.Errorf("peerInFlight(later) = %+v after a set that left it out, want zero", got)
	}
	// Replacing forgets the unknown names too.
	SetPeerInFlight(r, nil)
	if got := PeerInFlight(r, "unknown-0"); got != (InFlight{}) {
		t.Errorf("peerInFlight(unknown-0) = %+v after an empty set, want zero", got)
	}
}

// setPeerInFlight and Update run while picks do (meant for -race).
func TestSetPeerInFlightConcurrent(t *testing.T) {
	r, req := routingtest.BenchRouter(t, 16, profiles.LeastRequest())
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
	peers := make([]BackendInFlight, 0, 32)
	for i := range 200 {
		peers = peers[:0]
		for k := range states {
			peers = append(peers, BackendInFlight{states[k].Name, InFlight{Requests: int64((i + k) % 5)}})
		}
		peers = append(peers, BackendInFlight{fmt.Sprint("new-", i%3), InFlight{Requests: 1}})
		SetPeerInFlight(r, peers)
		if i%50 == 0 {
			routingtest.MustUpdate(t, r, states)
		}
		_ = AppendInFlight(r, nil)
	}
	close(stop)
	wg.Wait()
}

// Pick stays allocation-free with peers' counts set.
func TestPickWithPeersAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, tc := range []struct {
		name    string
		profile Profile
	}{
		{"four scorers", benchProfile()},
		{"usher", profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: session.AffinityOptions{Seed: 9, Feed: discardFeed{}}}})},
	} {
		r, req := routingtest.BenchRouter(t, 100, tc.profile)
		req.Session = "s1"
		var peers []BackendInFlight
		for i, b := range r.Backends(nil) {
			peers = append(peers, BackendInFlight{b.Name, InFlight{Requests: int64(i % 4), PrefillTokens: int64(i * 100), Blocks: int64(i)}})
		}
		SetPeerInFlight(r, peers)
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
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	fb := prefixpeer.NewBuffer(0)
	r, req, _ := routingtest.BenchRouterIndex(t, 100, profiles.RoundRobin(), prefixcache.Options{Feed: fb})
	if got := fb.Drain(nil); got != 100 {
		t.Fatalf("the feed heard %d inserts while the fleet was set up, want 100", got)
	}
	chains := make([][]prefixcache.BlockHash, 16)
	for i := range chains {
		chains[i] = make([]prefixcache.BlockHash, len(req.Chain))
		for k := range chains[i] {
			chains[i][k] = prefixcache.BlockHash(uint64(i+1)<<32 | uint64(k+1))
		}
	}
	n, heard := 0, 0
	count := func(string, []prefixcache.BlockHash, bool) { heard++ }
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

// Two routers share placements: A places a session's first turn, its feed's placement is
// applied to B, and B sends the next turn to the same backend although it never saw the
// session, where a router without the placement goes elsewhere. Both session scorers.
func TestSessionSharingBetweenRouters(t *testing.T) {
	const seed = 0x5eed
	for _, tc := range []struct {
		name  string
		build func(session.AffinityOptions) Profile
	}{
		{"session-aware", func(o session.AffinityOptions) Profile {
			return profiles.Usher(profiles.UsherOptions{Session: session.AwareOptions{AffinityOptions: o}})
		}},
		{"session-affinity", func(o session.AffinityOptions) Profile {
			return Profile{Scorers: []Weighted{{Scorer: routingtest.MustScorer(session.NewAffinity(o)), Weight: 10}, {Scorer: load.Active(), Weight: 1}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feedA, feedB := &routingtest.PlacementLog{}, &routingtest.PlacementLog{}
			pa, pb, pc := tc.build(session.AffinityOptions{Seed: seed, Feed: feedA}), tc.build(session.AffinityOptions{Seed: seed, Feed: feedB}), tc.build(session.AffinityOptions{Seed: seed})
			a, b, c := routingtest.MustNew(t, Options{Profile: pa}), routingtest.MustNew(t, Options{Profile: pb}), routingtest.MustNew(t, Options{Profile: pc})
			// B and C list the backends in another order, so their ids differ from A's.
			s := routingtest.Fleet(4, routingtest.T0)
			routingtest.MustUpdate(t, a, s)
			rev := []BackendState{s[3], s[2], s[1], s[0]}
			routingtest.MustUpdate(t, b, rev)
			routingtest.MustUpdate(t, c, rev)

			req := &Request{Session: "conversation-1", PromptTokens: 256}
			home := routingtest.PickName(t, a, req)
			got := feedA.Take()
			if len(got) != 1 || got[0].Backend != home || got[0].Blocks != 0 || !got[0].Expires.Equal(routingtest.T0.Add(session.DefaultPlacementTTL)) {
				t.Fatalf("A's feed heard %+v, want one placement on %s expiring %v", got, home, routingtest.T0.Add(session.DefaultPlacementTTL))
			}
			pl0 := got[0]
			// B and C have one peer request on home (not enough to overload it): placed for
			// balance, the turn would go elsewhere.
			for _, r := range []*Router{b, c} {
				SetPeerInFlight(r, []BackendInFlight{{home, InFlight{Requests: 1}}})
			}
			placers := ProfileSessionScorers(pb)
			if len(placers) != 1 {
				t.Fatalf("sessionScorers found %d, want 1", len(placers))
			}
			for _, pl := range got {
				id, ok := b.Lookup(pl.Backend)
				if !ok || !placers[0].LearnPlacement(pl.Session, id, pl.Blocks, pl.Expires) {
					t.Fatalf("B did not learn %+v (known %v)", pl, ok)
				}
			}
			if echo := feedB.Take(); len(echo) != 0 {
				t.Errorf("B's feed heard the learnt placement: %+v", echo)
			}
			if got := routingtest.PickName(t, c, req); got == home {
				t.Fatalf("the control router without the placement also chose %s: the test shows nothing", home)
			}
			if got := routingtest.PickName(t, b, req); got != home {
				t.Errorf("B placed the next turn on %s, want %s where A placed the session", got, home)
			}
			// B's own pick is reported, under the same hash as A's (the Seed is shared).
			if got := feedB.Take(); len(got) != 1 || got[0].Session != pl0.Session || got[0].Backend != home {
				t.Errorf("B's own pick: feed heard %+v, want session %d on %s", got, pl0.Session, home)
			}
		})
	}
}

func TestProfileSessionScorers(t *testing.T) {
	sa := routingtest.MustScorer(session.NewAffinity(session.AffinityOptions{}))
	// A part that is both a filter and a scorer, as routing/outlier's Detector, added as its
	// With adds it.
	withBoth := profiles.Usher(profiles.UsherOptions{})
	withBoth.Filters = append([]Filter{&filterScorer{}}, withBoth.Filters...)
	withBoth.Scorers = append(slices.Clone(withBoth.Scorers), Weighted{Scorer: &filterScorer{}, Weight: 1})
	for _, tc := range []struct {
		name    string
		profile Profile
		want    int
	}{
		{"usher", profiles.Usher(profiles.UsherOptions{}), 1},
		{"usher with a filter and scorer", withBoth, 1},
		{"llm-d default", profiles.LLMDDefault(), 0},
		{"one scorer twice", Profile{Scorers: []Weighted{{Scorer: sa, Weight: 1}, {Scorer: sa, Weight: 2}}}, 1},
		{"two tables", Profile{Scorers: []Weighted{{Scorer: sa, Weight: 1}, {Scorer: routingtest.MustScorer(session.NewAware(session.AwareOptions{})), Weight: 2}}}, 2},
	} {
		if got := ProfileSessionScorers(tc.profile); len(got) != tc.want {
			t.Errorf("%s: %d session scorers, want %d", tc.name, len(got), tc.want)
		}
	}
	p := profiles.Usher(profiles.UsherOptions{})
	if got := ProfileSessionScorers(p); got[0] != p.Scorers[0].Scorer.(SessionPlacer) {
		t.Error("Usher's session scorer is not its sessionAware")
	}
}

func TestRouterSessionScorers(t *testing.T) {
	p := profiles.Usher(profiles.UsherOptions{})
	r, err := New(Options{Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	got, want := RouterSessionScorers(r), ProfileSessionScorers(p)
	if len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		t.Errorf("Router.sessionScorers = %v, want the profile's %v", got, want)
	}
	rr, _ := New(Options{Profile: profiles.RoundRobin()})
	if s := RouterSessionScorers(rr); len(s) != 0 {
		t.Errorf("round-robin has session scorers %v", s)
	}
}

// filterScorer is a filter and a scorer that observes picks and outcomes, as routing/outlier's
// Detector.
type filterScorer struct{}

func (*filterScorer) Filter(_ *Request, cands []Candidate) []Candidate { return cands }
func (*filterScorer) Score(*Request, []Candidate, []float64)           {}
func (*filterScorer) Picked(*Request, *Candidate, time.Time)           {}
func (*filterScorer) Completed(BackendID, time.Time, DoneInfo)         {}
