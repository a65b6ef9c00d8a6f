package latency

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/profiles"
)

// syntheticServer is a ground truth for the model: TTFT is a fixed overhead, the prefill in
// front of the request and its own at rate tokens per second, and 10 ms per waiting request;
// TPOT grows with the batch. slow multiplies both.
func syntheticServer(f *Features, rate, slow float64) routing.Latency {
	ttft := 0.03 + float64(f.PrefillTokens+int64(f.UncachedTokens))/rate + 0.01*float64(max(0, f.Waiting))
	tpot := 0.015 + 0.0005*float64(max(0, f.Running))
	return routing.Latency{TTFT: seconds(slow * ttft), TPOT: seconds(slow * tpot)}
}

func randomFeatures(rng *rand.Rand, backends int) Features {
	return Features{
		Backend: routing.BackendID(rng.IntN(backends)), PromptTokens: 4000, UncachedTokens: rng.IntN(4000),
		PrefillTokens: int64(rng.IntN(20000)), Waiting: rng.IntN(5), Running: rng.IntN(64),
		KVUtilization: rng.Float64(), InFlight: int64(rng.IntN(40)),
	}
}

// relErr is |predicted − observed| / observed.
func relErr(p, o time.Duration) float64 { return math.Abs(float64(p-o)) / float64(o) }

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func TestLinearPrior(t *testing.T) {
	m, err := NewLinear(LinearOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := Features{UncachedTokens: 1600, PrefillTokens: 14400, Waiting: -1, Running: -1, KVUtilization: -1}
	// 20 ms + 16,000 tokens at 16,000 tokens/s; one decode step plus nothing for the batch.
	if got := m.Predict(&f); got.TTFT != 1020*time.Millisecond || got.TPOT != DefaultDecodeStep {
		t.Fatalf("cold prediction %+v, want 1.02s / 20ms", got)
	}
	f.UncachedTokens, f.PrefillTokens = 0, 0
	if got := m.Predict(&f); got.TTFT != 20*time.Millisecond {
		t.Fatalf("cold prediction of no work %v, want 20ms", got.TTFT)
	}
}

func TestLinearOptions(t *testing.T) {
	for _, o := range []LinearOptions{
		{Window: -1}, {Refit: -1}, {PrefillRate: -1}, {PrefillRate: math.NaN()}, {PrefillRate: math.Inf(1)},
		{DecodeStep: -time.Second}, {Adapt: -0.1}, {Adapt: 1.5}, {Adapt: math.NaN()},
	} {
		if _, err := NewLinear(o); !errors.Is(err, routing.ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want routing.ErrInvalidOptions", o, err)
		}
	}
	if _, err := NewScorer(ScorerOptions{OutputTokens: -1}); !errors.Is(err, routing.ErrInvalidOptions) {
		t.Errorf("OutputTokens −1: err %v, want routing.ErrInvalidOptions", err)
	}
}

// TestLinearLearns: from the prior (which assumes a server twice as fast) the model
// learns the synthetic fleet within a few hundred outcomes, then follows one server that slows
// down threefold within a few dozen of that server's outcomes, without losing the others.
func TestLinearLearns(t *testing.T) {
	m, err := NewLinear(LinearOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const rate, backends = 8000, 4
	errs := func(n int, slow func(routing.BackendID) float64, only routing.BackendID, learn bool) (ttft, tpot float64) {
		var et, ed []float64
		for range n {
			f := randomFeatures(rng, backends)
			if only < backends {
				f.Backend = only
			}
			obs := syntheticServer(&f, rate, slow(f.Backend))
			p := m.Predict(&f)
			et, ed = append(et, relErr(p.TTFT, obs.TTFT)), append(ed, relErr(p.TPOT, obs.TPOT))
			if learn {
				m.Learn(&f, obs)
			}
		}
		return median(et), median(ed)
	}
	same := func(routing.BackendID) float64 { return 1 }
	if tt, _ := errs(200, same, backends, false); tt < 0.2 {
		t.Fatalf("cold TTFT error %.3f: the prior should be off by about half", tt)
	}
	errs(500, same, backends, true)
	if tt, td := errs(500, same, backends, false); tt > 0.05 || td > 0.05 {
		t.Fatalf("after 500 outcomes: median relative error TTFT %.3f, TPOT %.3f; want ≤ 0.05", tt, td)
	}
	slow := func(b routing.BackendID) float64 {
		if b == 2 {
			return 3
		}
		return 1
	}
	if tt, _ := errs(100, slow, 2, false); tt < 0.5 {
		t.Fatalf("slowed backend before learning: error %.3f, want the model to be off by ⅔", tt)
	}
	errs(60, slow, 2, true) // 60 of the slowed server's outcomes
	if tt, td := errs(300, slow, 2, false); tt > 0.15 || td > 0.15 {
		t.Fatalf("slowed backend after 60 of its outcomes: error TTFT %.3f, TPOT %.3f; want ≤ 0.15", tt, td)
	}
	errs(2000, slow, backends, true)
	for b := range routing.BackendID(backends) {
		if tt, td := errs(300, slow, b, false); tt > 0.08 || td > 0.08 {
			t.Fatalf("backend %d after the fleet learned the slowdown: error TTFT %.3f, TPOT %.3f; want ≤ 0.08", b, tt, td)
		}
	}
	if st := m.stats(); st.ttftSamples != 2560 || st.tpotSamples != 2560 || st.fits < 40 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLinearPartialOutcomes: an outcome with neither latency observed teaches
// nothing, and one with only TTFT leaves TPOT alone.
func TestLinearPartialOutcomes(t *testing.T) {
	m, _ := NewLinear(LinearOptions{Refit: 1})
	f := Features{Backend: 3, UncachedTokens: 1000, Waiting: -1, Running: -1, KVUtilization: -1}
	before := m.Predict(&f)
	m.Learn(&f, routing.Latency{})
	m.Learn(&f, routing.Latency{TTFT: -time.Second, TPOT: -time.Second})
	if st := m.stats(); st.ttftSamples+st.tpotSamples != 0 {
		t.Fatalf("learned from nothing: %+v", st)
	}
	for range 50 {
		m.Learn(&f, routing.Latency{TTFT: 2 * time.Second})
	}
	after := m.Predict(&f)
	if after.TPOT != before.TPOT || relErr(after.TTFT, 2*time.Second) > 0.1 {
		t.Fatalf("after 50 TTFT-only outcomes of 2s: %+v (before %+v)", after, before)
	}
}

// slowFleet is a router with a latency scorer alone over two backends, "fast" and
// "slow", whose model has learned that slow is four times slower for the same load.
func slowFleet(t *testing.T) (*routing.Router, *Linear) {
	t.Helper()
	m, err := NewLinear(LinearOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScorer(ScorerOptions{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	now := routingtest.T0
	r := routingtest.MustNew(t, routing.Options{Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: sc, Weight: 1}}}, Now: func() time.Time { return now }})
	routingtest.MustUpdate(t, r, routingtest.Fleet(2, routingtest.T0))
	fast, slow := r.Backends(nil)[0].Name, r.Backends(nil)[1].Name
	_ = fast
	slowID, _ := r.Lookup(slow)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		f := randomFeatures(rng, 2)
		k := 1.0
		if f.Backend == slowID {
			k = 4
		}
		m.Learn(&f, syntheticServer(&f, 16000, k))
	}
	return r, m
}

// TestScorerRoutes: alone, the scorer sends an idle-fleet request to the faster
// server; with a TTFT target that only the slow server, less loaded, can meet, to that one; and
// Predict gives the best prediction without picking.
func TestScorerRoutes(t *testing.T) {
	r, _ := slowFleet(t)
	req := &routing.Request{PromptTokens: 2000, Stream: true}
	p, err := r.Pick(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Backend.Name != "b0" || p.Predicted.TTFT <= 0 || p.Predicted.TPOT <= 0 {
		t.Fatalf("idle fleet: picked %s, predicted %+v; want b0 (the fast one) and a prediction", p.Backend.Name, p.Predicted)
	}
	best, ok := Predict(r, req)
	if !ok || best.TTFT <= 0 {
		t.Fatalf("Predict: %+v %v", best, ok)
	}
	// Load the fast server with prefill work until the slow one is the faster choice.
	var held []routing.Result
	for range 30 {
		h, err := r.Pick(&routing.Request{PromptTokens: 16000, Exclude: []routing.BackendID{1}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	p.Done(routing.DoneInfo{})
	q, err := r.Pick(req)
	if err != nil {
		t.Fatal(err)
	}
	if q.Backend.Name != "b1" {
		t.Fatalf("fast server loaded with 480k tokens of prefill: picked %s (predicted %+v), want b1", q.Backend.Name, q.Predicted)
	}
	q.Done(routing.DoneInfo{})
	// A target both miss: the least bad; a target only b1 meets: b1 with its headroom.
	tight := *req
	tight.Targets = routing.Latency{TTFT: time.Millisecond}
	if q, err = r.Pick(&tight); err != nil || q.Backend.Name != "b1" {
		t.Fatalf("a target no server meets: %v %v, want b1, the faster", q.Backend, err)
	}
	q.Done(routing.DoneInfo{})
	for _, h := range held {
		h.Done(routing.DoneInfo{})
	}
}

// TestRouterLearns: Done teaches the model what a streamed request got, measured from
// the pick, and nothing for a whole answer (whose first byte is its end).
func TestRouterLearns(t *testing.T) {
	r, m := slowFleet(t)
	before := m.stats()
	p, err := r.Pick(&routing.Request{PromptTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	p.Done(routing.DoneInfo{FirstTokenAt: routingtest.T0.Add(time.Second), OutputTokens: 10, End: routingtest.T0.Add(2 * time.Second)})
	if st := m.stats(); st != before {
		t.Fatalf("a whole answer was learned: %+v → %+v", before, st)
	}
	for i := range 100 {
		p, err := r.Pick(&routing.Request{PromptTokens: 100, Stream: true, Now: routingtest.T0})
		if err != nil {
			t.Fatal(err)
		}
		info := routing.DoneInfo{FirstTokenAt: routingtest.T0.Add(3 * time.Second), OutputTokens: 11, End: routingtest.T0.Add(4 * time.Second)}
		if i%2 == 1 {
			info.Err, info.End = errors.New("broken"), time.Time{}
		}
		p.Done(info)
	}
	st := m.stats()
	if st.ttftSamples != before.ttftSamples+100 || st.tpotSamples != before.tpotSamples+50 {
		t.Fatalf("after 100 streamed requests (50 failed after their first token): %+v, before %+v", st, before)
	}
	p, err = r.Pick(&routing.Request{PromptTokens: 100, Stream: true, Now: routingtest.T0})
	if err != nil {
		t.Fatal(err)
	}
	if relErr(p.Predicted.TTFT, 3*time.Second) > 0.2 || relErr(p.Predicted.TPOT, 100*time.Millisecond) > 0.2 {
		t.Fatalf("after learning 3s / 100ms on %s: predicted %+v", p.Backend.Name, p.Predicted)
	}
	p.Done(routing.DoneInfo{})
}

// TestScorerCustomModel: a model that is not the built-in one is called per
// candidate and learned like it.
func TestScorerCustomModel(t *testing.T) {
	m := &constModel{by: map[routing.BackendID]routing.Latency{0: {TTFT: time.Second}, 1: {TTFT: 100 * time.Millisecond}, 2: {TTFT: 300 * time.Millisecond}}}
	sc, err := NewScorer(ScorerOptions{Model: m, OutputTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := routingtest.MustNew(t, routing.Options{Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: sc, Weight: 1}}}})
	routingtest.MustUpdate(t, r, routingtest.Fleet(3, routingtest.T0))
	p, err := r.Pick(&routing.Request{PromptTokens: 10, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != 1 || p.Predicted.TTFT != 100*time.Millisecond {
		t.Fatalf("picked %d predicted %+v, want 1 at 100ms", p.ID, p.Predicted)
	}
	p.Done(routing.DoneInfo{FirstTokenAt: time.Now()})
	if m.learned.Load() != 1 {
		t.Fatalf("learned %d outcomes, want 1", m.learned.Load())
	}
	dst := make([]float64, 3)
	cands := []routing.Candidate{{ID: 0}, {ID: 1}, {ID: 2}}
	sc.Score(&routing.Request{}, cands, dst)
	if want := []float64{0.55, 1, 2.0 / 3}; math.Abs(dst[0]-want[0]) > 1e-9 || dst[1] != 1 || math.Abs(dst[2]-want[2]) > 1e-9 {
		t.Fatalf("scores %v, want %v", dst, want)
	}
	sc.Score(&routing.Request{Targets: routing.Latency{TTFT: 500 * time.Millisecond}}, cands, dst)
	if dst[0] >= 0.5 || math.Abs(dst[1]-0.9) > 1e-9 || math.Abs(dst[2]-0.7) > 1e-9 {
		t.Fatalf("scores with a 500ms target %v, want <0.5, 0.9 (80%% headroom), 0.7 (40%%)", dst)
	}
}

type constModel struct {
	by      map[routing.BackendID]routing.Latency
	learned atomicCount
}

func (m *constModel) Predict(f *Features) routing.Latency { return m.by[f.Backend] }
func (m *constModel) Learn(*Features, routing.Latency)    { m.learned.Add(1) }

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) Add(d int) { c.mu.Lock(); c.n += d; c.mu.Unlock() }
func (c *atomicCount) Load() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// TestScorerAllocs: Pick and Done with the built-in model, learning included, allocate
// nothing once warm, on both of Pick's paths.
func TestScorerAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector allocates")
	}
	for _, general := range []bool{false, true} {
		sc, _ := NewScorer(ScorerOptions{})
		r, req := routingtest.BenchRouter(t, 16, profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: sc, Weight: 1}))
		req.Stream = true
		if general {
			req.Exclude = []routing.BackendID{3}
		}
		info := routing.DoneInfo{FirstTokenAt: routingtest.T0.Add(time.Second), End: routingtest.T0.Add(2 * time.Second), OutputTokens: 20}
		for range 100 { // warm the model's buffers
			p, _ := r.Pick(req)
			p.Done(info)
		}
		if n := testing.AllocsPerRun(500, func() {
			p, err := r.Pick(req)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(info)
		}); n != 0 {
			t.Errorf("general path %v: %v allocations per Pick+Done, want 0", general, n)
		}
		if n := testing.AllocsPerRun(200, func() { Predict(r, req) }); n != 0 {
			t.Errorf("Predict: %v allocations, want 0", n)
		}
	}
}

// TestScorerConcurrent: picks, outcomes and predictions from many goroutines (run
// under -race) keep the model consistent.
func TestScorerConcurrent(t *testing.T) {
	m, _ := NewLinear(LinearOptions{Refit: 8})
	sc, _ := NewScorer(ScorerOptions{Model: m})
	r := routingtest.MustNew(t, routing.Options{Profile: profiles.Usher(profiles.UsherOptions{}).With(routing.Weighted{Scorer: sc, Weight: 2})})
	routingtest.MustUpdate(t, r, routingtest.Fleet(8, routingtest.T0))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 300 {
				req := &routing.Request{PromptTokens: 100 * (i + g), Stream: true}
				p, err := r.Pick(req)
				if err != nil {
					t.Error(err)
					return
				}
				if _, ok := Predict(r, req); !ok {
					t.Error("Predict: no prediction")
				}
				at := time.Now()
				p.Done(routing.DoneInfo{FirstTokenAt: at.Add(time.Duration(i) * time.Millisecond), End: at.Add(time.Second), OutputTokens: 5})
			}
		})
	}
	wg.Wait()
	if st := m.stats(); st.ttftSamples == 0 || st.fits == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFirstTokenTeachesTTFT: a streamed request's TTFT is learned when its first token comes,
// not at the end of its answer, and Done then adds only its TPOT.
func TestFirstTokenTeachesTTFT(t *testing.T) {
	r, m := slowFleet(t)
	before := m.stats()
	p, err := r.Pick(&routing.Request{PromptTokens: 100, Stream: true, Now: routingtest.T0})
	if err != nil {
		t.Fatal(err)
	}
	p.FirstToken(routingtest.T0.Add(time.Second))
	if st := m.stats(); st.ttftSamples != before.ttftSamples+1 || st.tpotSamples != before.tpotSamples {
		t.Fatalf("after FirstToken: %+v, before %+v; want one TTFT sample more", st, before)
	}
	p.Done(routing.DoneInfo{FirstTokenAt: routingtest.T0.Add(time.Second), OutputTokens: 3, End: routingtest.T0.Add(2 * time.Second)})
	if st := m.stats(); st.ttftSamples != before.ttftSamples+1 || st.tpotSamples != before.tpotSamples+1 {
		t.Fatalf("after Done: %+v, before %+v; want one TPOT sample more and no second TTFT", st, before)
	}
}

// BenchmarkLinear measures one prediction and one outcome learned (refits included,
// amortised over the default 16 outcomes between them).
func BenchmarkLinear(b *testing.B) {
	m, err := NewLinear(LinearOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f := Features{Backend: 3, PromptTokens: 4000, UncachedTokens: 2000, PrefillTokens: 9000, InFlight: 7, Waiting: 2, Running: 30, KVUtilization: 0.6}
	obs := routing.Latency{TTFT: 800 * time.Millisecond, TPOT: 30 * time.Millisecond}
	b.Run("predict", func(b *testing.B) {
		b.ReportAllocs()
		var sink routing.Latency
		for b.Loop() {
			sink = m.Predict(&f)
		}
		_ = sink
	})
	b.Run("learn", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			f.Waiting = i % 5
			m.Learn(&f, obs)
		}
	})
}

// TestScorerPaths: the scorer over the built-in model gives the same choice and score, bit for
// bit, on the Router's column path (every backend a candidate, columns from the snapshot) and
// its general path (a custom filter: the scorer reads the Candidates), and Score agrees.
func TestScorerPaths(t *testing.T) {
	m, err := NewLinear(LinearOptions{Refit: 16})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 300 {
		f := randomFeatures(rng, 8)
		m.Learn(&f, syntheticServer(&f, 12000, 1+float64(f.Backend%3)))
	}
	sc, _ := NewScorer(ScorerOptions{Model: m})
	var direct []float64
	spy := routing.FilterFunc(func(req *routing.Request, cands []routing.Candidate) []routing.Candidate {
		direct = make([]float64, len(cands))
		sc.Score(req, cands, direct)
		return cands
	})
	states := routingtest.Fleet(8, routingtest.T0)
	for i := range states {
		states[i].Queued, states[i].Running, states[i].KVUtilization = i%3, (i*7)%11, float64(i%5)/5
	}
	fast := routingtest.MustNew(t, routing.Options{Profile: routing.Profile{Scorers: []routing.Weighted{{Scorer: sc, Weight: 1}}}})
	general := routingtest.MustNew(t, routing.Options{Profile: routing.Profile{Filters: []routing.Filter{spy}, Scorers: []routing.Weighted{{Scorer: sc, Weight: 1}}}})
	routingtest.MustUpdate(t, fast, states)
	routingtest.MustUpdate(t, general, states)
	for i := range 50 {
		req := &routing.Request{PromptTokens: 100 + 97*i, OutputTokens: i % 300}
		if i%4 == 0 {
			req.Targets = routing.Latency{TTFT: time.Duration(i) * 10 * time.Millisecond}
		}
		a, err := fast.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := general.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		if a.ID != b.ID || a.Score != b.Score || direct[b.ID] != b.Score {
			t.Fatalf("request %d: column path %d (%v), general path %d (%v), Score %v", i, a.ID, a.Score, b.ID, b.Score, direct)
		}
		a.Done(routing.DoneInfo{})
		b.Done(routing.DoneInfo{})
	}
}
