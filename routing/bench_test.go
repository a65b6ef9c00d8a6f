package routing_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/benchcpu"
	"github.com/usher-llm/usher/internal/peer"
	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/latency"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/pick"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
)

// benchProfile is the benchmark configuration: four scorers, one of them a prefix match.
func benchProfile() Profile {
	return Profile{
		Name:    "bench-four",
		Filters: []Filter{outlier.HealthFilter()},
		Scorers: []Weighted{{Scorer: prefix.Ratio(), Weight: 3}, {Scorer: load.QueueDepth(), Weight: 2}, {Scorer: load.KV(), Weight: 2}, {Scorer: load.TokenBacklog(0), Weight: 1}},
		Picker:  pick.MaxScore(),
	}
}

var errBench = errors.New("bench")

// BenchmarkPick measures one Pick and its Done for 8, 100 and 1,000 backends with four scorers
// including a 128-block prefix match. The request succeeds, so what the index learns is the
// pick's own insert, which on a chain the chosen backend already holds is none: the steady
// state of a repeated prompt. BenchmarkPickRetract measures the other case.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{8, 100, 1000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, n, benchProfile())
			pickLoop(b, r, req, DoneInfo{FirstTokenAt: routingtest.T0})
		})
	}
}

// pickLoop is the measured loop of the Pick benchmarks: Pick and Done(info), with the
// thread's CPU time per op reported.
func pickLoop(b *testing.B, r *Router, req *Request, info DoneInfo) {
	b.ReportAllocs()
	cpu := benchcpu.StartThread()
	for b.Loop() {
		p, err := r.Pick(req)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(info)
	}
	cpu.Stop(b)
}

// BenchmarkPickPeers is BenchmarkPick at 100 backends without peers' in-flight counts, with
// the same counts set on every backend (so that the picks are those of "none": what the extra
// loads cost), and with counts that differ per backend (setPeerInFlight), so that each
// candidate's counts are own + peers'.
func BenchmarkPickPeers(b *testing.B) {
	for _, tc := range []struct {
		name  string
		peers func(i int) InFlight
	}{
		{"peers=none", nil},
		{"peers=uniform", func(int) InFlight { return InFlight{Requests: 1, PrefillTokens: 100, Blocks: 2} }},
		{"peers=varied", func(i int) InFlight {
			return InFlight{Requests: int64(i % 4), PrefillTokens: int64(i * 100), Blocks: int64(i)}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, 100, benchProfile())
			if tc.peers != nil {
				var loads []peer.Load
				for i, s := range r.Backends(nil) {
					v := tc.peers(i)
					loads = append(loads, peer.Load{Backend: s.Name, Requests: v.Requests, PrefillTokens: v.PrefillTokens, Blocks: v.Blocks})
				}
				peer.SetPeerLoads(r, loads)
			}
			pickLoop(b, r, req, DoneInfo{FirstTokenAt: routingtest.T0})
		})
	}
}

// BenchmarkPickProfiles measures every peer configuration and usher's at 100 backends, each
// request succeeding (see BenchmarkPick).
func BenchmarkPickProfiles(b *testing.B) {
	for _, p := range []Profile{
		profiles.LLMDDefault(), profiles.LLMDSticky(profiles.LLMDStickyOptions{}), profiles.SGLang(profiles.SGLangCacheAwareOptions{}),
		profiles.Dynamo(profiles.DynamoCostOptions{}), profiles.AIBrix(), profiles.RoundRobin(), profiles.LeastRequest(), profiles.Usher(profiles.UsherOptions{}),
	} {
		b.Run(p.Name, func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, 100, p)
			req.Session = "session-1"
			b.ReportAllocs()
			for b.Loop() {
				pk, err := r.Pick(req)
				if err != nil {
					b.Fatal(err)
				}
				pk.Done(DoneInfo{FirstTokenAt: routingtest.T0})
			}
		})
	}
}

// BenchmarkPickRetract is a pick that learns a chain no backend holds (a fresh 128-block
// prompt each time, round-robin placement) and fails before its first token, so Done
// retracts the prediction: Pick, the insert, Done and the removal.
func BenchmarkPickRetract(b *testing.B) {
	r, req := routingtest.BenchRouter(b, 100, profiles.RoundRobin())
	chains := make([][]prefixcache.BlockHash, 64)
	for i := range chains {
		chains[i] = make([]prefixcache.BlockHash, len(req.Chain))
		for k := range chains[i] {
			chains[i][k] = prefixcache.BlockHash(uint64(i+1)<<32 | uint64(k+1))
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req.Chain = chains[i%len(chains)]
		i++
		p, err := r.Pick(req)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(DoneInfo{Err: errBench})
	}
	if r.Stats().Retracted == 0 {
		b.Fatal("nothing was retracted")
	}
}

// BenchmarkPickInsert is the full cycle at 100 backends: Pick, FirstToken (which inserts the
// request's 128-block chain into the chosen backend's index entries) and Done.
//
// new-chain brings a chain no backend holds on every request, cycling over 4,096 of them
// (64 MiB of distinct prompts at 16 tokens a block), into backends of 2,048 blocks each, so
// that once the first few are full every insert stores 128 new blocks and evicts as many: the
// cost of learning fresh traffic. repeat-chain sends one chain over and over, so its insert
// only re-touches blocks already held: the steady state of a repeated prompt.
func BenchmarkPickInsert(b *testing.B) {
	b.Run("new-chain", func(b *testing.B) {
		r, req, ix := routingtest.BenchRouterIndex(b, 100, benchProfile(), prefixcache.Options{})
		for _, s := range r.Backends(nil) {
			id, _ := ix.Lookup(s.Name)
			if err := ix.SetCapacity(id, 2048); err != nil {
				b.Fatal(err)
			}
		}
		chains := distinctChains(4096, len(req.Chain))
		evicted := ix.Stats().Evictions
		b.ReportAllocs()
		cpu := benchcpu.StartThread()
		i := 0
		for b.Loop() {
			req.Chain = chains[i%len(chains)]
			i++
			p, err := r.Pick(req)
			if err != nil {
				b.Fatal(err)
			}
			p.FirstToken(routingtest.T0)
			p.Done(DoneInfo{})
		}
		cpu.Stop(b)
		if b.N >= 64 && ix.Stats().Evictions == evicted {
			b.Fatal("nothing was evicted: the benchmark does not measure insertion at capacity")
		}
	})
	b.Run("repeat-chain", func(b *testing.B) {
		r, req := routingtest.BenchRouter(b, 100, benchProfile())
		b.ReportAllocs()
		cpu := benchcpu.StartThread()
		for b.Loop() {
			p, err := r.Pick(req)
			if err != nil {
				b.Fatal(err)
			}
			p.FirstToken(routingtest.T0)
			p.Done(DoneInfo{})
		}
		cpu.Stop(b)
	})
}

// distinctChains returns n chains of length blocks that share no block.
func distinctChains(n, blocks int) [][]prefixcache.BlockHash {
	chains := make([][]prefixcache.BlockHash, n)
	for i := range chains {
		chains[i] = make([]prefixcache.BlockHash, blocks)
		for k := range chains[i] {
			chains[i][k] = prefixcache.BlockHash(0x9e3779b97f4a7c15 * (uint64(i+1)<<20 | uint64(k+1)))
		}
	}
	return chains
}

// BenchmarkPickParallel runs Pick and Done from GOMAXPROCS goroutines at 100 backends.
func BenchmarkPickParallel(b *testing.B) {
	r, req := routingtest.BenchRouter(b, 100, benchProfile())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := r.Pick(req)
			if err != nil {
				b.Error(err)
				return
			}
			p.Done(DoneInfo{Err: errBench})
		}
	})
}

// BenchmarkPickParts splits BenchmarkPick into its two halves at 100 and 1,000 backends: the
// prefix index match alone (prefixcache's cost) and a pick of a request without a chain (the
// router's own cost: candidates, four scorers, picker, accounting).
func BenchmarkPickParts(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("match-only/backends=%d", n), func(b *testing.B) {
			_, req, ix := routingtest.BenchRouterIndex(b, n, benchProfile(), prefixcache.Options{})
			dst := make([]int32, 0, n)
			b.ReportAllocs()
			cpu := benchcpu.StartThread()
			for b.Loop() {
				dst = ix.Match(dst[:0], req.Chain)
			}
			cpu.Stop(b)
		})
		b.Run(fmt.Sprintf("pick-without-chain/backends=%d", n), func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, n, benchProfile())
			req.Chain = nil
			pickLoop(b, r, req, DoneInfo{Err: errBench})
		})
	}
}

// BenchmarkPickLatency is BenchmarkPickProfiles/usher at 100 backends without and with a
// routing/latency term (the built-in model), streamed requests that the model learns from:
// what the learned latency model adds to a pick (the target is ≤ 1 µs).
func BenchmarkPickLatency(b *testing.B) {
	for _, withModel := range []bool{false, true} {
		name := "usher"
		p := profiles.Usher(profiles.UsherOptions{})
		if withModel {
			name = "usher+latency"
			sc, err := latency.NewScorer(latency.ScorerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			p = p.With(Weighted{sc, 2})
		}
		b.Run(name, func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, 100, p)
			req.Stream = true
			pickLoop(b, r, req, DoneInfo{FirstTokenAt: routingtest.T0.Add(time.Second), End: routingtest.T0.Add(3 * time.Second), OutputTokens: 100})
		})
	}
}

// constScorer is a scorer of the caller's own (not a built-in, so the router calls Score and
// checks every score): it gives every candidate v.
type constScorer struct{ v float64 }

func (s constScorer) Score(_ *Request, cands []Candidate, dst []float64) {
	for i := range cands {
		dst[i] = s.v
	}
}

// BenchmarkPickOwnScorer is BenchmarkPick at 100 backends with a fifth scorer of the caller's
// own, whose scores the router checks: in range (0.5, the usual case), and out of range (2,
// every score clamped and counted: a faulty scorer).
func BenchmarkPickOwnScorer(b *testing.B) {
	for _, tc := range []struct {
		name string
		v    float64
	}{{"in-range", 0.5}, {"clamped", 2}} {
		b.Run(tc.name, func(b *testing.B) {
			r, req := routingtest.BenchRouter(b, 100, benchProfile().With(Weighted{Scorer: constScorer{tc.v}, Weight: 1}))
			pickLoop(b, r, req, DoneInfo{FirstTokenAt: routingtest.T0})
		})
	}
}
