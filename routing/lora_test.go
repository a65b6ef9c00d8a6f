//go:build pending_split

package routing

import (
	"errors"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

var loraNow = time.Unix(1_700_000_000, 0)

// loraState is a fresh backend with the given adapter signals.
func loraState(name string, running, waiting []string, slots int) BackendState {
	return BackendState{
		Name: name, Health: Healthy, UpdatedAt: loraNow,
		Known:           SignalQueued | SignalAdapters,
		RunningAdapters: running, WaitingAdapters: waiting, MaxAdapters: slots,
	}
}

func TestAdapterAffinityTiers(t *testing.T) {
	a, err := NewAdapterAffinity(AdapterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := []string{}
	tests := []struct {
		name  string
		state BackendState
		fly   int
		want  float64
	}{
		{"running", loraState("b", []string{"x", "a"}, s, 4), 0, 1},
		{"in flight, scrape lags", loraState("b", s, s, 4), 1, 1},
		{"waiting only", loraState("b", []string{"x"}, []string{"a"}, 4), 0, 0.8},
		{"waiting with another waiting", loraState("b", []string{"x"}, []string{"a", "y"}, 4), 0, 0.4},
		{"all slots free", loraState("b", s, s, 4), 0, 0.6},
		{"half free", loraState("b", []string{"x", "y"}, s, 4), 0, 0.6 * 1.5 / 2},
		{"free, one waiting elsewhere", loraState("b", []string{"x"}, []string{"y"}, 4), 0, 0.6 * 1.5 / 2 / 2},
		{"waiting and running count once", loraState("b", []string{"x", "y"}, []string{"x", "y"}, 4), 0, 0.6 * 1.5 / 2},
		{"full", loraState("b", []string{"x", "y"}, s, 2), 0, 0},
		{"full by waiting", loraState("b", []string{"x"}, []string{"y"}, 2), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.state
			st.sanitize()
			cands := []Candidate{{State: &st, Fresh: st.Known, AdapterInFlight: tt.fly}}
			dst := []float64{-1}
			a.Score(&Request{Adapter: "a"}, cands, dst)
			if math.Abs(dst[0]-tt.want) > 1e-12 {
				t.Errorf("score = %v, want %v", dst[0], tt.want)
			}
		})
	}
}

func TestAdapterAffinityImputesAndIgnoresBase(t *testing.T) {
	a, _ := NewAdapterAffinity(AdapterOptions{})
	run, free := loraState("r", []string{"a"}, nil, 4), loraState("f", nil, nil, 4)
	unknown := BackendState{Name: "u", UpdatedAt: loraNow}
	cands := []Candidate{{State: &run, Fresh: run.Known}, {State: &free, Fresh: free.Known}, {State: &unknown}}
	dst := make([]float64, 3)
	a.Score(&Request{Adapter: "a"}, cands, dst)
	if want := (1 + 0.6) / 2; dst[2] != want || dst[0] != 1 || dst[1] != 0.6 {
		t.Errorf("scores = %v, want [1 0.6 %v]", dst, want)
	}
	dst = []float64{3, 3, 3}
	a.Score(&Request{}, cands, dst)
	for i, v := range dst {
		if v != 0 {
			t.Errorf("base-model request: score[%d] = %v, want 0", i, v)
		}
	}
	cands = cands[2:]
	dst = dst[:1]
	a.Score(&Request{Adapter: "a"}, cands, dst)
	if dst[0] != 0.5 {
		t.Errorf("no candidate knows: score = %v, want 0.5", dst[0])
	}
}

func TestNewAdapterAffinityOptions(t *testing.T) {
	for _, o := range []AdapterOptions{{Loaded: 2}, {Loading: -0.1}, {FreeSlot: math.NaN()}, {Wait: math.Inf(1)}, {Wait: math.NaN()}} {
		if _, err := NewAdapterAffinity(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewAdapterAffinity(%+v) error = %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := NewAdapterAffinity(AdapterOptions{Wait: -1}); err != nil {
		t.Errorf("Wait -1 (no penalty): %v", err)
	}
	_, err := New(Options{Profile: Usher(UsherOptions{AdapterWeight: 2, Adapter: AdapterOptions{Loaded: 7}})})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with invalid adapter options: error = %v, want ErrInvalidOptions", err)
	}
	p := Usher(UsherOptions{})
	q := Usher(UsherOptions{AdapterWeight: 2})
	if len(q.Scorers) != len(p.Scorers)+1 || q.Scorers[len(p.Scorers)].Weight != 2 {
		t.Errorf("Usher with AdapterWeight 2 has scorers %v, want the default's plus one of weight 2", q.Scorers)
	}
	for i := range p.Scorers {
		if p.Scorers[i].Weight != q.Scorers[i].Weight {
			t.Errorf("scorer %d weight %v, want %v as in the default", i, q.Scorers[i].Weight, p.Scorers[i].Weight)
		}
	}
}

func TestSanitizeAdapters(t *testing.T) {
	tests := []struct {
		name string
		s    BackendState
		ok   bool
	}{
		{"valid", loraState("b", []string{"a"}, []string{"c"}, 4), true},
		{"more running than slots (vLLM renders both from one map)", loraState("b", []string{"a", "b", "c"}, nil, 2), true},
		{"no slots", loraState("b", nil, nil, 0), false},
		{"negative slots", loraState("b", nil, nil, -3), false},
		{"absurd slots", loraState("b", nil, nil, 1<<20), false},
		{"empty running name", loraState("b", []string{""}, nil, 4), false},
		{"empty waiting name", loraState("b", nil, []string{"a", ""}, 4), false},
	}
	for _, tt := range tests {
		s := tt.s
		bad := s.sanitize()
		if got := s.Known.Has(SignalAdapters); got != tt.ok || (bad == 0) != tt.ok {
			t.Errorf("%s: kept %v (cleared %d), want kept %v", tt.name, got, bad, tt.ok)
		}
		if !s.Known.Has(SignalQueued) {
			t.Errorf("%s: cleared an unrelated signal", tt.name)
		}
	}
}

// newLoraRouter returns a router with the profile given and the backends published.
func newLoraRouter(t testing.TB, p Profile, states ...BackendState) *Router {
	t.Helper()
	r, err := New(Options{Profile: p, Now: func() time.Time { return loraNow }, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Update(states); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPickModelFilter(t *testing.T) {
	a := BackendState{Name: "a", Health: Healthy, Models: []string{"llama", "sql-lora"}}
	b := BackendState{Name: "b", Health: Healthy, Models: []string{"qwen", ""}}
	any := BackendState{Name: "any", Health: Healthy}
	r := newLoraRouter(t, LeastRequest(), a, b)
	for _, tt := range []struct {
		model string
		want  string
	}{{"llama", "a"}, {"sql-lora", "a"}, {"qwen", "b"}} {
		for range 3 {
			p, err := r.Pick(&Request{Model: tt.model})
			if err != nil {
				t.Fatalf("model %q: %v", tt.model, err)
			}
			if p.Backend.Name != tt.want {
				t.Errorf("model %q → %s, want %s", tt.model, p.Backend.Name, tt.want)
			}
			p.Done(DoneInfo{})
		}
	}
	for _, m := range []string{"mistral", ""} {
		_, err := r.Pick(&Request{Model: "mistral"})
		if m == "" {
			if p, err := r.Pick(&Request{}); err != nil {
				t.Errorf("no model: %v", err)
			} else {
				p.Done(DoneInfo{})
			}
			continue
		}
		if !errors.Is(err, ErrNoBackendForModel) || !errors.Is(err, ErrNoBackend) {
			t.Errorf("unknown model: error = %v, want ErrNoBackendForModel wrapping ErrNoBackend", err)
		}
	}
	// Served, but excluded: not the model's fault.
	_, err := r.Pick(&Request{Model: "qwen", Exclude: []BackendID{1}})
	if !errors.Is(err, ErrNoBackend) || errors.Is(err, ErrNoBackendForModel) {
		t.Errorf("excluded: error = %v, want ErrNoBackend only", err)
	}
	// A backend that lists nothing serves every model.
	r = newLoraRouter(t, LeastRequest(), a, b, any)
	p, err := r.Pick(&Request{Model: "mistral"})
	if err != nil || p.Backend.Name != "any" {
		t.Fatalf("mistral with a catch-all backend → %v, %v", p.Backend, err)
	}
	p.Done(DoneInfo{})
}

func TestAdapterInFlightCounts(t *testing.T) {
	// Signals are stale: only the router's own count tells where the adapter went.
	st := func(n string) BackendState {
		return BackendState{Name: n, Health: Healthy, UpdatedAt: loraNow.Add(-time.Hour), Known: SignalAdapters, MaxAdapters: 4}
	}
	aff, _ := NewAdapterAffinity(AdapterOptions{})
	var seen []int
	spy := ScorerFunc(func(req *Request, cands []Candidate, dst []float64) {
		seen = seen[:0]
		for i := range cands {
			seen = append(seen, cands[i].AdapterInFlight)
		}
	})
	r := newLoraRouter(t, Profile{Scorers: []Weighted{{aff, 1}, {spy, 0.001}}}, st("a"), st("b"), st("c"))
	first, err := r.Pick(&Request{Adapter: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	var held []Result
	for range 5 {
		p, err := r.Pick(&Request{Adapter: "sql"})
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != first.ID {
			t.Errorf("adapter request → %v, want %v where the adapter is in flight", p.ID, first.ID)
		}
		held = append(held, p)
	}
	if _, err := r.Pick(&Request{Adapter: "other"}); err != nil {
		t.Fatal(err)
	} else if seen[first.ID] != 0 {
		t.Errorf("another adapter sees %d in flight, want 0", seen[first.ID])
	}
	p, _ := r.Pick(&Request{Adapter: "sql"})
	if seen[first.ID] != 6 {
		t.Errorf("AdapterInFlight = %v, want 6 at %v", seen, first.ID)
	}
	p.Done(DoneInfo{})
	first.Done(DoneInfo{})
	for _, h := range held {
		h.Done(DoneInfo{})
	}
	p, _ = r.Pick(&Request{Adapter: "sql"})
	p.Done(DoneInfo{})
	for i, n := range seen {
		if n != 0 {
			t.Errorf("after Done: backend %d has %d in flight, want 0", i, n)
		}
	}
}

// The interned path (candidates built by a Router) and the names path (candidates built
// elsewhere) score alike.
func TestAdapterAffinityInternedMatchesNames(t *testing.T) {
	aff, _ := NewAdapterAffinity(AdapterOptions{})
	states := []BackendState{
		loraState("a", []string{"x", "y"}, []string{"z"}, 4),
		loraState("b", []string{"y"}, []string{"y", "x"}, 2),
		loraState("c", nil, nil, 3),
		loraState("d", []string{"q", "r", "s"}, nil, 3),
	}
	states[2].Models = []string{"base", "x", "y", "z"}
	var failed bool
	check := ScorerFunc(func(req *Request, cands []Candidate, dst []float64) {
		got, want := make([]float64, len(cands)), make([]float64, len(cands))
		aff.Score(req, cands, got)
		plain := make([]Candidate, len(cands))
		copy(plain, cands)
		for i := range plain {
			plain[i].lora = nil
		}
		aff.Score(req, plain, want)
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("adapter %q, %s: interned %v, names %v", req.Adapter, cands[i].State.Name, got[i], want[i])
				failed = true
			}
		}
	})
	r := newLoraRouter(t, Profile{Scorers: []Weighted{{check, 1}}}, states...)
	for _, ad := range []string{"x", "y", "z", "q", "new", ""} {
		p, err := r.Pick(&Request{Adapter: ad, Model: ad})
		if err != nil {
			t.Fatal(err)
		}
		p.Done(DoneInfo{})
	}
	if failed {
		t.Log(states)
	}
}

func TestAdapterTableFull(t *testing.T) {
	tb := adapterTable{seed: maphash.MakeSeed()}
	h := tb.hash("x")
	i0, _ := adapterSlot(h, 0)
	// Other pairs hold every word of the pair's window: it is not counted.
	for k := range adapterProbe {
		tb.words[(i0+k)&(adapterWords-1)].Store(0xdead<<32 | 1)
	}
	if j := tb.add(h, 0); j != -1 || tb.count(h, 0) != 0 {
		t.Errorf("full window: add = %d, count %d, want -1 and 0", j, tb.count(h, 0))
	}
	tb.release(int32((i0 + 3) & (adapterWords - 1)))
	j := tb.add(h, 0)
	if j != int32((i0+3)&(adapterWords-1)) || tb.count(h, 0) != 1 {
		t.Fatalf("one word free: add = %d, count %d, want word %d and 1", j, tb.count(h, 0), (i0+3)&(adapterWords-1))
	}
	if k := tb.add(h, 0); k != j || tb.count(h, 0) != 2 {
		t.Errorf("second request: add = %d, count %d, want the same word and 2", k, tb.count(h, 0))
	}
	tb.release(j)
	tb.release(j)
	if tb.count(h, 0) != 0 {
		t.Errorf("count after release = %d", tb.count(h, 0))
	}
}

func loraFleet(n, slots int) []BackendState {
	states := make([]BackendState, n)
	for i := range states {
		name := "vllm-" + strconv.Itoa(i)
		states[i] = loraState(name, []string{"ad-" + strconv.Itoa(i), "ad-" + strconv.Itoa(i+1)}, []string{"ad-" + strconv.Itoa(i+2)}, slots)
		states[i].Known |= SignalRunning | SignalKVUtilization
		states[i].Queued, states[i].Running, states[i].KVUtilization = i%3, i%5, 0.1*float64(i%7)
		states[i].Models = []string{"llama", "ad-" + strconv.Itoa(i), "ad-" + strconv.Itoa(i+1), "ad-" + strconv.Itoa(i+2)}
	}
	for i := range states {
		if i%2 == 0 {
			states[i].Models = nil // serves any
		}
	}
	return states
}

func TestPickAdapterAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	r := newLoraRouter(t, Usher(UsherOptions{AdapterWeight: 2}), loraFleet(16, 4)...)
	reqs := []*Request{
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
			p.Done(DoneInfo{})
		}
		cycle()
		if n := testing.AllocsPerRun(200, cycle); n != 0 {
			t.Errorf("Pick+Done for %+v: %v allocs, want 0", *req, n)
		}
	}
	listed := loraFleet(16, 4)
	for i := range listed {
		listed[i].Models = []string{"llama"}
	}
	r = newLoraRouter(t, Usher(UsherOptions{AdapterWeight: 2}), listed...)
	unserved := &Request{Model: "mistral"}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.Pick(unserved); !errors.Is(err, ErrNoBackendForModel) {
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
		blind := newLoraRouter(b, Usher(UsherOptions{}), loraFleet(n, 4)...)
		b.Run("base-without-term/n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			req := Request{Model: "llama", PromptTokens: 500}
			for b.Loop() {
				p, err := blind.Pick(&req)
				if err != nil {
					b.Fatal(err)
				}
				p.Done(DoneInfo{})
			}
		})
		r := newLoraRouter(b, Usher(UsherOptions{AdapterWeight: 2}), loraFleet(n, 4)...)
		for _, c := range []struct {
			name string
			req  Request
		}{
			{"adapter", Request{Adapter: "ad-3", Model: "ad-3", PromptTokens: 500}},
			{"base", Request{Model: "llama", PromptTokens: 500}},
		} {
			b.Run(c.name+"/n="+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p, err := r.Pick(&c.req)
					if err != nil {
						b.Fatal(err)
					}
					p.Done(DoneInfo{})
				}
			})
		}
	}
}

// Picks and Dones for adapters on many goroutines leave every count at zero (meant for -race).
func TestAdapterInFlightConcurrent(t *testing.T) {
	r := newLoraRouter(t, Usher(UsherOptions{AdapterWeight: 2}), loraFleet(8, 4)...)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				req := &Request{Adapter: "ad-" + strconv.Itoa((g+i)%5), PromptTokens: 100, Now: loraNow}
				p, err := r.Pick(req)
				if err != nil {
					t.Error(err)
					return
				}
				p.Done(DoneInfo{})
			}
		}()
	}
	wg.Wait()
	h := r.adapters
	for a := range 5 {
		for id := range BackendID(8) {
			if n := h.count(h.hash("ad-"+strconv.Itoa(a)), id); n != 0 {
				t.Errorf("ad-%d on %d: %d in flight after every Done", a, id, n)
			}
		}
	}
}

// The model filter against a naive reference over random fleets: a pick lands on a backend
// that lists the model or lists nothing, and fails with ErrNoBackendForModel exactly when no
// backend does.
func TestModelFilterModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	for trial := range 300 {
		n := 1 + rng.IntN(6)
		states := make([]BackendState, n)
		for i := range states {
			states[i] = BackendState{Name: "b" + strconv.Itoa(i), Health: Healthy}
			if rng.IntN(4) > 0 {
				for _, m := range names {
					if rng.IntN(3) == 0 {
						states[i].Models = append(states[i].Models, m)
					}
				}
			}
		}
		r := newLoraRouter(t, LeastRequest(), states...)
		for range 5 {
			model := names[rng.IntN(len(names))]
			serves := map[string]bool{}
			for _, s := range states {
				if len(s.Models) == 0 || slices.Contains(s.Models, model) {
					serves[s.Name] = true
				}
			}
			p, err := r.Pick(&Request{Model: model})
			switch {
			case len(serves) == 0:
				if !errors.Is(err, ErrNoBackendForModel) {
					t.Fatalf("trial %d: %s served by nobody, Pick error %v", trial, model, err)
				}
			case err != nil:
				t.Fatalf("trial %d: %s served by %v, Pick error %v", trial, model, serves, err)
			default:
				if !serves[p.Backend.Name] {
					t.Fatalf("trial %d: %s → %s, which does not serve it (%v)", trial, model, p.Backend.Name, states)
				}
				p.Done(DoneInfo{})
			}
		}
	}
}
