package routing_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	. "github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/profiles"
)

// The model filter, the adapter signals' validation and the router's per-adapter in-flight
// counts (routing/lora's scorer has its own tests).

func TestSanitizeAdapters(t *testing.T) {
	tests := []struct {
		name string
		s    BackendState
		ok   bool
	}{
		{"valid", routingtest.LoraState("b", []string{"a"}, []string{"c"}, 4), true},
		{"more running than slots (vLLM renders both from one map)", routingtest.LoraState("b", []string{"a", "b", "c"}, nil, 2), true},
		{"no slots", routingtest.LoraState("b", nil, nil, 0), false},
		{"negative slots", routingtest.LoraState("b", nil, nil, -3), false},
		{"absurd slots", routingtest.LoraState("b", nil, nil, 1<<20), false},
		{"empty running name", routingtest.LoraState("b", []string{""}, nil, 4), false},
		{"empty waiting name", routingtest.LoraState("b", nil, []string{"a", ""}, 4), false},
	}
	for _, tt := range tests {
		s := tt.s
		bad := Sanitize(&s)
		if got := s.Known.Has(SignalAdapters); got != tt.ok || (bad == 0) != tt.ok {
			t.Errorf("%s: kept %v (cleared %d), want kept %v", tt.name, got, bad, tt.ok)
		}
		if !s.Known.Has(SignalQueued) {
			t.Errorf("%s: cleared an unrelated signal", tt.name)
		}
	}
}

func TestPickModelFilter(t *testing.T) {
	a := BackendState{Name: "a", Health: Healthy, Models: []string{"llama", "sql-lora"}}
	b := BackendState{Name: "b", Health: Healthy, Models: []string{"qwen", ""}}
	any := BackendState{Name: "any", Health: Healthy}
	r := routingtest.NewLoraRouter(t, profiles.LeastRequest(), a, b)
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
	r = routingtest.NewLoraRouter(t, profiles.LeastRequest(), a, b, any)
	p, err := r.Pick(&Request{Model: "mistral"})
	if err != nil || p.Backend.Name != "any" {
		t.Fatalf("mistral with a catch-all backend → %v, %v", p.Backend, err)
	}
	p.Done(DoneInfo{})
}

// Picks and Dones for adapters on many goroutines leave every count at zero (meant for -race).
func TestAdapterInFlightConcurrent(t *testing.T) {
	r := routingtest.NewLoraRouter(t, profiles.Usher(profiles.UsherOptions{AdapterWeight: 2}), routingtest.LoraFleet(8, 4)...)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				req := &Request{Adapter: "ad-" + strconv.Itoa((g+i)%5), PromptTokens: 100, Now: routingtest.LoraNow}
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
	for a := range 5 {
		for id := range BackendID(8) {
			if n := AdapterInFlight(r, "ad-"+strconv.Itoa(a), id); n != 0 {
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
		r := routingtest.NewLoraRouter(t, profiles.LeastRequest(), states...)
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
