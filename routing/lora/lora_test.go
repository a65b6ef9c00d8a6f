package lora_test

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/lora"
	"github.com/usher-llm/usher/routing/profiles"
)

// sanitized returns s as a Router publishes it (signals out of range dropped from Known).
func sanitized(t *testing.T, s routing.BackendState) routing.BackendState {
	t.Helper()
	r, err := routing.New(routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Update([]routing.BackendState{s}); err != nil {
		t.Fatal(err)
	}
	return r.Backends(nil)[0]
}

func TestAffinityTiers(t *testing.T) {
	a, err := lora.NewAffinity(lora.AffinityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := []string{}
	tests := []struct {
		name  string
		state routing.BackendState
		fly   int
		want  float64
	}{
		{"running", routingtest.LoraState("b", []string{"x", "a"}, s, 4), 0, 1},
		{"in flight, scrape lags", routingtest.LoraState("b", s, s, 4), 1, 1},
		{"waiting only", routingtest.LoraState("b", []string{"x"}, []string{"a"}, 4), 0, 0.8},
		{"waiting with another waiting", routingtest.LoraState("b", []string{"x"}, []string{"a", "y"}, 4), 0, 0.4},
		{"all slots free", routingtest.LoraState("b", s, s, 4), 0, 0.6},
		{"half free", routingtest.LoraState("b", []string{"x", "y"}, s, 4), 0, 0.6 * 1.5 / 2},
		{"free, one waiting elsewhere", routingtest.LoraState("b", []string{"x"}, []string{"y"}, 4), 0, 0.6 * 1.5 / 2 / 2},
		{"waiting and running count once", routingtest.LoraState("b", []string{"x", "y"}, []string{"x", "y"}, 4), 0, 0.6 * 1.5 / 2},
		{"full", routingtest.LoraState("b", []string{"x", "y"}, s, 2), 0, 0},
		{"full by waiting", routingtest.LoraState("b", []string{"x"}, []string{"y"}, 2), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := sanitized(t, tt.state)
			cands := []routing.Candidate{{State: &st, Fresh: st.Known, AdapterInFlight: tt.fly}}
			dst := []float64{-1}
			a.Score(&routing.Request{Adapter: "a"}, cands, dst)
			if math.Abs(dst[0]-tt.want) > 1e-12 {
				t.Errorf("score = %v, want %v", dst[0], tt.want)
			}
		})
	}
}

func TestAffinityImputesAndIgnoresBase(t *testing.T) {
	a, _ := lora.NewAffinity(lora.AffinityOptions{})
	run, free := routingtest.LoraState("r", []string{"a"}, nil, 4), routingtest.LoraState("f", nil, nil, 4)
	unknown := routing.BackendState{Name: "u", UpdatedAt: routingtest.LoraNow}
	cands := []routing.Candidate{{State: &run, Fresh: run.Known}, {State: &free, Fresh: free.Known}, {State: &unknown}}
	dst := make([]float64, 3)
	a.Score(&routing.Request{Adapter: "a"}, cands, dst)
	if want := (1 + 0.6) / 2; dst[2] != want || dst[0] != 1 || dst[1] != 0.6 {
		t.Errorf("scores = %v, want [1 0.6 %v]", dst, want)
	}
	dst = []float64{3, 3, 3}
	a.Score(&routing.Request{}, cands, dst)
	for i, v := range dst {
		if v != 0 {
			t.Errorf("base-model request: score[%d] = %v, want 0", i, v)
		}
	}
	cands = cands[2:]
	dst = dst[:1]
	a.Score(&routing.Request{Adapter: "a"}, cands, dst)
	if dst[0] != 0.5 {
		t.Errorf("no candidate knows: score = %v, want 0.5", dst[0])
	}
}

func TestNewAffinityOptions(t *testing.T) {
	for _, o := range []lora.AffinityOptions{{Loaded: 2}, {Loading: -0.1}, {FreeSlot: math.NaN()}, {Wait: math.Inf(1)}, {Wait: math.NaN()}} {
		if _, err := lora.NewAffinity(o); !errors.Is(err, routing.ErrInvalidOptions) {
			t.Errorf("NewAffinity(%+v) error = %v, want routing.ErrInvalidOptions", o, err)
		}
	}
	if _, err := lora.NewAffinity(lora.AffinityOptions{Wait: -1}); err != nil {
		t.Errorf("Wait -1 (no penalty): %v", err)
	}
	_, err := routing.New(routing.Options{Profile: profiles.Usher(profiles.UsherOptions{AdapterWeight: 2, Adapter: lora.AffinityOptions{Loaded: 7}})})
	if !errors.Is(err, routing.ErrInvalidOptions) {
		t.Errorf("New with invalid adapter options: error = %v, want routing.ErrInvalidOptions", err)
	}
	p := profiles.Usher(profiles.UsherOptions{})
	q := profiles.Usher(profiles.UsherOptions{AdapterWeight: 2})
	if len(q.Scorers) != len(p.Scorers)+1 || q.Scorers[len(p.Scorers)].Weight != 2 {
		t.Errorf("Usher with AdapterWeight 2 has scorers %v, want the default's plus one of weight 2", q.Scorers)
	}
	for i := range p.Scorers {
		if p.Scorers[i].Weight != q.Scorers[i].Weight {
			t.Errorf("scorer %d weight %v, want %v as in the default", i, q.Scorers[i].Weight, p.Scorers[i].Weight)
		}
	}
}

func TestAdapterInFlightCounts(t *testing.T) {
	// Signals are stale: only the router's own count tells where the adapter went.
	st := func(n string) routing.BackendState {
		return routing.BackendState{Name: n, Health: routing.Healthy, UpdatedAt: routingtest.LoraNow.Add(-time.Hour), Known: routing.SignalAdapters, MaxAdapters: 4}
	}
	aff, _ := lora.NewAffinity(lora.AffinityOptions{})
	var seen []int
	spy := routing.ScorerFunc(func(req *routing.Request, cands []routing.Candidate, dst []float64) {
		seen = seen[:0]
		for i := range cands {
			seen = append(seen, cands[i].AdapterInFlight)
		}
	})
	r := routingtest.NewLoraRouter(t, routing.Profile{Scorers: []routing.Weighted{{Scorer: aff, Weight: 1}, {Scorer: spy, Weight: 0.001}}}, st("a"), st("b"), st("c"))
	first, err := r.Pick(&routing.Request{Adapter: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	var held []routing.Result
	for range 5 {
		p, err := r.Pick(&routing.Request{Adapter: "sql"})
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != first.ID {
			t.Errorf("adapter request → %v, want %v where the adapter is in flight", p.ID, first.ID)
		}
		held = append(held, p)
	}
	if _, err := r.Pick(&routing.Request{Adapter: "other"}); err != nil {
		t.Fatal(err)
	} else if seen[first.ID] != 0 {
		t.Errorf("another adapter sees %d in flight, want 0", seen[first.ID])
	}
	p, _ := r.Pick(&routing.Request{Adapter: "sql"})
	if seen[first.ID] != 6 {
		t.Errorf("AdapterInFlight = %v, want 6 at %v", seen, first.ID)
	}
	p.Done(routing.DoneInfo{})
	first.Done(routing.DoneInfo{})
	for _, h := range held {
		h.Done(routing.DoneInfo{})
	}
	p, _ = r.Pick(&routing.Request{Adapter: "sql"})
	p.Done(routing.DoneInfo{})
	for i, n := range seen {
		if n != 0 {
			t.Errorf("after Done: backend %d has %d in flight, want 0", i, n)
		}
	}
}

// The interned path (candidates built by a Router) and the names path (candidates built
// elsewhere) score alike.
func TestAffinityInternedMatchesNames(t *testing.T) {
	aff, _ := lora.NewAffinity(lora.AffinityOptions{})
	states := []routing.BackendState{
		routingtest.LoraState("a", []string{"x", "y"}, []string{"z"}, 4),
		routingtest.LoraState("b", []string{"y"}, []string{"y", "x"}, 2),
		routingtest.LoraState("c", nil, nil, 3),
		routingtest.LoraState("d", []string{"q", "r", "s"}, nil, 3),
	}
	states[2].Models = []string{"base", "x", "y", "z"}
	var failed bool
	check := routing.ScorerFunc(func(req *routing.Request, cands []routing.Candidate, dst []float64) {
		got, want := make([]float64, len(cands)), make([]float64, len(cands))
		aff.Score(req, cands, got)
		// A request the Router did not resolve: the scorer reads the names.
		plain := make([]routing.Candidate, len(cands))
		copy(plain, cands)
		aff.Score(&routing.Request{Adapter: req.Adapter, Model: req.Model}, plain, want)
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("adapter %q, %s: interned %v, names %v", req.Adapter, cands[i].State.Name, got[i], want[i])
				failed = true
			}
		}
	})
	r := routingtest.NewLoraRouter(t, routing.Profile{Scorers: []routing.Weighted{{Scorer: check, Weight: 1}}}, states...)
	for _, ad := range []string{"x", "y", "z", "q", "new", ""} {
		p, err := r.Pick(&routing.Request{Adapter: ad, Model: ad})
		if err != nil {
			t.Fatal(err)
		}
		p.Done(routing.DoneInfo{})
	}
	if failed {
		t.Log(states)
	}
}

func TestPickAdapterAllocs(t *testing.T) {
	if routingtest.Race {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	r := routingtest.NewLoraRouter(t, profiles.Usher(profiles.UsherOptions{AdapterWeight: 2}), routingtest.LoraFleet(16, 4)...)
	reqs := []*routing.Request{
		{Adapter: "ad-3", Model: "ad-3", PromptTokens: 500},
		{Model: "llama", PromptTokens: 500},
		{Adapter: "ad-new", Model: "ad-new", PromptTokens: 500},
	}
	for _, req := range reqs {
		cycle := func() {
			p, err := r.Pick(req)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(routing.DoneInfo{})
		}
		cycle()
		if n := testing.AllocsPerRun(200, cycle); n != 0 {
			t.Errorf("Pick+Done for %+v: %v allocs, want 0", *req, n)
		}
	}
	listed := routingtest.LoraFleet(16, 4)
	for i := range listed {
		listed[i].Models = []string{"llama"}
	}
	r = routingtest.NewLoraRouter(t, profiles.Usher(profiles.UsherOptions{AdapterWeight: 2}), listed...)
	unserved := &routing.Request{Model: "mistral"}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.Pick(unserved); !errors.Is(err, routing.ErrNoBackendForModel) {
			t.Fatalf("unserved model: %v", err)
		}
	}); n != 0 {
		t.Errorf("Pick of an unserved model: %v allocs, want 0", n)
	}
}

func BenchmarkPickAdapter(b *testing.B) {
	for _, n := range []int{8, 64} {
		// The default profile without the adapter term, for base-model traffic: what the
		// term costs requests that name no adapter.
		blind := routingtest.NewLoraRouter(b, profiles.Usher(profiles.UsherOptions{}), routingtest.LoraFleet(n, 4)...)
		b.Run("base-without-term/n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			req := routing.Request{Model: "llama", PromptTokens: 500}
			for b.Loop() {
				p, err := blind.Pick(&req)
				if err != nil {
					b.Fatal(err)
				}
				p.Done(routing.DoneInfo{})
			}
		})
		r := routingtest.NewLoraRouter(b, profiles.Usher(profiles.UsherOptions{AdapterWeight: 2}), routingtest.LoraFleet(n, 4)...)
		for _, c := range []struct {
			name string
			req  routing.Request
		}{
			{"adapter", routing.Request{Adapter: "ad-3", Model: "ad-3", PromptTokens: 500}},
			{"base", routing.Request{Model: "llama", PromptTokens: 500}},
		} {
			b.Run(c.name+"/n="+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p, err := r.Pick(&c.req)
					if err != nil {
						b.Fatal(err)
					}
					p.Done(routing.DoneInfo{})
				}
			})
		}
	}
}
