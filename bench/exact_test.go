package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/engine"
	"github.com/usher-llm/usher/prefixcache"
	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

// TestExactModeFollowsEngines runs a prefix-group workload with a router that learns only from
// KV events and checks, after the run, that the index holds on each server exactly the blocks
// that server's engine has cached: every block of every request, in both directions.
func TestExactModeFollowsEngines(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 1500, Rate: 40, Groups: 40, Seed: 3})
	for _, delay := range []time.Duration{-1, 20 * time.Millisecond} {
		s, err := newSimFor(w, Config{
			Servers: 4, Router: Router{Name: "llm-d-precise", New: profiles.LLMDPrecise, Events: true},
			EventDelay: delay,
			// Small caches, so that the engines evict and the removals are exercised.
			Profile: smallProfile(600),
		})
		if err != nil {
			t.Fatal(err)
		}
		if !s.exact {
			t.Fatal("a router with Events did not run in exact mode")
		}
		s.loop()
		// Deliver what is still in transit, as time would.
		s.setNow(s.now + time.Hour)
		s.deliverKV()
		if s.kvApply == 0 {
			t.Fatal("no KV event was applied")
		}
		checkIndexEqualsEngines(t, s, w)
	}
}

// TestExactModePredicts checks that predict-on-route (LearnOnPick) over an exact index keeps
// the siblings of a fan-out together, where learning from events alone scatters them: the
// events come only after the first sibling's prefill.
func TestExactModePredicts(t *testing.T) {
	w := PrefixGroup(PrefixGroupOptions{Requests: 3000, Rate: 60, Groups: 5000, Seed: 5}) // most calls start a group
	together := func(learn routing.Learn) float64 {
		s, err := newSimFor(w, Config{Servers: 8, Router: Router{Name: "llm-d", Events: true, New: func() routing.Profile {
			p := profiles.LLMDDefault()
			p.Learn = learn
			return p
		}}})
		if err != nil {
			t.Fatal(err)
		}
		s.loop()
		return siblingsTogether(s)
	}
	pick, events := together(routing.LearnOnPick), together(routing.LearnFromEvents)
	t.Logf("siblings on their call's first server: predicted %.3f, events only %.3f", pick, events)
	if pick < 0.9 || pick < events+0.1 {
		t.Fatalf("predict-on-route kept %.3f of siblings together, events alone %.3f", pick, events)
	}
}

func newSimFor(w *Workload, cfg Config) (*sim, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newSim(w, c)
}

func smallProfile(blocks int) engine.Profile {
	p := BenchProfile()
	p.NumBlocks = blocks
	return p
}

// siblingsTogether is the share of requests arriving at the same instant as an earlier one
// with the same prompt (a fan-out's siblings) that ran on the server of the first of them.
func siblingsTogether(s *sim) float64 {
	together, siblings := 0, 0
	for i := 1; i < len(s.reqs); i++ {
		r, first := &s.reqs[i], &s.reqs[i-1]
		for first.idx > 0 && s.reqs[first.idx-1].w.At == r.w.At && slices.Equal(s.reqs[first.idx-1].w.IDs, r.w.IDs) {
			first = &s.reqs[first.idx-1]
		}
		if first == r || first.w.At != r.w.At || !slices.Equal(first.w.IDs, r.w.IDs) || r.server < 0 || first.server < 0 {
			continue
		}
		siblings++
		if r.server == first.server {
			together++
		}
	}
	if siblings == 0 {
		return 0
	}
	return float64(together) / float64(siblings)
}

func checkIndexEqualsEngines(t *testing.T, s *sim, w *Workload) {
	t.Helper()
	var one [1]prefixcache.BlockHash
	var match []int32
	checked, held := 0, 0
	seen := map[prefixcache.BlockHash]bool{}
	for i := range s.reqs {
		for _, h := range s.chainOf(&s.reqs[i]) {
			if seen[h] {
				continue
			}
			seen[h] = true
			one[0] = h
			for g := range s.gw {
				ix, ids := s.gw[g].index, s.gw[g].ixIDs
				match = ix.Match(match[:0], one[:])
				for k := range s.srv {
					inIndex := int(ids[k]) < len(match) && match[ids[k]] == 1
					inEngine := s.srv[k].e.Cached(engine.BlockHash(h))
					if inIndex != inEngine {
						t.Fatalf("block %#x on %s: replica %d's index %v, engine %v", h, s.srv[k].name, g, inIndex, inEngine)
					}
					checked++
					if inEngine {
						held++
					}
				}
			}
		}
	}
	if held == 0 || held == checked {
		t.Fatalf("%d of %d (block, server) pairs held: the check proves nothing", held, checked)
	}
	t.Logf("%d (block, server) pairs agree, %d held", checked, held)
}

// TestUsherShippedVariant checks that the base of usher's variants is profiles.Usher itself:
// the same runs, to the last figure, on two workloads.
func TestUsherShippedVariant(t *testing.T) {
	for _, w := range []*Workload{small(), PrefixGroup(PrefixGroupOptions{Requests: 800, Rate: 30, Seed: 2})} {
		a, err := Run(w, Config{Servers: 4, Router: UsherRouter()})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(w, Config{Servers: 4, Router: usherShipped().router()})
		if err != nil {
			t.Fatal(err)
		}
		if a.TTFT != b.TTFT || a.HitRate != b.HitRate || a.Completed != b.Completed {
			t.Fatalf("profiles.Usher and the variants' base differ: TTFT %+v / %+v, hit %v / %v", a.TTFT, b.TTFT, a.HitRate, b.HitRate)
		}
	}
}
