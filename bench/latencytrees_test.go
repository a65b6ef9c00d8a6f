package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/latency"
)

// treeTruth is a synthetic server: the latency a request with features f gets on it, in
// seconds, before noise. The features it sees are the true ones; the models see them with
// some polled signals hidden (−1), as a router does.
type treeTruth func(f *latency.Features) (ttft, tpot float64)

// treeLinearTruth: TTFT is linear in the prefill work and the batch, TPOT in the batch and KV use.
func treeLinearTruth(f *latency.Features) (ttft, tpot float64) {
	work := float64(f.PrefillTokens + int64(f.UncachedTokens))
	return 0.02 + work/16000 + 0.0005*float64(f.Running),
		0.012 + 0.0003*float64(f.Running) + 0.005*f.KVUtilization
}

// treeKneeTruth returns a queueing knee — past 20k tokens of prefill work TTFT grows steep times
// as fast — and preemption: TPOT triples once the KV cache is over 85% full.
func treeKneeTruth(steep float64) treeTruth {
	return func(f *latency.Features) (ttft, tpot float64) {
		work := float64(f.PrefillTokens + int64(f.UncachedTokens))
		ttft = 0.02 + work/16000 + 0.0005*float64(f.Running)
		if work > 20000 {
			ttft += (steep - 1) * (work - 20000) / 16000
		}
		tpot = 0.012 + 0.0003*float64(f.Running)
		if f.KVUtilization > 0.85 {
			tpot *= 3
		}
		return ttft, tpot
	}
}

// treeStream draws requests' features and what they got.
type treeStream struct {
	rng      *rand.Rand
	backends int
	truth    treeTruth
	slow     map[routing.BackendID]float64 // a backend's latency multiplier
}

func newTreeStream(seed uint64, backends int, truth treeTruth) *treeStream {
	return &treeStream{rng: rand.New(rand.NewPCG(seed, 31)), backends: backends, truth: truth,
		slow: map[routing.BackendID]float64{}}
}

// next returns the features a model sees, the observed latency and the latency without noise.
func (s *treeStream) next() (f latency.Features, observed, exact routing.Latency) {
	r := s.rng
	prompt := 200 + r.IntN(8000)
	f = latency.Features{
		Backend:        routing.BackendID(r.IntN(s.backends)),
		PromptTokens:   prompt,
		UncachedTokens: int(float64(prompt) * r.Float64()),
		PrefillTokens:  int64(r.ExpFloat64() * 8000),
		Waiting:        r.IntN(16),
		Running:        r.IntN(64),
		KVUtilization:  r.Float64(),
	}
	f.InFlight = int64(f.Waiting + f.Running + r.IntN(4))
	t, d := s.truth(&f)
	if k, ok := s.slow[f.Backend]; ok {
		t, d = k*t, k*d
	}
	exact = routing.Latency{TTFT: treeSeconds(t), TPOT: treeSeconds(d)}
	// Noise: lognormal, σ = 0.1.
	t *= math.Exp(0.1 * r.NormFloat64())
	d *= math.Exp(0.1 * r.NormFloat64())
	// One poll in ten is stale for each signal.
	if r.IntN(10) == 0 {
		f.Waiting = -1
	}
	if r.IntN(10) == 0 {
		f.Running = -1
	}
	if r.IntN(10) == 0 {
		f.KVUtilization = -1
	}
	return f, routing.Latency{TTFT: treeSeconds(t), TPOT: treeSeconds(d)}, exact
}

// treeErrors replays n outcomes through m, predicting each before learning it, and returns
// the median absolute errors of TTFT and TPOT over the outcomes after the first warm. A nil m
// predicts the latency without noise: the floor no model can beat.
func treeErrors(m latency.Model, s *treeStream, n, warm int) (ttft, tpot time.Duration) {
	var et, ed []time.Duration
	for i := range n {
		f, obs, exact := s.next()
		if m == nil {
			if i >= warm {
				et = append(et, (exact.TTFT - obs.TTFT).Abs())
				ed = append(ed, (exact.TPOT - obs.TPOT).Abs())
			}
			continue
		}
		p := m.Predict(&f)
		if i >= warm {
			et = append(et, (p.TTFT - obs.TTFT).Abs())
			ed = append(ed, (p.TPOT - obs.TPOT).Abs())
		}
		m.Learn(&f, obs)
	}
	return treeMedian(et), treeMedian(ed)
}

func treeMedian(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func newTreeBaseline(t testing.TB) *latency.Linear {
	m, err := latency.NewLinear(latency.LinearOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTreeLatencyPrior(t *testing.T) {
	m := newTreeLatency(treeOptions{})
	for _, tc := range []struct {
		f    latency.Features
		want routing.Latency
	}{
		{latency.Features{}, routing.Latency{TTFT: 20 * time.Millisecond, TPOT: 20 * time.Millisecond}},
		{latency.Features{PrefillTokens: 12000, UncachedTokens: 4000, Running: 3},
			routing.Latency{TTFT: 1020 * time.Millisecond, TPOT: 20 * time.Millisecond}},
	} {
		got := m.Predict(&tc.f)
		if (got.TTFT-tc.want.TTFT).Abs() > time.Microsecond || (got.TPOT-tc.want.TPOT).Abs() > time.Microsecond {
			t.Errorf("Predict(%+v) before any outcome = %v, want the prior %v", tc.f, got, tc.want)
		}
	}
}

// TestTreeLatencyVersusLinear: on a ground truth with a knee the trees beat the linear model on
// median absolute error; on a linear one they are not much worse.
func TestTreeLatencyVersusLinear(t *testing.T) {
	n, warm := 12000, 4000
	if raceEnabled {
		n, warm = 6000, 3000
	}
	for _, tc := range []struct {
		name  string
		truth treeTruth
		// the trees' error may be at most this multiple of the linear model's
		ttft, tpot float64
	}{
		{"knee×10", treeKneeTruth(10), 0.8, 0.8},
		{"knee×3", treeKneeTruth(3), 0.8, 0.8},
		{"linear", treeLinearTruth, 1.2, 1.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt, ld := treeErrors(newTreeBaseline(t), newTreeStream(1, 8, tc.truth), n, warm)
			tt, td := treeErrors(newTreeLatency(treeOptions{}), newTreeStream(1, 8, tc.truth), n, warm)
			nt, nd := treeErrors(nil, newTreeStream(1, 8, tc.truth), n, warm)
			t.Logf("%s: median |error| TTFT linear %v trees %v (noise floor %v); TPOT linear %v trees %v (floor %v)",
				tc.name, lt, tt, nt, ld, td, nd)
			if float64(tt) > tc.ttft*float64(lt) {
				t.Errorf("TTFT: trees' median error %v, want ≤ %.1f × linear's %v", tt, tc.ttft, lt)
			}
			if float64(td) > tc.tpot*float64(ld) {
				t.Errorf("TPOT: trees' median error %v, want ≤ %.1f × linear's %v", td, tc.tpot, ld)
			}
		})
	}
}

// TestTreeLatencyTransform measures the choice of target: log(latency) against seconds.
func TestTreeLatencyTransform(t *testing.T) {
	if raceEnabled {
		t.Skip("a measurement, slow under the race detector")
	}
	const n, warm = 12000, 4000
	for _, tc := range []struct {
		name  string
		truth treeTruth
	}{{"knee×10", treeKneeTruth(10)}, {"knee×3", treeKneeTruth(3)}, {"linear", treeLinearTruth}} {
		lt, ld := treeErrors(newTreeLatency(treeOptions{}), newTreeStream(2, 8, tc.truth), n, warm)
		rt, rd := treeErrors(newTreeLatency(treeOptions{raw: true}), newTreeStream(2, 8, tc.truth), n, warm)
		t.Logf("%s: median |error| TTFT log %v raw %v; TPOT log %v raw %v", tc.name, lt, rt, ld, rd)
		if float64(lt) > 1.1*float64(rt) || float64(ld) > 1.1*float64(rd) {
			t.Errorf("%s: the log target's errors (%v, %v) are worse than the raw one's (%v, %v)", tc.name, lt, ld, rt, rd)
		}
	}
}

// TestTreeLatencyAdapts: one backend of four slows 3× mid-stream; within a few hundred of its
// outcomes the error on it is back to what it was.
func TestTreeLatencyAdapts(t *testing.T) {
	const backends, change, slowed = 4, 8000, routing.BackendID(2)
	for _, truth := range []struct {
		name string
		f    treeTruth
	}{{"knee×10", treeKneeTruth(10)}, {"linear", treeLinearTruth}} {
		for _, tc := range []struct {
			name string
			m    latency.Model
		}{{"trees", newTreeLatency(treeOptions{})}, {"linear", newTreeBaseline(t)}} {
			s := newTreeStream(3, backends, truth.f)
			var before, after []float64 // relative TTFT errors on the slowed backend
			for i := 0; len(after) < 600; i++ {
				if i == change {
					s.slow[slowed] = 3
				}
				f, obs, _ := s.next()
				p := tc.m.Predict(&f)
				if f.Backend == slowed {
					e := math.Abs(float64(p.TTFT-obs.TTFT)) / float64(obs.TTFT)
					if i < change {
						before = append(before, e)
					} else {
						after = append(after, e)
					}
				}
				tc.m.Learn(&f, obs)
			}
			rel := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
			base := rel(before[len(before)-300:])
			t.Logf("%s truth, %s: median relative TTFT error on the slowed backend: before %.3f; after, its outcomes 0–20 %.3f, 20–100 %.3f, 100–300 %.3f, 300–600 %.3f",
				truth.name, tc.name, base, rel(after[:20]), rel(after[20:100]), rel(after[100:300]), rel(after[300:]))
			if late := rel(after[300:]); tc.name == "trees" && late > 1.5*base+0.03 {
				t.Errorf("%s truth, trees: error on the slowed backend after 300 of its outcomes %.3f, want ≤ 1.5 × %.3f + 0.03",
					truth.name, late, base)
			}
		}
	}
}

func warmTree(t testing.TB, n int) (*treeLatency, []latency.Features) {
	m := newTreeLatency(treeOptions{})
	s := newTreeStream(4, 8, treeKneeTruth(10))
	fs := make([]latency.Features, 0, 256)
	for i := range n {
		f, obs, _ := s.next()
		m.Learn(&f, obs)
		if i < 256 {
			fs = append(fs, f)
		}
	}
	return m, fs
}

func TestTreeLatencyPredictAllocs(t *testing.T) {
	m, fs := warmTree(t, 2000)
	var lm latency.Model = m
	var sink routing.Latency
	if got := testing.AllocsPerRun(1000, func() { sink = lm.Predict(&fs[7]) }); got != 0 {
		t.Errorf("Predict allocates %v times per call, want 0", got)
	}
	_ = sink
}

// TestTreeLatencyConcurrent runs Predict and Learn from several goroutines (meant for -race),
// on backends first seen concurrently, and checks the predictions stay sane.
func TestTreeLatencyConcurrent(t *testing.T) {
	m := newTreeLatency(treeOptions{Refit: 64})
	const workers, each = 4, 1500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := newTreeStream(uint64(10+w), 4*(w+1), treeKneeTruth(10))
			for range each {
				f, obs, _ := s.next()
				p := m.Predict(&f)
				if p.TTFT <= 0 || p.TPOT <= 0 {
					t.Errorf("Predict(%+v) = %v, want positive", f, p)
					return
				}
				m.Learn(&f, obs)
			}
		})
	}
	wg.Wait()
	f := latency.Features{Backend: 15, PromptTokens: 1000, UncachedTokens: 1000, PrefillTokens: 4000,
		Waiting: 2, Running: 30, KVUtilization: 0.5, InFlight: 33}
	got := m.Predict(&f)
	wantT, wantD := treeKneeTruth(10)(&f)
	if r := got.TTFT.Seconds() / wantT; r < 0.5 || r > 2 {
		t.Errorf("after concurrent learning, TTFT %v, want about %.3fs", got.TTFT, wantT)
	}
	if r := got.TPOT.Seconds() / wantD; r < 0.5 || r > 2 {
		t.Errorf("after concurrent learning, TPOT %v, want about %.3fs", got.TPOT, wantD)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ttft.n != workers*each || m.fits == 0 {
		t.Errorf("learned %d outcomes in %d fits, want %d in some", m.ttft.n, m.fits, workers*each)
	}
}

func BenchmarkTreeLatencyPredict(b *testing.B) {
	m, fs := warmTree(b, 8192)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Predict(&fs[i&255])
		i++
	}
}

func BenchmarkLinearLatencyPredict(b *testing.B) {
	m := newTreeBaseline(b)
	s := newTreeStream(4, 8, treeKneeTruth(10))
	fs := make([]latency.Features, 256)
	for i := range 8192 {
		f, obs, _ := s.next()
		m.Learn(&f, obs)
		fs[i&255] = f
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Predict(&fs[i&255])
		i++
	}
}

// BenchmarkTreeLatencyRefit: one refit of both ensembles on a full window (4096 outcomes at
// the defaults), what the Learn call that triggers it pays.
func BenchmarkTreeLatencyRefit(b *testing.B) {
	m, _ := warmTree(b, 8192)
	b.ReportAllocs()
	for b.Loop() {
		m.mu.Lock()
		m.refitLocked()
		m.mu.Unlock()
	}
}
