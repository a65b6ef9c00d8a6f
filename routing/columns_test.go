package routing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/cols"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
)

// The built-in scorers are scored two ways: Score over Candidates (what custom code calls) and
// addCols over a pick's columns (what Pick calls). These tests hold the two, and a Router's
// columnar fast path and its general path, to the same bits.

// randomCands returns n candidates with signals that are missing, stale, out of range (as a
// custom filter's candidates may be) or ordinary, and matches that are negative, oversized or
// ordinary.
func randomCands(rng *rand.Rand, n int) []Candidate {
	states := make([]BackendState, n)
	cands := make([]Candidate, n)
	for i := range cands {
		st := &states[i]
		st.Queued = rng.IntN(9) - 1
		st.Running = rng.IntN(5)
		st.KVUtilization = []float64{0, 0.25, 1, 0.7, -1, 1.5, math.NaN()}[rng.IntN(7)]
		if rng.IntN(6) == 0 {
			st.Queued = 1 << 40
		}
		cands[i] = Candidate{
			State: st,
			Fresh: Signal(rng.IntN(16)),
			InFlight: InFlight{
				Requests:      int64(rng.IntN(6) - 1),
				PrefillTokens: int64(rng.IntN(1<<22)) - 1000,
			},
			MatchedBlocks:  rng.IntN(40) - 4,
			UncachedTokens: rng.IntN(5000) - 10,
			ID:             BackendID(rng.IntN(6)),
		}
		cands[i].MatchedTokens = cands[i].MatchedBlocks * 16
		if rng.IntN(8) == 0 {
			cands[i].InFlight.PrefillTokens = 1 << 50
		}
		if rng.IntN(3) == 0 {
			cands[i].Fresh = AllSignals // most candidates know everything
		}
	}
	return cands
}

func builtinUnitScorers() []Scorer {
	return []Scorer{
		prefix.Ratio(), prefix.Length(0), prefix.Length(100), load.QueueDepth(), load.Running(),
		load.Active(), load.KV(), load.TokenBacklog(0), load.TokenBacklog(3000),
		trainedLatencyScorer(),
	}
}

// trainedLatencyScorer is PredictedLatency over a built-in model that has learned a little, so
// that its fit and its speed factors (for backends 0 to 3) are not the prior's.
func trainedLatencyScorer() Scorer {
	m, err := latency.NewLinear(latency.LinearOptions{Refit: 16})
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		f := latency.Features{Backend: BackendID(rng.IntN(4)), UncachedTokens: rng.IntN(3000), PrefillTokens: int64(rng.IntN(9000)),
			Waiting: rng.IntN(4), Running: rng.IntN(30), KVUtilization: rng.Float64(), InFlight: int64(rng.IntN(20))}
		m.Learn(&f, Latency{TTFT: time.Duration(1+rng.IntN(900)) * time.Millisecond, TPOT: time.Duration(10+rng.IntN(30)) * time.Millisecond})
	}
	s, err := latency.NewScorer(latency.ScorerOptions{Model: m})
	if err != nil {
		panic(err)
	}
	return s
}

func TestUnitScorerColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(12)
		cands := randomCands(rng, n)
		if round%5 == 0 {
			for i := range cands {
				cands[i].Fresh = AllSignals // every signal known: the scorers' shortcuts
				cands[i].State.KVUtilization = float64(rng.IntN(5)) / 4
				cands[i].State.Queued = rng.IntN(3)
			}
		}
		req := &Request{Chain: make([]prefixcache.BlockHash, rng.IntN(30)), BlockSize: 16}
		for _, s := range builtinUnitScorers() {
			u := s.(UnitScorer)
			want := make([]float64, n)
			s.Score(req, cands, want)

			var c cols.Cols[Candidate, BackendID, Signal]
			c.Grow(n)
			ColsFrom(&c, cands, u.Needs())
			for _, precomputed := range []bool{false, true} {
				if precomputed {
					// As the snapshot's columns come: with their statistics, and without the
					// Candidates (gather's columns).
					c.QueuedStats, c.RunningStats, c.KVStats = cols.StatsOf(c.Queued[:n]), cols.StatsOf(c.Running[:n]), cols.StatsOf(c.KV[:n])
					c.Cands = nil
				}
				got := make([]float64, n)
				u.AddCols(req, &c, 1, got)
				base := make([]float64, n)
				for i := range base {
					base[i] = float64(rng.IntN(100)) / 7
				}
				acc := append([]float64(nil), base...)
				u.AddCols(req, &c, 2.5, acc)
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("round %d, %T (precomputed stats %v), candidate %d: addCols with weight 1 gave %v, Score %v",
							round, s, precomputed, i, got[i], want[i])
					}
					if w := base[i] + 2.5*want[i]; math.Float64bits(acc[i]) != math.Float64bits(w) {
						t.Fatalf("round %d, %T (precomputed stats %v), candidate %d: addCols with weight 2.5 gave %v, want %v",
							round, s, precomputed, i, acc[i], w)
					}
				}
			}
		}
	}
}

// genericPicker hides a built-in picker's type from the Router.
type genericPicker struct{ p Picker }

func (g genericPicker) Pick(req *Request, cands []Candidate, scores []float64, rng *rand.Rand) int {
	return g.p.Pick(req, cands, scores, rng)
}

// generic returns p with every filter, scorer and picker wrapped so that a Router takes its
// general path: Candidates for all, Score into a buffer, clamp, then combine.
func generic(p Profile) Profile {
	g := Profile{Name: p.Name + "/generic", Picker: genericPicker{p.Picker}}
	if p.Picker == nil {
		g.Picker = genericPicker{pick.MaxScore()}
	}
	for _, f := range p.Filters {
		g.Filters = append(g.Filters, FilterFunc(f.Filter))
	}
	for _, w := range p.Scorers {
		g.Scorers = append(g.Scorers, Weighted{Scorer: ScorerFunc(w.Scorer.Score), Weight: w.Weight})
	}
	return g
}

func TestFastPathMatchesGeneralPath(t *testing.T) {
	profiles := []func() Profile{
		benchProfile, profiles.LLMDDefault, profiles.LeastRequest, profiles.RoundRobin,
		func() Profile {
			return Profile{Scorers: []Weighted{{Scorer: load.Running(), Weight: 1}, {Scorer: prefix.Length(64), Weight: 2}, {Scorer: load.TokenBacklog(5000), Weight: 1}}, Picker: pick.WeightedRandom()}
		},
		func() Profile {
			return Profile{Filters: []Filter{outlier.HealthFilter(), outlier.HealthFilter()}, Scorers: []Weighted{{Scorer: load.Active(), Weight: 1}, {Scorer: load.KV(), Weight: 1}}, Picker: pick.PowerOfTwo()}
		},
		func() Profile {
			return Profile{Filters: []Filter{outlier.HealthFilter()}, Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: 1}, {Scorer: prefix.Ratio(), Weight: 1}}, Picker: pick.Softmax(0.2)}
		},
		func() Profile {
			// No filter: stale candidates are scored, so the columns are computed per pick.
			return Profile{Scorers: []Weighted{{Scorer: load.QueueDepth(), Weight: 1}, {Scorer: load.KV(), Weight: 1.5}, {Scorer: load.Running(), Weight: 0.5}, {Scorer: load.Active(), Weight: 2}}}
		},
		func() Profile {
			// Each call its own model, trained alike.
			return Profile{Filters: []Filter{outlier.HealthFilter()}, Scorers: []Weighted{{Scorer: trainedLatencyScorer(), Weight: 1}, {Scorer: load.TokenBacklog(9000), Weight: 1}}}
		},
	}
	for pi, mk := range profiles {
		t.Run(fmt.Sprint(pi, "-", mk().Name), func(t *testing.T) {
			comparePaths(t, mk(), generic(mk()), uint64(pi))
		})
	}
}

// comparePaths drives a router built from fast and one built from slow with the same backend
// sets, requests and completions, and requires the same picks, scores and counters.
func comparePaths(t *testing.T, fast, slow Profile, seed uint64) {
	now := routingtest.T0
	clock := func() time.Time { return now }
	var routers [2]*Router
	var indexes [2]*prefixcache.Index
	for i, p := range []Profile{fast, slow} {
		ix, err := prefixcache.New(prefixcache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		indexes[i] = ix
		routers[i] = routingtest.MustNew(t, Options{Profile: p, Index: ix, Now: clock, Seed: 7, StaleAfter: time.Second})
	}
	if !Fast(routers[0]) || Fast(routers[1]) {
		t.Fatalf("fast path: %v and %v, want true and false", Fast(routers[0]), Fast(routers[1]))
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	chains := make([][]prefixcache.BlockHash, 4)
	for i := range chains {
		chains[i] = make([]prefixcache.BlockHash, 8+rng.IntN(24))
		for k := range chains[i] {
			chains[i][k] = prefixcache.BlockHash(uint64(i+1)<<32 | uint64(k+1))
		}
	}
	var open [2][]Result
	for step := range 1500 {
		switch op := rng.IntN(10); {
		case op == 0 || step == 0:
			states := routingtest.Fleet(1+rng.IntN(9), now)
			for i := range states {
				s := &states[i]
				s.Queued, s.Running = rng.IntN(6), rng.IntN(4)
				s.KVUtilization = float64(rng.IntN(11)) / 10
				switch rng.IntN(12) {
				case 0:
					s.UpdatedAt = now.Add(-3 * time.Second) // stale
				case 1:
					s.UpdatedAt = time.Time{} // never observed
				case 2:
					s.Health = Unhealthy
				case 3:
					s.Known &^= Signal(1 + rng.IntN(15))
				case 4:
					s.Role = Role(1 + rng.IntN(2))
				case 5:
					s.UpdatedAt = now.Add(time.Duration(rng.IntN(3)) * time.Second) // from the future
				}
			}
			for _, r := range routers {
				routingtest.MustUpdate(t, r, states)
			}
		case op <= 6:
			req := &Request{PromptTokens: rng.IntN(3000)}
			if rng.IntN(3) > 0 {
				req.Chain = chains[rng.IntN(len(chains))][:1+rng.IntN(8)]
			}
			if rng.IntN(8) == 0 {
				req.Role = Role(1 + rng.IntN(2))
			}
			if rng.IntN(8) == 0 {
				req.Exclude = []BackendID{BackendID(rng.IntN(4))}
			}
			var res [2]Result
			var errs [2]error
			for i, r := range routers {
				res[i], errs[i] = r.Pick(req)
			}
			if (errs[0] == nil) != (errs[1] == nil) {
				t.Fatalf("step %d: errors %v and %v", step, errs[0], errs[1])
			}
			if errs[0] != nil {
				continue
			}
			a, b := res[0], res[1]
			if a.ID != b.ID || math.Float64bits(a.Score) != math.Float64bits(b.Score) ||
				a.MatchedBlocks != b.MatchedBlocks || a.UncachedTokens != b.UncachedTokens {
				t.Fatalf("step %d: fast path picked %d (score %v, %d blocks, %d uncached), general path %d (score %v, %d blocks, %d uncached)",
					step, a.ID, a.Score, a.MatchedBlocks, a.UncachedTokens, b.ID, b.Score, b.MatchedBlocks, b.UncachedTokens)
			}
			for i := range open {
				open[i] = append(open[i], res[i])
			}
		case op <= 8 && len(open[0]) > 0:
			k := rng.IntN(len(open[0]))
			info := DoneInfo{}
			if rng.IntN(4) == 0 {
				info.Err = errBench
			}
			for i := range open {
				open[i][k].Done(info)
				open[i] = append(open[i][:k], open[i][k+1:]...)
			}
		default:
			now = now.Add(time.Duration(rng.IntN(600)) * time.Millisecond)
		}
	}
	if a, b := routers[0].Stats(), routers[1].Stats(); a != b {
		t.Fatalf("stats differ:\nfast    %+v\ngeneral %+v", a, b)
	}
}
