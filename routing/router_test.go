package routing_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
	"github.com/usher-llm/usher/routing/session"
)

func TestNewRejectsBadOptions(t *testing.T) {
	bad := []Options{
		{BlockSize: -1},
		{Profile: Profile{Filters: []Filter{nil}}},
		{Profile: Profile{Scorers: []Weighted{{Scorer: nil, Weight: 1}}}},
		{Profile: Profile{Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: -1}}}},
		{Profile: Profile{Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: math.NaN()}}}},
		{Profile: Profile{Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: math.Inf(1)}}}},
	}
	for i, o := range bad {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("options %d: err = %v, want ErrInvalidOptions", i, err)
		}
	}
}

func TestErrNoBackend(t *testing.T) {
	r := routingtest.MustNew(t, Options{Profile: Profile{Filters: []Filter{outlier.HealthFilter()}}})
	if _, err := r.Pick(&Request{}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("empty router: err = %v, want ErrNoBackend", err)
	}
	s := routingtest.Fleet(2, routingtest.T0)
	s[0].Role, s[1].Role = RolePrefill, RolePrefill
	routingtest.MustUpdate(t, r, s)
	if _, err := r.Pick(&Request{Role: RoleDecode}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("no decode backend: err = %v, want ErrNoBackend", err)
	}
	s[0].Health, s[1].Health = Unhealthy, Unhealthy
	routingtest.MustUpdate(t, r, s)
	if _, err := r.Pick(&Request{}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("all unhealthy: err = %v, want ErrNoBackend", err)
	}
	routingtest.MustUpdate(t, r, nil)
	if _, err := r.Pick(&Request{}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("emptied: err = %v, want ErrNoBackend", err)
	}
	if got := r.Stats().NoBackend; got != 4 {
		t.Errorf("Stats.NoBackend = %d, want 4", got)
	}
}

func TestRoleRouting(t *testing.T) {
	r := routingtest.MustNew(t, Options{})
	s := routingtest.Fleet(3, routingtest.T0)
	s[0].Role, s[1].Role, s[2].Role = RolePrefill, RoleDecode, RoleBoth
	routingtest.MustUpdate(t, r, s)
	for range 50 {
		p, err := r.Pick(&Request{Role: RolePrefill})
		if err != nil {
			t.Fatal(err)
		}
		if p.Backend.Role == RoleDecode {
			t.Fatalf("prefill request went to a decode backend %s", p.Backend.Name)
		}
		p.Done(DoneInfo{})
	}
}

// Nothing a filter removed is ever picked, whatever the scores say.
func TestFilterRespected(t *testing.T) {
	onlyOdd := FilterFunc(func(_ *Request, cs []Candidate) []Candidate {
		out := cs[:0]
		for _, c := range cs {
			if c.ID%2 == 1 {
				out = append(out, c)
			}
		}
		return out
	})
	// A scorer that would prefer even ids.
	preferEven := ScorerFunc(func(_ *Request, cs []Candidate, dst []float64) {
		for i, c := range cs {
			if c.ID%2 == 0 {
				dst[i] = 1
			}
		}
	})
	for _, pk := range []Picker{pick.MaxScore(), pick.WeightedRandom(), pick.PowerOfTwo(), pick.RoundRobin(), pick.Softmax(0.5)} {
		r := routingtest.MustNew(t, Options{Profile: Profile{Filters: []Filter{onlyOdd}, Scorers: []Weighted{{Scorer: preferEven, Weight: 5}}, Picker: pk}})
		routingtest.MustUpdate(t, r, routingtest.Fleet(9, routingtest.T0))
		for range 200 {
			p, err := r.Pick(&Request{})
			if err != nil {
				t.Fatal(err)
			}
			if p.ID%2 != 1 {
				t.Fatalf("%T picked %s (id %d), which the filter removed", pk, p.Backend.Name, p.ID)
			}
			p.Done(DoneInfo{})
		}
	}
}

// TestLearnOnPick checks the default learning: the chosen backend holds the chain from the
// pick on (a sibling sent right behind co-locates), a success inserts nothing more, and a
// failure before the first token retracts exactly the blocks the backend did not hold.
func TestLearnOnPick(t *testing.T) {
	ix := routingtest.NewFakeIndex()
	r := routingtest.MustNew(t, Options{Index: ix, Profile: Profile{Scorers: []Weighted{{Scorer: prefix.Ratio(), Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(4, routingtest.T0))
	c := routingtest.Chain(8)
	ix.Hold("b2", c[:3])

	p, err := r.Pick(&Request{Chain: c})
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b2" || p.MatchedBlocks != 3 || ix.Inserts != 1 {
		t.Fatalf("first pick %s matched %d, %d inserts; want b2, 3, 1", p.Backend.Name, p.MatchedBlocks, ix.Inserts)
	}
	sib, _ := r.Pick(&Request{Chain: c})
	if sib.Backend.Name != "b2" || sib.MatchedBlocks != 8 {
		t.Fatalf("sibling went to %s matching %d, want b2 matching all 8 predicted blocks", sib.Backend.Name, sib.MatchedBlocks)
	}
	if ix.Inserts != 1 {
		t.Fatalf("a chain already held was inserted again (%d inserts)", ix.Inserts)
	}
	p.FirstToken(routingtest.T0)
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0})
	if ix.Inserts != 1 || ix.Removes != 0 {
		t.Fatalf("success changed the index: %d inserts, %d removes", ix.Inserts, ix.Removes)
	}
	sib.Done(DoneInfo{Err: errors.New("reset")}) // matched everything: nothing of its own to retract
	if ix.Removes != 0 || r.Stats().Retracted != 0 {
		t.Fatalf("a failure that predicted nothing retracted (%d removes)", ix.Removes)
	}

	// A new chain on a fresh backend, failing before its first token: its predicted blocks go.
	c2 := make([]prefixcache.BlockHash, 8)
	for i := range c2 {
		c2[i] = prefixcache.BlockHash(100 + i)
	}
	ix.Hold("b1", c2[:2])
	p, _ = r.Pick(&Request{Chain: c2})
	if p.Backend.Name != "b1" {
		t.Fatalf("picked %s, want b1", p.Backend.Name)
	}
	p.Done(DoneInfo{Err: errors.New("connect refused")})
	if ix.Removes != 1 || r.Stats().Retracted != 1 {
		t.Fatalf("removes %d, retracted %d; want 1, 1", ix.Removes, r.Stats().Retracted)
	}
	if m := ix.Match(nil, c2); m[1] != 2 {
		t.Fatalf("after the retraction b1 holds %d blocks of the chain, want the 2 it held before", m[1])
	}
	// A failure after its first token keeps the blocks: the server computed them.
	p, _ = r.Pick(&Request{Chain: c2})
	p.FirstToken(routingtest.T0)
	p.Done(DoneInfo{Err: errors.New("stream broken"), FirstTokenAt: routingtest.T0})
	if m := ix.Match(nil, c2); int(m[1]) != len(c2) || ix.Removes != 1 {
		t.Fatalf("a failure after the first token retracted: b1 holds %d of %d", m[1], len(c2))
	}

	// LearnFromEvents never touches the index.
	ix2 := routingtest.NewFakeIndex()
	r2 := routingtest.MustNew(t, Options{Index: ix2, Profile: Profile{Learn: LearnFromEvents}})
	routingtest.MustUpdate(t, r2, routingtest.Fleet(2, routingtest.T0))
	p, _ = r2.Pick(&Request{Chain: c})
	p.FirstToken(routingtest.T0)
	p.Done(DoneInfo{})
	p, _ = r2.Pick(&Request{Chain: c})
	p.Done(DoneInfo{Err: errors.New("x")})
	if ix2.Inserts != 0 || ix2.Removes != 0 {
		t.Fatalf("LearnFromEvents: %d inserts, %d removes", ix2.Inserts, ix2.Removes)
	}
	if _, err := New(Options{Profile: Profile{Learn: LearnFromEvents + 1}}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Learn out of range: %v", err)
	}
}

func TestInFlightAccounting(t *testing.T) {
	ix := routingtest.NewFakeIndex()
	r := routingtest.MustNew(t, Options{Index: ix, Profile: Profile{Scorers: []Weighted{{Scorer: prefix.Ratio(), Weight: 1}}, Learn: LearnOnFirstToken}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(1, routingtest.T0))
	c := routingtest.Chain(8) // 128 tokens
	ix.Hold("b0", c[:3])

	p, err := r.Pick(&Request{Chain: c, PromptTokens: 130})
	if err != nil {
		t.Fatal(err)
	}
	if p.MatchedBlocks != 3 || p.UncachedTokens != 130-48 {
		t.Fatalf("matched %d uncached %d, want 3 and 82", p.MatchedBlocks, p.UncachedTokens)
	}
	check := func(step string, want InFlight) {
		t.Helper()
		got, ok := r.InFlight("b0")
		if !ok || got != want {
			t.Fatalf("%s: in flight %+v, want %+v", step, got, want)
		}
	}
	check("after pick", InFlight{Requests: 1, PrefillTokens: 82, Blocks: 9})
	p2, _ := r.Pick(&Request{Chain: c, PromptTokens: 130})
	check("after second pick", InFlight{Requests: 2, PrefillTokens: 164, Blocks: 18})

	p.FirstToken(routingtest.T0)
	check("after first token", InFlight{Requests: 2, PrefillTokens: 82, Blocks: 18})
	if ix.Inserts != 1 {
		t.Fatalf("inserts after first token = %d, want 1", ix.Inserts)
	}
	p.FirstToken(routingtest.T0) // harmless
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0, OutputTokens: 5})
	check("after done", InFlight{Requests: 1, PrefillTokens: 82, Blocks: 9})
	if ix.Inserts != 1 {
		t.Fatalf("inserts after done = %d, want still 1", ix.Inserts)
	}

	// Failed before any token: released, nothing inserted.
	p2.Done(DoneInfo{Err: errors.New("reset")})
	check("after failed done", InFlight{})
	if ix.Inserts != 1 {
		t.Fatalf("a failed request inserted blocks")
	}

	// The insert shows up in the next match: all 8 blocks now held.
	p3, _ := r.Pick(&Request{Chain: c})
	if p3.MatchedBlocks != 8 {
		t.Fatalf("matched after insert = %d, want 8", p3.MatchedBlocks)
	}
	// Success without FirstToken inserts at Done.
	p3.Done(DoneInfo{})
	if ix.Inserts != 2 {
		t.Fatalf("inserts after successful done = %d, want 2", ix.Inserts)
	}
	check("end", InFlight{})
}

func TestDoneMisusePanics(t *testing.T) {
	r := routingtest.MustNew(t, Options{})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	p, _ := r.Pick(&Request{})
	copyOfP := p
	p.Done(DoneInfo{})
	for name, f := range map[string]func(){
		"Done twice":             func() { p.Done(DoneInfo{}) },
		"Done on a copy":         func() { copyOfP.Done(DoneInfo{}) },
		"Done on a zero Result":  func() { Result{}.Done(DoneInfo{}) },
		"Done after pool reuse":  func() { q, _ := r.Pick(&Request{}); defer q.Done(DoneInfo{}); p.Done(DoneInfo{}) },
		"FirstToken zero Result": func() { Result{}.FirstToken(routingtest.T0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
	// FirstToken after Done is a no-op, on the request's own ticket and on one a later
	// request reuses: it may be the loser of a legitimate race with Done.
	p.FirstToken(routingtest.T0)
	q, _ := r.Pick(&Request{PromptTokens: 100})
	p.FirstToken(routingtest.T0)
	if got, _ := r.InFlight(q.Backend.Name); got.PrefillTokens != 100 {
		t.Errorf("a stale FirstToken released the next request's prefill: %+v", got)
	}
	q.Done(DoneInfo{})
	if got, _ := r.InFlight(p.Backend.Name); got != (InFlight{}) {
		t.Errorf("misuse changed the counters: %+v", got)
	}
}

// TestFirstTokenRacesDone runs FirstToken and Done of each request on two goroutines at once,
// with learning on the first token (so FirstToken inserts the chain while Done may be
// finishing), while other picks reuse the pooled handles. Under -race this checks that neither
// side sees the handle recycled under it; the counters must come back to zero.
func TestFirstTokenRacesDone(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := routingtest.MustNew(t, Options{Index: ix})
	routingtest.MustUpdate(t, r, routingtest.Fleet(4, routingtest.T0))
	for _, s := range r.Backends(nil) {
		if _, err := ix.AddBackend(s.Name, 0); err != nil {
			t.Fatal(err)
		}
	}
	const workers, rounds = 4, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chain := make([]prefixcache.BlockHash, 64)
			for i := range rounds {
				for k := range chain {
					chain[k] = prefixcache.BlockHash(uint64(w+1)<<40 | uint64(i)<<20 | uint64(k+1))
				}
				p, err := r.Pick(&Request{Chain: chain})
				if err != nil {
					t.Error(err)
					return
				}
				var both sync.WaitGroup
				both.Add(2)
				go func() { defer both.Done(); p.FirstToken(routingtest.T0) }()
				go func() { defer both.Done(); p.Done(DoneInfo{}) }()
				both.Wait()
			}
		}()
	}
	wg.Wait()
	for _, s := range r.Backends(nil) {
		if got, _ := r.InFlight(s.Name); got != (InFlight{}) {
			t.Errorf("%s: in-flight %+v after every request finished, want zero", s.Name, got)
		}
	}
	if st := r.Stats(); st.Done != workers*rounds {
		t.Errorf("Done counted %d, want %d", st.Done, workers*rounds)
	}
}

func TestUpdateKeepsCountersAndIDs(t *testing.T) {
	r := routingtest.MustNew(t, Options{})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	p, _ := r.Pick(&Request{PromptTokens: 10})
	name, id := p.Backend.Name, p.ID

	// Drop the chosen backend, then bring it back: id and counter survive.
	other := routingtest.Fleet(2, routingtest.T0)
	if name == "b0" {
		other = other[1:]
	} else {
		other = other[:1]
	}
	routingtest.MustUpdate(t, r, other)
	if got, _ := r.InFlight(name); got.Requests != 1 {
		t.Fatalf("counter lost when backend left the set: %+v", got)
	}
	p.Done(DoneInfo{})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	if got, _ := r.InFlight(name); got != (InFlight{}) {
		t.Fatalf("counter after return = %+v, want zero", got)
	}
	for range 20 {
		q, _ := r.Pick(&Request{})
		if q.Backend.Name == name && q.ID != id {
			t.Fatalf("id of %s changed from %d to %d", name, id, q.ID)
		}
		q.Done(DoneInfo{})
	}
	if got := len(r.Backends(nil)); got != 2 {
		t.Fatalf("Backends = %d, want 2", got)
	}
}

func TestUpdateValidation(t *testing.T) {
	r := routingtest.MustNew(t, Options{})
	if err := r.Update([]BackendState{{Name: ""}}); !errors.Is(err, ErrInvalidBackend) {
		t.Errorf("empty name: %v", err)
	}
	if err := r.Update([]BackendState{{Name: "a"}, {Name: "a"}}); !errors.Is(err, ErrInvalidBackend) {
		t.Errorf("duplicate name: %v", err)
	}
	s := routingtest.Fleet(1, routingtest.T0)
	s[0].Queued, s[0].Running, s[0].KVUtilization, s[0].KVCapacityBlocks = -1, -2, math.NaN(), 0
	routingtest.MustUpdate(t, r, s)
	if got := r.Stats().InvalidSignals; got != 4 {
		t.Errorf("InvalidSignals = %d, want 4", got)
	}
	if got := r.Backends(nil)[0].Known; got != 0 {
		t.Errorf("Known after sanitising = %v, want 0", got)
	}
	s = routingtest.Fleet(1, time.Time{}) // never observed: nothing is known
	routingtest.MustUpdate(t, r, s)
	if got := r.Backends(nil)[0].Known; got != 0 {
		t.Errorf("Known of a never-observed backend = %v, want 0", got)
	}

	if err := r.Update([]BackendState{{Name: "a", Role: 7}}); !errors.Is(err, ErrInvalidBackend) {
		t.Errorf("bad role: %v", err)
	}
	if err := r.Update([]BackendState{{Name: "a", Health: 9}}); !errors.Is(err, ErrInvalidBackend) {
		t.Errorf("bad health: %v", err)
	}

	ix := routingtest.NewFakeIndex()
	ix.FailAdd = true
	r = routingtest.MustNew(t, Options{Index: ix})
	if err := r.Update(routingtest.Fleet(1, routingtest.T0)); err == nil {
		t.Error("index refusal not reported")
	}
	if _, err := r.Pick(&Request{}); !errors.Is(err, ErrNoBackend) {
		t.Error("a failed Update published a snapshot")
	}
}

// Signals older than StaleAfter are not fresh; the router counts such candidates.
func TestStaleness(t *testing.T) {
	var seen []Candidate
	spy := ScorerFunc(func(_ *Request, cs []Candidate, dst []float64) { seen = append(seen[:0], cs...) })
	r := routingtest.MustNew(t, Options{StaleAfter: time.Second, Profile: Profile{Scorers: []Weighted{{Scorer: spy, Weight: 1}}}})
	s := routingtest.Fleet(3, routingtest.T0)
	s[1].UpdatedAt = routingtest.T0.Add(-2 * time.Second)
	s[2].UpdatedAt = time.Time{}
	routingtest.MustUpdate(t, r, s)
	p, err := r.Pick(&Request{})
	if err != nil {
		t.Fatal(err)
	}
	p.Done(DoneInfo{})
	want := []struct {
		fresh Signal
		stale bool
	}{{AllSignals, false}, {0, true}, {0, true}}
	for i, c := range seen {
		if c.Fresh != want[i].fresh || c.Stale != want[i].stale {
			t.Errorf("candidate %d: fresh %v stale %v, want %v %v", i, c.Fresh, c.Stale, want[i].fresh, want[i].stale)
		}
	}
	if seen[1].Age != 2*time.Second || seen[2].Age >= 0 {
		t.Errorf("ages %v %v, want 2s and negative", seen[1].Age, seen[2].Age)
	}
	if got := r.Stats().StaleCandidates; got != 2 {
		t.Errorf("StaleCandidates = %d, want 2", got)
	}
	// Negative StaleAfter: never stale.
	r = routingtest.MustNew(t, Options{StaleAfter: -1, Profile: Profile{Scorers: []Weighted{{Scorer: spy, Weight: 1}}}})
	s[1].UpdatedAt = routingtest.T0.Add(-time.Hour)
	routingtest.MustUpdate(t, r, s[:2])
	p, _ = r.Pick(&Request{})
	p.Done(DoneInfo{})
	if seen[1].Stale {
		t.Error("StaleAfter < 0 still marked a backend stale")
	}
}

// A custom scorer's NaN and out-of-range scores are clamped and counted, never propagated.
func TestClampedScores(t *testing.T) {
	bad := ScorerFunc(func(_ *Request, cs []Candidate, dst []float64) {
		dst[0], dst[1], dst[2], dst[3] = math.NaN(), -3, 7, 0.5
	})
	r := routingtest.MustNew(t, Options{Profile: Profile{Scorers: []Weighted{{Scorer: bad, Weight: 2}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(4, routingtest.T0))
	for range 20 {
		p, err := r.Pick(&Request{})
		if err != nil {
			t.Fatal(err)
		}
		// Clamped: 0, 0, 1, 0.5 → weighted 0, 0, 2, 1: backend 2 always.
		if p.Backend.Name != "b2" || p.Score != 2 {
			t.Fatalf("picked %s with score %v, want b2 with 2", p.Backend.Name, p.Score)
		}
		p.Done(DoneInfo{})
	}
	if got := r.Stats().ClampedScores; got != 60 {
		t.Errorf("ClampedScores = %d, want 60", got)
	}
}

func TestBadPickerIndex(t *testing.T) {
	wild := pickerFunc(func(_ *Request, _ []Candidate, _ []float64, _ *rand.Rand) int { return 99 })
	r := routingtest.MustNew(t, Options{Profile: Profile{Picker: wild, Scorers: []Weighted{{Scorer: load.Active(), Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(3, routingtest.T0))
	p, err := r.Pick(&Request{})
	if err != nil {
		t.Fatal(err)
	}
	p.Done(DoneInfo{})
	if r.Stats().BadPicks != 1 {
		t.Errorf("BadPicks = %d, want 1", r.Stats().BadPicks)
	}
}

type pickerFunc func(*Request, []Candidate, []float64, *rand.Rand) int

func (f pickerFunc) Pick(r *Request, c []Candidate, s []float64, g *rand.Rand) int {
	return f(r, c, s, g)
}

// Weighted profile arithmetic: llm-d's default blend on three backends by hand.
func TestLLMDDefaultBlend(t *testing.T) {
	ix := routingtest.NewFakeIndex()
	r := routingtest.MustNew(t, Options{Index: ix, Profile: profiles.LLMDDefault()})
	s := routingtest.Fleet(3, routingtest.T0)
	s[0].Queued, s[1].Queued, s[2].Queued = 0, 4, 8
	s[0].KVUtilization, s[1].KVUtilization, s[2].KVUtilization = 0.9, 0.5, 0.1
	routingtest.MustUpdate(t, r, s)
	c := routingtest.Chain(4)
	ix.Hold("b2", c)
	ix.Hold("b1", c[:2])
	// queue scores 1, 0.5, 0; kv 0.1, 0.5, 0.9; prefix 0, 0.5, 1.
	// totals: 2+0.2+0 = 2.2; 1+1+1.5 = 3.5; 0+1.8+3 = 4.8 → b2.
	p, err := r.Pick(&Request{Chain: c})
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b2" || !routingtest.Near(p.Score, 4.8) {
		t.Fatalf("picked %s score %v, want b2 4.8", p.Backend.Name, p.Score)
	}
	p.Done(DoneInfo{Err: errors.New("x")})
}

// Concurrent picks and updates under -race: counters return to zero, every pick is valid.
func TestConcurrentPicksAndUpdates(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := session.NewAware(session.AwareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := routingtest.MustNew(t, Options{Index: ix, Now: time.Now, Profile: Profile{
		Filters: []Filter{outlier.HealthFilter()},
		Scorers: []Weighted{{Scorer: prefix.Ratio(), Weight: 2}, {Scorer: load.QueueDepth(), Weight: 1}, {Scorer: sa, Weight: 3}, {Scorer: load.TokenBacklog(0), Weight: 1}},
		Picker:  pick.WeightedRandom(),
	}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(8, time.Now()))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the one writer
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			s := routingtest.Fleet(4+i%5, time.Now())
			for j := range s {
				s[j].Queued = (i + j) % 7
			}
			if err := r.Update(s); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	const workers, per = 4, 300
	var picks atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := routingtest.Chain(32)
			for i := range per {
				c[0] = prefixcache.BlockHash(w*1000 + i%10 + 1)
				p, err := r.Pick(&Request{Chain: c, Session: fmt.Sprint(w, i%5)})
				if err != nil {
					t.Error(err)
					return
				}
				picks.Add(1)
				if i%3 == 0 {
					p.FirstToken(time.Now())
				}
				p.Done(DoneInfo{})
			}
		}()
	}
	for picks.Load() < workers*per && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	for i := range 8 {
		if got, _ := r.InFlight(fmt.Sprintf("b%d", i)); got != (InFlight{}) {
			t.Errorf("b%d left in flight: %+v", i, got)
		}
	}
	if got := r.Stats().Picks; got != workers*per {
		t.Errorf("Picks = %d, want %d", got, workers*per)
	}
}

func TestPickAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, tc := range []struct {
		name    string
		profile Profile
	}{
		{"four scorers", benchProfile()},
		{"llm-d default", profiles.LLMDDefault()},
		{"llm-d sticky", profiles.LLMDSticky(profiles.LLMDStickyOptions{})},
		{"sglang", profiles.SGLang(profiles.SGLangCacheAwareOptions{})},
		{"dynamo softmax", profiles.Dynamo(profiles.DynamoCostOptions{Temperature: 0.5})},
		{"aibrix", profiles.AIBrix()},
		{"usher", profiles.Usher(profiles.UsherOptions{})},
		{"session affinity", Profile{Scorers: []Weighted{{Scorer: routingtest.MustScorer(session.NewAffinity(session.AffinityOptions{})), Weight: 1}}, Picker: pick.PowerOfTwo()}},
		{"round robin", profiles.RoundRobin()},
		{"tiered prefix", Profile{Scorers: []Weighted{{Scorer: mustTiered(t, prefix.TieredOptions{Index: mediumFake{}}), Weight: 1}}}},
	} {
		r, req := routingtest.BenchRouter(t, 100, tc.profile)
		req.Session = "s1"
		allocs := pickAllocs(t, r, req)
		if allocs != 0 {
			t.Errorf("%s: Pick+FirstToken+Done allocates %v times, want 0", tc.name, allocs)
		}
	}
}

// TieredPrefix through a Router with the real index: a backend holding the whole prompt in CPU
// memory beats one holding a quarter of it on GPU.
func TestTieredPrefixWithIndex(t *testing.T) {
	ix, err := prefixcache.New(prefixcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := routingtest.MustNew(t, Options{Index: ix, Profile: Profile{Scorers: []Weighted{{Scorer: mustTiered(t, prefix.TieredOptions{Index: ix}), Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	seed := prefixcache.Seed("m", "", "")
	tokens := make([]uint32, 128)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	c := prefixcache.HashTokens(nil, seed, tokens, 16)
	b0, _ := ix.AddBackend("b0", 0)
	b1, _ := ix.AddBackend("b1", 0)
	if err := ix.Insert(b0, c[:2]); err != nil {
		t.Fatal(err)
	}
	hashes := make([]uint64, 8)
	for i := range hashes {
		hashes[i] = uint64(100 + i)
	}
	if err := ix.ApplyStored(b1, prefixcache.StoredBlocks{EngineHashes: hashes, Tokens: tokens, BlockSize: 16, Seed: seed, Medium: "CPU"}); err != nil {
		t.Fatal(err)
	}
	p, err := r.Pick(&Request{Chain: c})
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b1" || math.Abs(p.Score-0.833) > 0.001 {
		t.Errorf("picked %s with %v, want b1 with ≈0.833", p.Backend.Name, p.Score)
	}
	if p.MatchedBlocks != 0 || p.UncachedTokens != 128 {
		t.Errorf("GPU match %d, uncached %d: want 0 and 128 (CPU blocks still cost a transfer)", p.MatchedBlocks, p.UncachedTokens)
	}
	p.Done(DoneInfo{Err: errors.New("x")})
}

// The index learns each backend once, and its capacity when it becomes known or changes.
func TestUpdateRegistersCapacity(t *testing.T) {
	ix := routingtest.NewFakeIndex()
	r := routingtest.MustNew(t, Options{Index: ix})
	s := routingtest.Fleet(1, routingtest.T0)
	s[0].Known &^= SignalKVCapacity
	routingtest.MustUpdate(t, r, s) // capacity unknown: 0
	routingtest.MustUpdate(t, r, s) // nothing new
	s[0].Known |= SignalKVCapacity
	s[0].KVCapacityBlocks = 500
	routingtest.MustUpdate(t, r, s) // capacity known: 500
	routingtest.MustUpdate(t, r, s) // unchanged
	s[0].KVCapacityBlocks = 800
	routingtest.MustUpdate(t, r, s) // changed: 800
	want := []string{"b0:0", "b0:500", "b0:800"}
	if fmt.Sprint(ix.Adds) != fmt.Sprint(want) {
		t.Errorf("AddBackend calls %v, want %v", ix.Adds, want)
	}
}

// ttftSpy is a scorer that learns from completions.
type ttftSpy struct {
	mu   sync.Mutex
	seen []string
}

func (s *ttftSpy) Score(_ *Request, _ []Candidate, dst []float64) { clear(dst) }

func (s *ttftSpy) Completed(id BackendID, picked time.Time, info DoneInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, fmt.Sprintf("%d ttft=%v err=%v", id, info.FirstTokenAt.Sub(picked), info.Err != nil))
}

func TestCompleterAndDoneStats(t *testing.T) {
	spy := &ttftSpy{}
	r := routingtest.MustNew(t, Options{Profile: Profile{Scorers: []Weighted{{Scorer: spy, Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(1, routingtest.T0))
	p, _ := r.Pick(&Request{})
	p.Done(DoneInfo{FirstTokenAt: routingtest.T0.Add(250 * time.Millisecond)})
	q, _ := r.Pick(&Request{})
	q.Done(DoneInfo{Err: errors.New("boom")})
	want := []string{"0 ttft=250ms err=false", fmt.Sprintf("0 ttft=%v err=true", time.Time{}.Sub(routingtest.T0))}
	if fmt.Sprint(spy.seen) != fmt.Sprint(want) {
		t.Errorf("completions %q, want %q", spy.seen, want)
	}
	if st := r.Stats(); st.Picks != 2 || st.Done != 2 || st.Failed != 1 {
		t.Errorf("stats %+v, want 2 picks, 2 done, 1 failed", st)
	}
}

// Even a failing Pick allocates nothing.
func TestPickErrorAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	r := routingtest.MustNew(t, Options{Profile: Profile{Filters: []Filter{outlier.HealthFilter()}}})
	req := &Request{}
	if n := testing.AllocsPerRun(100, func() { _, _ = r.Pick(req) }); n != 0 {
		t.Errorf("empty set: %v allocs", n)
	}
	s := routingtest.Fleet(3, routingtest.T0)
	for i := range s {
		s[i].Health = Unhealthy
	}
	routingtest.MustUpdate(t, r, s)
	if n := testing.AllocsPerRun(100, func() { _, _ = r.Pick(req) }); n != 0 {
		t.Errorf("all filtered: %v allocs", n)
	}
}

// A custom filter that returns candidates of its own making is tolerated: a known backend is
// still picked by id, an unknown one fails with ErrNoBackend.
func TestForeignFilterCandidates(t *testing.T) {
	var forged []Candidate
	dup := FilterFunc(func(_ *Request, cs []Candidate) []Candidate {
		forged = forged[:0]
		for range 3 { // more candidates than it was given, none from the router's scratch
			c := cs[0]
			SetSlot(&c, 0)
			forged = append(forged, c)
		}
		return forged
	})
	r := routingtest.MustNew(t, Options{Profile: Profile{Filters: []Filter{dup}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(1, routingtest.T0))
	p, err := r.Pick(&Request{})
	if err != nil || p.Backend.Name != "b0" {
		t.Fatalf("pick = %v, %v; want b0", p.Backend, err)
	}
	p.Done(DoneInfo{})

	unknown := FilterFunc(func(_ *Request, cs []Candidate) []Candidate {
		SetSlot(&cs[0], 0)
		cs[0].ID = 77
		return cs[:1]
	})
	r = routingtest.MustNew(t, Options{Profile: Profile{Filters: []Filter{unknown}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(1, routingtest.T0))
	if _, err := r.Pick(&Request{}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("unknown candidate: err = %v, want ErrNoBackend", err)
	}
}

// pickAllocs is the allocations of one Pick, FirstToken and Done of req, averaged over 200.
func pickAllocs(t *testing.T, r *Router, req *Request) float64 {
	t.Helper()
	return testing.AllocsPerRun(200, func() {
		p, err := r.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		p.FirstToken(routingtest.T0)
		p.Done(DoneInfo{})
	})
}

// TestWithNamesTheExtension checks that a profile extended with With reports its own name
// through Router.Name, and that the base keeps its own.
func TestWithNamesTheExtension(t *testing.T) {
	base := Profile{Name: "base", Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: 1}}}
	for _, tc := range []struct {
		add  []Weighted
		want string
	}{
		{nil, "base"},
		{[]Weighted{{Scorer: load.Active(), Weight: 1}}, "base+minMaxScorer"},
		{[]Weighted{{Scorer: ScorerFunc(func(*Request, []Candidate, []float64) {}), Weight: 1}, {Scorer: routingtest.MustScorer(session.NewAware(session.AwareOptions{})), Weight: 1}}, "base+ScorerFunc+sessionAware"},
	} {
		p := base.With(tc.add...)
		r := routingtest.MustNew(t, Options{Profile: p})
		if got := r.Name(); got != tc.want {
			t.Errorf("With(%d scorers): Router.Name() = %q, want %q", len(tc.add), got, tc.want)
		}
	}
	if base.Name != "base" {
		t.Errorf("With renamed the base: %q", base.Name)
	}
}

func TestFailureString(t *testing.T) {
	for f, want := range map[Failure]string{
		FailureNone: "none", FailureConnect: "connect", FailureTimeout: "timeout",
		FailureServer: "server", FailureOverload: "overload", 9: "Failure(9)",
	} {
		if got := f.String(); got != want {
			t.Errorf("Failure(%d).String() = %q, want %q", f, got, want)
		}
	}
}
