package routing_test

import (
	"math"
	"testing"

	"github.com/usher-llm/usher/prefixcache"
	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/load"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/prefix"
	"github.com/usher-llm/usher/routing/profiles"
)

// cand builds a candidate by hand for scorer tables.
type cand = routingtest.Spec

func TestScorerTables(t *testing.T) {
	req8 := &Request{Chain: routingtest.Chain(8), BlockSize: 16, PromptTokens: 128}
	reqNone := &Request{BlockSize: 16}
	tests := []struct {
		name   string
		scorer Scorer
		req    *Request
		cands  []Candidate
		want   []float64
	}{
		{"prefix ratio", prefix.Ratio(), req8,
			routingtest.Cands(cand{Matched: 0}, cand{Matched: 2}, cand{Matched: 8}),
			[]float64{0, 0.25, 1}},
		{"prefix ratio without chain", prefix.Ratio(), reqNone,
			routingtest.Cands(cand{Matched: 3}, cand{}), []float64{0, 0}},
		// matched tokens 2·16=32 and 8·16=128 against a length of 64 tokens:
		// 0.25·(32/64)² = 0.0625; 1·min(1,2)² = 1.
		{"prefix length", prefix.Length(64), req8,
			routingtest.Cands(cand{Matched: 0}, cand{Matched: 2}, cand{Matched: 8}),
			[]float64{0, 0.0625, 1}},
		// default length 8192: 8 blocks of 16 = 128 tokens → (128/8192)² = 1/4096.
		{"prefix length default", prefix.Length(0), req8,
			routingtest.Cands(cand{Matched: 8}), []float64{1.0 / 4096}},
		// queue 0, 5, 10 → (10−q)/10.
		{"queue min-max", load.QueueDepth(), reqNone,
			routingtest.Cands(cand{Queued: 0, Known: routingtest.QR}, cand{Queued: 5, Known: routingtest.QR}, cand{Queued: 10, Known: routingtest.QR}),
			[]float64{1, 0.5, 0}},
		{"queue all equal", load.QueueDepth(), reqNone,
			routingtest.Cands(cand{Queued: 4, Known: routingtest.QR}, cand{Queued: 4, Known: routingtest.QR}), []float64{1, 1}},
		// The stale one is imputed at the mean of the fresh ones (1 and 0): 0.5 — not 1 (idle) nor 0.
		{"queue stale imputed", load.QueueDepth(), reqNone,
			routingtest.Cands(cand{Queued: 0, Known: routingtest.QR}, cand{Queued: 100, Known: routingtest.QR, Stale: true}, cand{Queued: 8, Known: routingtest.QR}),
			[]float64{1, 0.5, 0}},
		{"queue missing imputed", load.QueueDepth(), reqNone,
			routingtest.Cands(cand{Queued: 2, Known: routingtest.QR}, cand{Known: 0}, cand{Queued: 6, Known: routingtest.QR}, cand{Queued: 4, Known: routingtest.QR}),
			[]float64{1, 0.5, 0, 0.5}},
		{"queue none known", load.QueueDepth(), reqNone,
			routingtest.Cands(cand{}, cand{}), []float64{0.5, 0.5}},
		{"running min-max", load.Running(), reqNone,
			routingtest.Cands(cand{Running: 3, Known: routingtest.QR}, cand{Running: 7, Known: routingtest.QR}, cand{Running: 5, Known: routingtest.QR}),
			[]float64{1, 0, 0.5}},
		{"active requests", load.Active(), reqNone,
			routingtest.Cands(cand{InFlight: 2}, cand{InFlight: 6}, cand{InFlight: 3}),
			[]float64{1, 0, 0.75}},
		{"kv utilisation", load.KV(), reqNone,
			routingtest.Cands(cand{KV: 0.25, Known: SignalKVUtilization}, cand{KV: 1, Known: SignalKVUtilization}, cand{KV: 0, Known: 0}),
			[]float64{0.75, 0, 0.375}},
		// 0.5·(1 − q/128): q=0 → 0.5, q=64 → 0.25, q=200 → 0.
		{"load aware", load.QueueThreshold(0), reqNone,
			routingtest.Cands(cand{Queued: 0, Known: routingtest.QR}, cand{Queued: 64, Known: routingtest.QR}, cand{Queued: 200, Known: routingtest.QR}),
			[]float64{0.5, 0.25, 0}},
		// 1 − (prefill + uncached)/cap with cap 1000.
		{"token load", load.TokenBacklog(1000), reqNone,
			routingtest.Cands(cand{Prefill: 0, Uncached: 0}, cand{Prefill: 300, Uncached: 200}, cand{Prefill: 900, Uncached: 900}),
			[]float64{1, 0.5, 0}},
		{"token load default cap", load.TokenBacklog(0), reqNone,
			routingtest.Cands(cand{Prefill: 2097152}), []float64{0.5}},
		// 1 − min(prefill, cap)/cap: this request's own uncached tokens do not count.
		{"prefill load", load.Prefill(1000), reqNone,
			routingtest.Cands(cand{Prefill: 0, Uncached: 900}, cand{Prefill: 250}, cand{Prefill: 5000}),
			[]float64{1, 0.75, 0}},
		{"prefill load default cap", load.Prefill(0), reqNone,
			routingtest.Cands(cand{Prefill: 16384}), []float64{0.75}},
	}
	for _, tt := range tests {
		routingtest.CheckScores(t, tt.name, routingtest.Score(tt.scorer, tt.req, tt.cands), tt.want)
	}
}

func TestPeerScorerTables(t *testing.T) {
	req10 := &Request{Chain: routingtest.Chain(10), BlockSize: 16, PromptTokens: 160}
	tests := []struct {
		name   string
		scorer Scorer
		req    *Request
		cands  []Candidate
		want   []float64
	}{
		// Loads 10 and 100: 90 > 64 and 100 > 1.5·10 → imbalanced → least-loaded by min-max.
		{"sglang imbalanced", routingtest.MustScorer(profiles.NewSGLangCacheAware(profiles.SGLangCacheAwareOptions{})), req10,
			routingtest.Cands(cand{InFlight: 10, Matched: 0}, cand{InFlight: 100, Matched: 10}, cand{InFlight: 55, Matched: 5}),
			[]float64{1, 0, 0.5}},
		// Loads 10 and 70: 60 ≤ 64 → balanced; best match 0.5 > 0.3 → match rate.
		{"sglang cache", routingtest.MustScorer(profiles.NewSGLangCacheAware(profiles.SGLangCacheAwareOptions{})), req10,
			routingtest.Cands(cand{InFlight: 10, Matched: 0}, cand{InFlight: 70, Matched: 5}),
			[]float64{0, 0.5}},
		// Best match 0.3 is not above 0.3 → least-loaded.
		{"sglang low match", routingtest.MustScorer(profiles.NewSGLangCacheAware(profiles.SGLangCacheAwareOptions{})), req10,
			routingtest.Cands(cand{InFlight: 2, Matched: 3}, cand{InFlight: 4, Matched: 0}),
			[]float64{1, 0}},
		// 195 − 130 = 65 > 64 but 195 ≤ 1.5·130 → not imbalanced; best match 0.8 → cache.
		{"sglang rel rule", routingtest.MustScorer(profiles.NewSGLangCacheAware(profiles.SGLangCacheAwareOptions{})), req10,
			routingtest.Cands(cand{InFlight: 130, Matched: 8}, cand{InFlight: 195, Matched: 2}, cand{InFlight: 160}),
			[]float64{0.8, 0.2, 0}},
		// Dynamo: block size 16, prompt 160 tokens = 10 blocks.
		//   a: prefill (0 + 160)/16 = 10, active 50 + 10 → cost 70
		//   b: prefill (32 + 0)/16 = 2,   active 20 + 10 → cost 32
		//   c: prefill (0 + 80)/16 = 5,   active 35 + 10 → cost 50
		// scores (70 − cost)/(70 − 32): 0, 1, 20/38.
		{"dynamo cost", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50}, cand{Prefill: 32, Blocks: 20}, cand{Uncached: 80, Blocks: 35}),
			[]float64{0, 1, 20.0 / 38}},
		// Overlap weight 0 (negative): prefill ignored: costs 60, 30, 45 → 0, 1, 0.5.
		{"dynamo no overlap", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{OverlapWeight: -1})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50}, cand{Prefill: 32, Blocks: 20}, cand{Uncached: 80, Blocks: 35}),
			[]float64{0, 1, 0.5}},
		// Weight 2: costs 2·10+60 = 80, 2·2+30 = 34, 2·5+45 = 55 → 0, 1, 25/46.
		{"dynamo weight 2", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{OverlapWeight: 2})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50}, cand{Prefill: 32, Blocks: 20}, cand{Uncached: 80, Blocks: 35}),
			[]float64{0, 1, 25.0 / 46}},
		// AbstainWhenQuiet: every queue fresh and empty, running reported, and the router's
		// in-flight requests 2 + 1 + 1 against 2 + 1 + 0 reported: one sent since, within the
		// default 2 → every candidate 1.
		{"dynamo abstains, quiet and settled", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 2, Running: 2, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, InFlight: 1, Running: 1, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, InFlight: 1, Known: routingtest.QR}),
			[]float64{1, 1, 1}},
		// One request waiting: the cost as without the option.
		{"dynamo abstains not, one waiting", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 2, Running: 2, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, InFlight: 1, Running: 1, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, InFlight: 1, Queued: 1, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// Three requests sent since the last reports (3 in flight, 0 reported): a burst.
		{"dynamo abstains not, a burst", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 3, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// Uneven: loads 9, 1, 1 (all reported, none waiting); 9 > 4·(mean of the others 1 + 1)
		// = 8, so the fleet is not quiet however empty its queues.
		{"dynamo abstains not, uneven", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 9, Running: 9, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, InFlight: 1, Running: 1, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, InFlight: 1, Running: 1, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// Loads 8, 1, 1: 8 ≤ 8, even → every candidate 1.
		{"dynamo abstains, even at the limit", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 8, Running: 8, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, InFlight: 1, Running: 1, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, InFlight: 1, Running: 1, Known: routingtest.QR}),
			[]float64{1, 1, 1}},
		// With Unreported negative (none), one unreported request is enough.
		{"dynamo abstains not, none unreported", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true, Unreported: -1})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, InFlight: 1, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// A request under a LoRA adapter is scored as usual, quiet or not.
		{"dynamo abstains not, adapter request", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})),
			&Request{Chain: routingtest.Chain(10), BlockSize: 16, PromptTokens: 160, Adapter: "lora-1"},
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, Known: routingtest.QR}, cand{Prefill: 32, Blocks: 20, Known: routingtest.QR}, cand{Uncached: 80, Blocks: 35, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// Queues the router cannot see (stale) are not quiet.
		{"dynamo abstains not, stale", routingtest.MustScorer(profiles.NewDynamoCost(profiles.DynamoCostOptions{AbstainWhenQuiet: true})), req10,
			routingtest.Cands(cand{Uncached: 160, Blocks: 50, Known: routingtest.QR, Stale: true}, cand{Prefill: 32, Blocks: 20, Known: routingtest.QR},
				cand{Uncached: 80, Blocks: 35, Known: routingtest.QR}),
			[]float64{0, 1, 20.0 / 38}},
		// AIBrix: loads 0, 0, 0, 20: mean 5, max 20 > 2·6 = 12 and 20 − 0 ≥ 8 → only the
		// least-loaded (0, 1, 2) may be chosen; among them the best match: 0.5 + 0.49·m.
		{"aibrix imbalanced", profiles.AIBrixPrefixGate(), req10,
			routingtest.Cands(cand{InFlight: 0}, cand{InFlight: 0, Matched: 10}, cand{InFlight: 0, Matched: 5}, cand{InFlight: 20, Matched: 10}),
			[]float64{0.5, 0.99, 0.745, 0}},
		// Loads 2, 4, 6: mean 4, σ = √(8/3) ≈ 1.63 → limit 5.63; the third is over it and falls
		// to the least-request band: 0.49·(6 − 6)/4 = 0. Eligible: 0.5 + 0.49·m + 0.49/11·(1 − L/7).
		{"aibrix prefix", profiles.AIBrixPrefixGate(), req10,
			routingtest.Cands(cand{InFlight: 2, Matched: 2}, cand{InFlight: 4, Matched: 6}, cand{InFlight: 6, Matched: 10}),
			[]float64{0.5 + 0.49*0.2 + 0.49/11*(1-2.0/7), 0.5 + 0.49*0.6 + 0.49/11*(1-4.0/7), 0}},
		// Equal matches: the lower load wins by the tie term.
		{"aibrix tie", profiles.AIBrixPrefixGate(), req10,
			routingtest.Cands(cand{InFlight: 1, Matched: 5}, cand{InFlight: 0, Matched: 5}),
			[]float64{0.5 + 0.245 + 0.49/11*(1-1.0/2), 0.5 + 0.245 + 0.49/11}},
		// No match anywhere: least request, 0.49·(max − L)/(max − min).
		{"aibrix no match", profiles.AIBrixPrefixGate(), req10,
			routingtest.Cands(cand{InFlight: 1}, cand{InFlight: 3}, cand{InFlight: 2}),
			[]float64{0.49, 0, 0.245}},
	}
	for _, tt := range tests {
		routingtest.CheckScores(t, tt.name, routingtest.Score(tt.scorer, tt.req, tt.cands), tt.want)
	}
}

func TestHealthFilter(t *testing.T) {
	tests := []struct {
		name      string
		in        []cand
		want      []BackendID
		fallbacks uint64
	}{
		{"drops unhealthy", []cand{{Health: Healthy}, {Health: Unhealthy}, {Health: HealthUnknown}}, []BackendID{0, 2}, 0},
		{"routes around stale", []cand{{Stale: true}, {}, {Stale: true}, {}}, []BackendID{1, 3}, 0},
		{"all stale kept", []cand{{Stale: true}, {Stale: true, Health: Unhealthy}, {Stale: true}}, []BackendID{0, 2}, 1},
		{"all unhealthy", []cand{{Health: Unhealthy}}, nil, 0},
	}
	for _, tt := range tests {
		f := outlier.HealthFilter().(interface {
			Filter
			Fallbacks() uint64
		})
		got := f.Filter(&Request{}, routingtest.Cands(tt.in...))
		if !routingtest.SameIDs(got, tt.want) {
			t.Errorf("%s: kept %v, want %v", tt.name, routingtest.IDs(got), tt.want)
		}
		if f.Fallbacks() != tt.fallbacks {
			t.Errorf("%s: fallbacks %d, want %d", tt.name, f.Fallbacks(), tt.fallbacks)
		}
	}
}

// tiered is the scorer prefix.NewTiered returns: a Scorer with the credit of a medium.
type tiered interface {
	Scorer
	Credit(m prefixcache.Medium, blockSize int) float64
}

func mustTiered(t *testing.T, opts prefix.TieredOptions) tiered {
	t.Helper()
	s, err := prefix.NewTiered(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s.(tiered)
}

// mediumFake answers MatchMedium from fixed per-medium tables.
type mediumFake map[prefixcache.Medium][]int32

func (f mediumFake) MatchMedium(dst []int32, _ []prefixcache.BlockHash, m prefixcache.Medium) []int32 {
	return append(dst[:0], f[m]...)
}

func TestTieredPrefix(t *testing.T) {
	// 1000-byte blocks of 16 tokens; prefill 16 tok/s = 1 s per block; CPU 0.25 s per block
	// (credit 0.75), remote 0.5 s (credit 0.5).
	tp := mustTiered(t, prefix.TieredOptions{Index: mediumFake{
		prefixcache.CPU:    {6, 3, 0},
		prefixcache.Remote: {8, 0, 10},
	}, BlockBytes: 1000, CPUBandwidth: 4000, RemoteBandwidth: 2000, PrefillThroughput: 16})
	if got := tp.Credit(prefixcache.CPU, 16); !routingtest.Near(got, 0.75) {
		t.Errorf("CPU credit %v, want 0.75", got)
	}
	req := &Request{Chain: routingtest.Chain(10), BlockSize: 16}
	cs := routingtest.Cands(
		cand{Matched: 2}, // index id 0: (2 + 0.75·4 + 0.5·2)/10
		cand{Matched: 5}, // index id 1: CPU holds less than GPU: 5/10
		cand{Matched: 0}, // index id 2: remote only: 0.5·10/10
		cand{Matched: 4}, // not in the index: GPU only
	)
	for i, ix := range []int32{1, 2, 3, 0} { // 1 + the prefix index id; 0 unknown
		SetIndexSlot(&cs[i], ix)
	}
	got := routingtest.Score(tp, req, cs)
	routingtest.CheckScores(t, "tiered", got, []float64{0.6, 0.5, 0.5, 0.4})

	// Defaults: a CPU block is worth ≈0.833 of a GPU block, a remote one nothing.
	def := mustTiered(t, prefix.TieredOptions{Index: mediumFake{}})
	if c := def.Credit(prefixcache.CPU, 16); math.Abs(c-0.833) > 0.001 {
		t.Errorf("default CPU credit %v, want ≈0.833", c)
	}
	if c := def.Credit(prefixcache.Remote, 16); c != 0 {
		t.Errorf("default remote credit %v, want 0", c)
	}
	routingtest.CheckScores(t, "tiered without chain", routingtest.Score(def, &Request{}, routingtest.Cands(cand{Matched: 3})), []float64{0})
}

// TestUnitScorersStayInRange feeds the scorers that Pick trusts to write every entry in [0, 1]
// (unitScorer: no zeroing, no clamp) candidates a custom filter could build: negative and
// oversized matches and loads, an unsanitised KV utilisation, no signal at all.
func TestUnitScorersStayInRange(t *testing.T) {
	hostile := []BackendState{
		{Name: "a", Known: AllSignals, KVUtilization: 7, Queued: -3},
		{Name: "b", Known: AllSignals, KVUtilization: math.NaN(), Queued: 1 << 40},
		{Name: "c", Known: AllSignals, KVUtilization: -1, Running: -5},
		{Name: "d"},
	}
	cands := make([]Candidate, len(hostile))
	for i := range cands {
		cands[i] = Candidate{State: &hostile[i], Fresh: hostile[i].Known}
	}
	cands[0].MatchedBlocks, cands[0].MatchedTokens = -10, -100000
	cands[1].MatchedBlocks, cands[1].MatchedTokens = 1000, 1<<40
	cands[2].InFlight = InFlight{Requests: -4, PrefillTokens: -1 << 40}
	cands[2].UncachedTokens = -7
	cands[3].InFlight = InFlight{Requests: 1 << 50, PrefillTokens: 1 << 50}
	req := &Request{Chain: make([]prefixcache.BlockHash, 8), BlockSize: 16}
	for _, s := range []Scorer{prefix.Ratio(), prefix.Length(0), load.QueueDepth(), load.Running(), load.Active(), load.KV(), load.TokenBacklog(0)} {
		if _, ok := s.(UnitScorer); !ok {
			t.Errorf("%T is not a unitScorer", s)
			continue
		}
		dst := make([]float64, len(cands))
		for i := range dst {
			dst[i] = -42 // Pick does not zero dst for these: every entry must be written
		}
		s.Score(req, cands, dst)
		for i, v := range dst {
			if !(v >= 0 && v <= 1) {
				t.Errorf("%T: candidate %d scored %v, want a value in [0, 1]", s, i, v)
			}
		}
	}
}
