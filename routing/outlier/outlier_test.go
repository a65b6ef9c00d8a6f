package outlier_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
)

// fakeClock is a clock tests advance by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(at time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(at.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// prefer scores the backend with id target 1 and every other 0 (none when target < 0), so that
// a test can say which backend it wants and see whether the outlier let it through.
type prefer struct{ target atomic.Int64 }

func (p *prefer) Score(_ *routing.Request, cands []routing.Candidate, dst []float64) {
	t := p.target.Load()
	for i := range cands {
		if int64(cands[i].ID) == t {
			dst[i] = 1
		}
	}
}

var (
	errConnect  = errors.New("connection refused")
	errServer   = errors.New("500")
	errClient   = errors.New("client went away")
	errOverload = errors.New("429")
)

var (
	connectFail = routing.DoneInfo{Err: errConnect, Failure: routing.FailureConnect}
	serverFail  = routing.DoneInfo{Err: errServer, Failure: routing.FailureServer}
	timeoutFail = routing.DoneInfo{Err: errServer, Failure: routing.FailureTimeout}
	neutral     = routing.DoneInfo{Err: errClient}
	overload    = routing.DoneInfo{Err: errOverload, Failure: routing.FailureOverload}
	success     = routing.DoneInfo{}
)

// outlierFixture is a routing.Router over n backends b0..b(n-1) whose profile is
// outlier.With(HealthFilter → 10·prefer, outlier, 1), on a fake clock, signals never stale.
type outlierFixture struct {
	t      *testing.T
	r      *routing.Router
	o      *outlier.Detector
	clock  *fakeClock
	prefer *prefer
}

func newOutlierFixture(t *testing.T, n int, opts outlier.Options) *outlierFixture {
	t.Helper()
	return newOutlierFixtureWith(t, n, opts, routing.Options{StaleAfter: -1})
}

func newOutlierFixtureWith(t *testing.T, n int, opts outlier.Options, ropts routing.Options) *outlierFixture {
	t.Helper()
	f := &outlierFixture{t: t, clock: newFakeClock(routingtest.T0), prefer: &prefer{}}
	f.prefer.target.Store(-1)
	opts.Now = f.clock.Now
	o, err := outlier.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.o = o
	ropts.Now = f.clock.Now
	ropts.Profile = outlier.With(routing.Profile{
		Filters: []routing.Filter{outlier.HealthFilter()},
		Scorers: []routing.Weighted{{Scorer: f.prefer, Weight: 10}},
	}, o, 1)
	f.r = routingtest.MustNew(t, ropts)
	routingtest.MustUpdate(t, f.r, routingtest.Fleet(n, routingtest.T0))
	return f
}

// pick picks with id preferred and returns the result.
func (f *outlierFixture) pick(id int) routing.Result {
	f.t.Helper()
	f.prefer.target.Store(int64(id))
	p, err := f.r.Pick(&routing.Request{})
	if err != nil {
		f.t.Fatalf("pick: %v", err)
	}
	return p
}

// hit picks with id preferred, requires that id is chosen, and finishes it with info.
func (f *outlierFixture) hit(id int, info routing.DoneInfo) {
	f.t.Helper()
	p := f.pick(id)
	if int(p.ID) != id {
		f.t.Fatalf("picked b%d, want b%d", p.ID, id)
	}
	p.Done(info)
}

// avoids makes n picks preferring id, finishing each successfully, and fails if one chose it.
func (f *outlierFixture) avoids(id, n int) {
	f.t.Helper()
	for i := range n {
		p := f.pick(id)
		p.Done(success)
		if int(p.ID) == id {
			f.t.Fatalf("pick %d of %d chose ejected b%d", i+1, n, id)
		}
	}
}

// ejectedFor returns how much longer id's ejection lasts, and whether it is out of rotation.
func (f *outlierFixture) ejectedFor(id int) (time.Duration, bool) {
	h := f.o.BackendStats(routing.BackendID(id))
	until, ok := h.Until, h.Ejected
	return until.Sub(f.clock.Now()), ok
}

func TestOutlierConnectFailureEjectsAndProbes(t *testing.T) {
	f := newOutlierFixture(t, 4, outlier.Options{})
	f.hit(0, connectFail)
	if d, ok := f.ejectedFor(0); !ok || d != time.Second {
		t.Fatalf("after a connect failure: ejected %v for %v, want true for 1s", ok, d)
	}
	f.avoids(0, 1000)

	f.clock.Advance(time.Second) // half-open
	probe := f.pick(0)
	if probe.ID != 0 {
		t.Fatalf("half-open b0 not probed: picked b%d", probe.ID)
	}
	f.avoids(0, 1000) // one probe at a time
	if st := f.o.Stats(); st.Probes != 1 || st.Ejected != 1 {
		t.Fatalf("stats %+v, want 1 probe, 1 ejected", st)
	}
	probe.Done(success)
	if _, ok := f.ejectedFor(0); ok {
		t.Fatal("a successful probe did not restore b0")
	}
	f.hit(0, success)
	f.hit(0, success)
	if st := f.o.Stats(); st.Restored != 1 || st.Ejected != 0 || st.Ejections != 1 {
		t.Fatalf("stats %+v, want 1 restored, 0 ejected, 1 ejection", st)
	}
}

// The n-th ejection in a row lasts min(Base·2^(n−1), Max); it decays by one step per Window
// in rotation.
func TestOutlierBackoff(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	f.hit(0, connectFail)
	for i, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		d, ok := f.ejectedFor(0)
		if !ok || d != want*time.Second {
			t.Fatalf("ejection %d: out %v for %v, want %v", i+1, ok, d, want*time.Second)
		}
		f.avoids(0, 10)
		f.clock.Advance(d)
		f.hit(0, connectFail) // the probe fails
	}
	// A successful probe, then time in rotation: each Window takes one step off.
	d, _ := f.ejectedFor(0)
	f.clock.Advance(d)
	f.hit(0, success)
	for _, step := range []struct {
		healthy time.Duration
		want    time.Duration
	}{
		{0, 30 * time.Second},                         // n = min(6 + 1, cap 6) = 6
		{2 * outlier.DefaultWindow, 16 * time.Second}, // 6 − 2 + 1 = 5
		{3 * outlier.DefaultWindow, 4 * time.Second},  // 5 − 3 + 1 = 3
		{10 * outlier.DefaultWindow, 1 * time.Second}, // max(0, 3 − 10) + 1 = 1
	} {
		f.clock.Advance(step.healthy)
		f.hit(0, connectFail)
		got, _ := f.ejectedFor(0)
		if got != step.want {
			t.Errorf("after %v in rotation: ejected for %v, want %v", step.healthy, got, step.want)
		}
		f.clock.Advance(got)
		f.hit(0, success) // the probe restores
	}
}

func TestOutlierConsecutiveFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seq   []routing.DoneInfo
		eject bool
	}{
		{"5 server errors", []routing.DoneInfo{serverFail, serverFail, serverFail, serverFail, serverFail}, true},
		{"5 timeouts", []routing.DoneInfo{timeoutFail, timeoutFail, timeoutFail, timeoutFail, timeoutFail}, true},
		{"4 errors", []routing.DoneInfo{serverFail, serverFail, serverFail, serverFail}, false},
		{"4 errors, a success, 4 errors", []routing.DoneInfo{serverFail, serverFail, serverFail, serverFail, success, serverFail, serverFail, serverFail, serverFail}, false},
		{"neutral and overload do not reset", []routing.DoneInfo{serverFail, serverFail, neutral, serverFail, overload, serverFail, serverFail}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOutlierFixture(t, 4, outlier.Options{FailureRate: -1})
			for _, info := range tc.seq {
				f.hit(0, info)
			}
			if _, ok := f.ejectedFor(0); ok != tc.eject {
				t.Errorf("ejected = %v, want %v", ok, tc.eject)
			}
		})
	}
}

func TestOutlierFailureRate(t *testing.T) {
	opts := outlier.Options{ConsecutiveFailures: -1}
	t.Run("reaches the rate with MinRequests", func(t *testing.T) {
		f := newOutlierFixture(t, 4, opts)
		for i := range 19 { // 10 failures in 19 requests: above the rate, below MinRequests
			if i%2 == 0 {
				f.hit(0, serverFail)
			} else {
				f.hit(0, success)
			}
		}
		if _, ok := f.ejectedFor(0); ok {
			t.Fatal("ejected below MinRequests")
		}
		f.hit(0, serverFail) // 11 of 20
		if _, ok := f.ejectedFor(0); !ok {
			t.Fatal("not ejected at 11 failures of 20 requests")
		}
	})
	t.Run("below the rate", func(t *testing.T) {
		f := newOutlierFixture(t, 4, opts)
		for i := range 40 { // 9 failures in every 20, spread out
			if i%2 == 1 && i%20 < 18 {
				f.hit(0, serverFail)
			} else {
				f.hit(0, success)
			}
		}
		if _, ok := f.ejectedFor(0); ok {
			t.Fatal("ejected at a failure rate of 0.45")
		}
	})
	t.Run("old failures leave the window", func(t *testing.T) {
		f := newOutlierFixture(t, 4, opts)
		for range 15 {
			f.hit(0, serverFail)
		}
		f.clock.Advance(outlier.DefaultWindow + time.Second)
		for range 10 {
			f.hit(0, success)
		}
		for range 9 {
			f.hit(0, serverFail) // 9 of 19 in the window
		}
		f.hit(0, serverFail) // 10 of 20: 0.5
		if _, ok := f.ejectedFor(0); !ok {
			t.Fatal("not ejected at 10 of 20")
		}
		if st := f.o.Stats(); st.Ejections != 1 {
			t.Fatalf("ejections %d, want 1", st.Ejections)
		}
	})
}

func TestOutlierMaxEjectedPercent(t *testing.T) {
	f := newOutlierFixture(t, 4, outlier.Options{})
	for id := range 4 {
		f.hit(id, success) // all four are known
	}
	f.hit(0, connectFail)
	f.hit(1, connectFail)
	f.hit(2, connectFail) // a third of four at 50%: not ejected
	if _, ok := f.ejectedFor(2); ok {
		t.Fatal("b2 ejected beyond MaxEjectedPercent")
	}
	if st := f.o.Stats(); st.Ejected != 2 || st.Suppressed != 1 {
		t.Fatalf("stats %+v, want 2 ejected, 1 suppressed", st)
	}

	// All ejected: all kept.
	g := newOutlierFixture(t, 2, outlier.Options{MaxEjectedPercent: 100})
	g.hit(0, connectFail)
	g.hit(1, connectFail)
	p := g.pick(0)
	p.Done(success) // picked before the ejection ended: ignored
	if st := g.o.Stats(); st.Ejected != 2 || st.Fallbacks != 1 || g.o.Stats().Fallbacks != 1 {
		t.Fatalf("stats %+v, want 2 ejected and 1 fallback", st)
	}
	// One backend alone may always be ejected.
	h := newOutlierFixture(t, 1, outlier.Options{})
	h.hit(0, connectFail)
	h.hit(0, success) // kept by the fallback
	if st := h.o.Stats(); st.Ejected != 1 || st.Fallbacks != 1 {
		t.Fatalf("single backend: stats %+v, want 1 ejected, 1 fallback", st)
	}
}

// When everything not ejected is unhealthy, the ejected backends are kept: HealthFilter drops
// the unhealthy one, and the request still has a backend.
func TestOutlierFallbackWithUnhealthy(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	f.hit(0, connectFail)
	s := routingtest.Fleet(2, routingtest.T0)
	s[1].Health = routing.Unhealthy
	routingtest.MustUpdate(t, f.r, s)
	p := f.pick(1)
	if p.ID != 0 {
		t.Fatalf("picked b%d, want the ejected b0 (b1 is unhealthy)", p.ID)
	}
	p.Done(success)
	if got := f.o.Stats().Fallbacks; got != 1 {
		t.Fatalf("fallbacks %d, want 1", got)
	}
}

// candidateSpy records the candidate ids it sees.
type candidateSpy struct{ seen []routing.BackendID }

func (s *candidateSpy) Filter(_ *routing.Request, cands []routing.Candidate) []routing.Candidate {
	s.seen = s.seen[:0]
	for i := range cands {
		s.seen = append(s.seen, cands[i].ID)
	}
	return cands
}

// A half-open backend that passes the filter but is not chosen has claimed nothing: it is
// probed by a later pick.
func TestOutlierUnchosenProbeDoesNotLeak(t *testing.T) {
	f := newOutlierFixture(t, 3, outlier.Options{})
	spy := &candidateSpy{}
	prof := outlier.With(routing.Profile{Filters: []routing.Filter{spy}, Scorers: []routing.Weighted{{Scorer: f.prefer, Weight: 10}}}, f.o, 1)
	f.r = routingtest.MustNew(t, routing.Options{Now: f.clock.Now, StaleAfter: -1, Profile: prof})
	routingtest.MustUpdate(t, f.r, routingtest.Fleet(3, routingtest.T0))
	f.hit(0, connectFail)
	f.clock.Advance(time.Second)
	for range 5 {
		f.hit(1, success) // b0 is a candidate, b1 is chosen
		if len(spy.seen) != 3 {
			t.Fatalf("candidates after the outlier %v, want all three", spy.seen)
		}
	}
	if st := f.o.Stats(); st.Probes != 0 {
		t.Fatalf("probes %d before b0 was chosen, want 0", st.Probes)
	}
	f.hit(0, success)
	if st := f.o.Stats(); st.Probes != 1 || st.Restored != 1 {
		t.Fatalf("stats %+v, want 1 probe, 1 restored", st)
	}
}

// A probe that is never finished holds off others only for ProbeTimeout.
func TestOutlierProbeTimeout(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{ProbeTimeout: 5 * time.Second})
	f.hit(0, connectFail)
	f.clock.Advance(time.Second)
	lost := f.pick(0) // the probe; its Done comes much later
	if lost.ID != 0 {
		t.Fatalf("picked b%d, want the probe to b0", lost.ID)
	}
	f.avoids(0, 10)
	f.clock.Advance(5 * time.Second)
	f.hit(0, success) // a second probe
	if _, ok := f.ejectedFor(0); ok {
		t.Fatal("second probe did not restore b0")
	}
	lost.Done(neutral)
	if st := f.o.Stats(); st.Probes != 2 || st.Ejected != 0 {
		t.Fatalf("stats %+v, want 2 probes, none ejected", st)
	}
}

// A neutral or overload outcome of a probe frees the claim for another probe.
func TestOutlierProbeNeutral(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	f.hit(0, connectFail)
	f.clock.Advance(time.Second)
	f.hit(0, neutral)
	f.hit(0, overload)
	if _, ok := f.ejectedFor(0); !ok {
		t.Fatal("restored by a neutral probe")
	}
	f.hit(0, success)
	if st := f.o.Stats(); st.Probes != 3 || st.Restored != 1 {
		t.Fatalf("stats %+v, want 3 probes, 1 restored", st)
	}
}

// Requests picked before the ejection say nothing about the backend after it.
func TestOutlierIgnoresEarlierPicks(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	a, b := f.pick(0), f.pick(0)
	f.clock.Advance(time.Millisecond)
	a.Done(connectFail)
	b.Done(success) // picked before the ejection: does not restore
	if _, ok := f.ejectedFor(0); !ok {
		t.Fatal("a request picked before the ejection restored b0")
	}
	f.clock.Advance(time.Second)
	f.hit(0, success) // the probe restores
	if _, ok := f.ejectedFor(0); ok {
		t.Fatal("the probe did not restore b0")
	}
}

func TestOutlierEarlyProbe(t *testing.T) {
	opts := outlier.Options{BaseEjection: 10 * time.Second, MaxEjectedPercent: 100}
	f := newOutlierFixtureWith(t, 3, opts, routing.Options{}) // signals go stale after 2 s
	update := func(health ...routing.Health) {
		t.Helper()
		s := routingtest.Fleet(3, f.clock.Now())
		for i, h := range health {
			s[i].Health = h
		}
		routingtest.MustUpdate(t, f.r, s)
	}
	f.hit(0, connectFail) // died
	f.hit(1, connectFail) // fails requests, answers health checks
	f.clock.Advance(100 * time.Millisecond)
	update(routing.Unhealthy, routing.Healthy, routing.Healthy)
	f.avoids(0, 3) // the outlier sees b0 unhealthy
	f.clock.Advance(100 * time.Millisecond)
	update(routing.Healthy, routing.Healthy, routing.Healthy) // b0 is back
	f.hit(0, success)                                         // probed at once, restored
	if st := f.o.Stats(); st.EarlyProbes != 1 || st.Restored != 1 {
		t.Fatalf("stats %+v, want 1 early probe, 1 restored", st)
	}
	f.avoids(1, 20) // b1 never went unhealthy: no early probe
	if _, ok := f.ejectedFor(1); !ok {
		t.Fatal("b1 restored early")
	}

	// Stale signals count as down, fresh ones again as back: for b1 too, whose signals went
	// stale with everyone's.
	f.hit(0, connectFail)
	f.clock.Advance(3 * time.Second) // every signal is stale now
	f.avoids(0, 3)
	update(routing.Healthy, routing.Healthy, routing.Healthy)
	f.hit(0, success)
	if st := f.o.Stats(); st.EarlyProbes != 3 || st.Restored != 2 {
		t.Fatalf("stats %+v, want 3 early probes, 2 restored", st)
	}
	if d, ok := f.ejectedFor(1); !ok || d > 0 {
		t.Fatalf("b1: out %v for %v, want half-open", ok, d)
	}
}

func TestOutlierScore(t *testing.T) {
	f := newOutlierFixture(t, 3, outlier.Options{ConsecutiveFailures: -1, FailureRate: -1})
	for i := range 10 {
		if i%2 == 0 {
			f.hit(0, serverFail)
		} else {
			f.hit(0, success)
		}
	}
	for range 30 {
		f.hit(1, serverFail) // 30 of 30
	}
	cs := []routing.Candidate{{ID: 0}, {ID: 1}, {ID: 2}, {ID: 9}}
	req := &routing.Request{Now: f.clock.Now()}
	got := routingtest.Score(f.o, req, cs)
	routingtest.CheckScores(t, "after failures", got, []float64{1 - 5.0/20, 0, 1, 1})

	// The outlier's score alone steers picks away from the failing backends.
	r := routingtest.MustNew(t, routing.Options{Now: f.clock.Now, StaleAfter: -1, Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: f.o, Weight: 1}, {Scorer: load.Active(), Weight: 0.01}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(3, routingtest.T0))
	for range 50 {
		p, err := r.Pick(&routing.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != 2 {
			t.Fatalf("picked b%d, want b2, the one without failures", p.ID)
		}
		p.Done(neutral)
	}

	f.clock.Advance(outlier.DefaultWindow + time.Nanosecond)
	req.Now = f.clock.Now()
	routingtest.CheckScores(t, "a Window later", routingtest.Score(f.o, req, cs), []float64{1, 1, 1, 1})
}

func TestOutlierNeutralAndOverloadDoNotEject(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{})
	for range 200 {
		f.hit(0, neutral)
		f.hit(0, overload)
		f.hit(0, routing.DoneInfo{Err: errClient, Failure: routing.Failure(99)}) // unknown: neutral
	}
	if st := f.o.Stats(); st.Ejections != 0 {
		t.Fatalf("stats %+v, want no ejections", st)
	}
	cs := []routing.Candidate{{ID: 0}}
	routingtest.CheckScores(t, "score", routingtest.Score(f.o, &routing.Request{Now: f.clock.Now()}, cs), []float64{1})
}

// A backend that left the set while half-open does not keep its ejection place forever.
func TestOutlierForgetsDepartedBackends(t *testing.T) {
	f := newOutlierFixture(t, 3, outlier.Options{})
	f.hit(2, connectFail)
	routingtest.MustUpdate(t, f.r, routingtest.Fleet(2, routingtest.T0)) // b2 leaves
	f.clock.Advance(outlier.DefaultBaseEjection + outlier.DefaultMaxEjection)
	f.hit(0, success) // the sweep runs
	if st := f.o.Stats(); st.Ejected != 0 {
		t.Fatalf("stats %+v, want nothing ejected", st)
	}
}

func TestOutlierHookedOnce(t *testing.T) {
	// That the Router registers a component that is both a filter and a scorer once, as an
	// observer and as a completer, is checked in routing (TestHookedOnce).
	f := newOutlierFixture(t, 2, outlier.Options{FailureRate: -1})
	for range 4 {
		f.hit(0, serverFail) // counted twice, these would eject
	}
	if _, ok := f.ejectedFor(0); ok {
		t.Fatal("4 failures ejected: Completed ran twice per Done")
	}
}

func TestNewOutlierRejectsBadOptions(t *testing.T) {
	for i, o := range []outlier.Options{
		{FailureRate: 1.5},
		{FailureRate: math.NaN()},
		{MinRequests: -1},
		{Window: -time.Second},
		{Window: 5},
		{BaseEjection: -1},
		{MaxEjection: -1},
		{BaseEjection: time.Minute, MaxEjection: time.Second},
		{MaxEjectedPercent: -1},
		{MaxEjectedPercent: 101},
		{ProbeTimeout: -1},
	} {
		if _, err := outlier.New(o); !errors.Is(err, routing.ErrInvalidOptions) {
			t.Errorf("options %d %+v: err = %v, want routing.ErrInvalidOptions", i, o, err)
		}
	}
	if _, err := outlier.New(outlier.Options{FailureRate: -1, ConsecutiveFailures: -1, ConsecutiveConnectFailures: -1}); err != nil {
		t.Errorf("everything off: %v", err)
	}
	// The longest ejection: TestEjectionCap (internal).
}

func TestWithOutlierCopies(t *testing.T) {
	o, _ := outlier.New(outlier.Options{})
	base := profiles.Usher(profiles.UsherOptions{})
	// Room to append: a WithOutlier that aliased them would write into these arrays.
	base.Filters = append(make([]routing.Filter, 0, 8), base.Filters...)
	base.Scorers = append(make([]routing.Weighted, 0, 8), base.Scorers...)
	nf, ns := len(base.Filters), len(base.Scorers)
	p := outlier.With(base, o, 2)
	if len(base.Filters) != nf || len(base.Scorers) != ns {
		t.Fatal("WithOutlier changed its argument")
	}
	if p.Filters[0] != routing.Filter(o) || len(p.Filters) != nf+1 || p.Scorers[ns].Scorer != routing.Scorer(o) || p.Scorers[ns].Weight != 2 {
		t.Fatalf("WithOutlier: filters %v, scorers %v", p.Filters, p.Scorers)
	}
	p.Filters[1], p.Scorers[0].Weight = nil, 99
	if base.Filters[0] == nil || base.Scorers[0].Weight == 99 {
		t.Fatal("WithOutlier aliases p's slices")
	}
	if q := outlier.With(base, o, 0); len(q.Scorers) != ns || len(q.Filters) != nf+1 {
		t.Fatalf("weight 0: %d scorers, %d filters; want %d and %d", len(q.Scorers), len(q.Filters), ns, nf+1)
	}
}

// Pick and Done with the outlier in the profiles.Usher profile allocate nothing: with nothing failing
// (the fast paths), and with one backend ejected and recent failures (the slow paths).
func TestOutlierAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	clock := newFakeClock(routingtest.T0)
	o, err := outlier.New(outlier.Options{Now: clock.Now, ConsecutiveFailures: 1000, FailureRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	r, req := routingtest.BenchRouter(t, 100, outlier.With(profiles.Usher(profiles.UsherOptions{}), o, 1))
	req.Session = "s1"
	run := func(name string, info routing.DoneInfo) {
		t.Helper()
		allocs := testing.AllocsPerRun(200, func() {
			p, err := r.Pick(req)
			if err != nil {
				t.Fatal(err)
			}
			p.FirstToken(routingtest.T0)
			p.Done(info)
		})
		if allocs != 0 {
			t.Errorf("%s: Pick+FirstToken+Done allocates %v times, want 0", name, allocs)
		}
	}
	run("nothing failing", success)
	o.Completed(7, clock.Now(), connectFail) // b7 ejected
	o.Completed(8, clock.Now(), serverFail)  // b8 failed recently
	if st := o.Stats(); st.Ejected != 1 {
		t.Fatalf("stats %+v, want 1 ejected", st)
	}
	run("one ejected, failures in the window", success)
	run("server failures", serverFail)
}

// Many goroutines pick and finish with random outcomes while time advances and the writer
// publishes: no race, counters back to zero, the outlier's books consistent.
func TestOutlierConcurrent(t *testing.T) {
	for _, pct := range []int{0, 100} { // the default; every backend may go (fallbacks)
		t.Run(fmt.Sprintf("MaxEjectedPercent=%d", pct), func(t *testing.T) { outlierConcurrent(t, pct) })
	}
}

func outlierConcurrent(t *testing.T, pct int) {
	clock := newFakeClock(routingtest.T0)
	o, err := outlier.New(outlier.Options{Now: clock.Now, MaxEjectedPercent: pct})
	if err != nil {
		t.Fatal(err)
	}
	r := routingtest.MustNew(t, routing.Options{Now: clock.Now, StaleAfter: -1, Profile: outlier.With(profiles.Usher(profiles.UsherOptions{}), o, 1)})
	routingtest.MustUpdate(t, r, routingtest.Fleet(8, routingtest.T0))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // time and the writer
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			clock.Advance(20 * time.Millisecond)
			s := routingtest.Fleet(8, clock.Now())
			if i%50 < 5 {
				s[i%8].Health = routing.Unhealthy
			}
			if err := r.Update(s); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(10 * time.Microsecond)
		}
	}()
	const workers, per = 8, 2000
	kinds := []routing.DoneInfo{success, success, success, connectFail, serverFail, timeoutFail, neutral, overload}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range per {
				p, err := r.Pick(&routing.Request{Session: fmt.Sprint(w, i%7)})
				if err != nil {
					t.Error(err)
					return
				}
				info := success
				switch {
				case p.ID%4 == 0 && rng.IntN(2) == 0: // b0 and b4 fail often, in every way
					info = kinds[rng.IntN(len(kinds))]
				case pct == 100 && rng.IntN(8) == 0: // the others too
					info = kinds[rng.IntN(len(kinds))]
				case rng.IntN(8) == 0: // the others now and then, never to be ejected
					info = [...]routing.DoneInfo{serverFail, neutral, overload}[rng.IntN(3)]
				}
				p.Done(info)
			}
		}()
	}
	for r.Stats().Done < workers*per && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	for i := range 8 {
		if got, _ := r.InFlight(fmt.Sprintf("b%d", i)); got != (routing.InFlight{}) {
			t.Errorf("b%d left in flight: %+v", i, got)
		}
	}
	st := o.Stats()
	out := 0
	for i := range 8 {
		if o.BackendStats(routing.BackendID(i)).Ejected {
			out++
		}
	}
	if st.Ejected != out || (pct == 0 && st.Ejected > 4) || st.Ejections == 0 {
		t.Errorf("stats %+v, %d backends out: inconsistent", st, out)
	}
	t.Logf("%d picks: %+v", r.Stats().Picks, st)
}

// stream picks a streamed request with id preferred.
func (f *outlierFixture) stream(id int) routing.Result {
	f.t.Helper()
	f.prefer.target.Store(int64(id))
	p, err := f.r.Pick(&routing.Request{Stream: true})
	if err != nil {
		f.t.Fatalf("pick: %v", err)
	}
	return p
}

// A backend with streams in flight that sends nothing on any request for StallAfter gets no
// new picks until one of them progresses or ends; it is not ejected, and when every backend
// is silent all are kept.
func TestOutlierStall(t *testing.T) {
	f := newOutlierFixture(t, 2, outlier.Options{StallAfter: 2 * time.Second})
	// A router never told of progress never counts a backend as silent: its caller does not
	// report bytes, and every busy backend would look stuck.
	quiet := f.stream(0)
	f.clock.Advance(5 * time.Second)
	if p := f.pick(0); p.ID != 0 || f.o.Stats().Stalled != 0 {
		t.Errorf("without Progress: picked b%d, %d stalled; want b0, 0", p.ID, f.o.Stats().Stalled)
	} else {
		p.Done(success)
	}
	quiet.Done(success)
	warm := f.pick(1)
	warm.Progress(f.clock.Now())
	warm.Done(success)

	stuck := f.stream(0)
	if stuck.ID != 0 {
		t.Fatalf("picked b%d, want b0", stuck.ID)
	}
	steps := []struct {
		name    string
		do      func()
		advance time.Duration
		want    routing.BackendID // the pick preferring b0
		stalled uint64
	}{
		{"silent for less than StallAfter", nil, 1900 * time.Millisecond, 0, 0},
		{"silent for StallAfter", nil, 200 * time.Millisecond, 1, 1},
		{"a byte on the stuck request", func() { stuck.Progress(f.clock.Now()) }, 0, 0, 1},
		{"silent again", nil, 2100 * time.Millisecond, 1, 2},
		{"the stuck request ends", func() { stuck.Done(timeoutFail) }, 0, 0, 2},
	}
	for _, st := range steps {
		if st.do != nil {
			st.do()
		}
		f.clock.Advance(st.advance)
		p := f.pick(0)
		p.Done(success)
		if p.ID != st.want || f.o.Stats().Stalled != st.stalled {
			t.Errorf("%s: picked b%d, %d stalled picks; want b%d, %d", st.name, p.ID, f.o.Stats().Stalled, st.want, st.stalled)
		}
		if _, out := f.ejectedFor(0); out {
			t.Errorf("%s: b0 ejected; a silent backend is only passed over", st.name)
		}
	}
	if got := stuck.Silence(f.clock.Now()); got != 0 {
		t.Errorf("Silence after Done with nothing in flight = %v, want 0", got)
	}

	// Every backend silent: all are kept rather than failing the pick.
	a, b := f.stream(0), f.stream(1)
	f.clock.Advance(3 * time.Second)
	if got := a.Silence(f.clock.Now()); got != 3*time.Second {
		t.Errorf("Silence = %v, want 3s", got)
	}
	p := f.pick(0)
	if p.ID != 0 {
		t.Errorf("all silent: picked b%d, want the preferred b0", p.ID)
	}
	for _, r := range []routing.Result{a, b, p} {
		r.Done(success)
	}

	// A whole answer's headers come only with the answer: a backend busy with non-streamed
	// requests alone is never silent.
	whole := f.pick(0)
	f.clock.Advance(10 * time.Second)
	if p := f.pick(0); p.ID != 0 || whole.Silence(f.clock.Now()) != 0 {
		t.Errorf("busy with a whole answer: picked b%d, silence %v; want b0, 0", p.ID, whole.Silence(f.clock.Now()))
	} else {
		p.Done(success)
	}
	whole.Done(success)
}
