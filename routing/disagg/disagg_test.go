package disagg

import (
	"errors"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/profiles"
)

func TestPrefixDecider(t *testing.T) {
	running := func(n int) *routing.BackendState {
		return &routing.BackendState{Name: "d", Known: routing.SignalRunning, Running: n}
	}
	tests := []struct {
		name     string
		o        PrefixOptions
		uncached int
		state    *routing.BackendState
		want     bool
	}{
		{"default threshold: short suffix stays", PrefixOptions{}, 511, nil, false},
		{"default threshold: long suffix goes", PrefixOptions{}, 512, nil, true},
		{"own threshold", PrefixOptions{MinUncachedTokens: 64}, 64, nil, true},
		{"busy: idle server keeps a medium prefill", PrefixOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 900, running(0), false},
		{"busy: idle server sends a very long one", PrefixOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 1024, running(0), true},
		{"busy: two answers running halve the bar", PrefixOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 512, running(2), true},
		{"busy: a busy server sends at the minimum", PrefixOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 256, running(16), true},
		{"busy: never below the minimum", PrefixOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 255, running(16), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewPrefix(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			res := &routing.Result{Backend: tt.state, UncachedTokens: tt.uncached}
			if got := d.Disaggregate(&routing.Request{PromptTokens: 2048}, res); got != tt.want {
				t.Errorf("Disaggregate = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := NewPrefix(PrefixOptions{MinUncachedTokens: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("negative threshold: %v, want ErrInvalidOptions", err)
	}
	if !Always.Disaggregate(&routing.Request{}, &routing.Result{}) || Never.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 1 << 20}) {
		t.Error("Always/Never")
	}
}

func TestPrefixDeciderAllocs(t *testing.T) {
	d, _ := NewPrefix(PrefixOptions{BusyDecodes: 4})
	req, res := &routing.Request{PromptTokens: 4096}, &routing.Result{UncachedTokens: 700, Backend: &routing.BackendState{Known: routing.SignalRunning, Running: 3}}
	if n := testing.AllocsPerRun(1000, func() { d.Disaggregate(req, res) }); n != 0 {
		t.Errorf("Disaggregate allocates %v times, want 0", n)
	}
}

func BenchmarkPrefixDecider(b *testing.B) {
	d, _ := NewPrefix(PrefixOptions{BusyDecodes: 4})
	req, res := &routing.Request{PromptTokens: 4096}, &routing.Result{UncachedTokens: 700, Backend: &routing.BackendState{Known: routing.SignalRunning, Running: 3}}
	b.ReportAllocs()
	for b.Loop() {
		d.Disaggregate(req, res)
	}
}

// TestPoolDecider: with the prefill pool idle a long prefill goes there; with the pool holding
// more prefill work than the decode server would, it stays on the decode server.
func TestPoolDecider(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r, err := routing.New(routing.Options{Profile: profiles.Usher(profiles.UsherOptions{}), Now: func() time.Time { return now }, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Update([]routing.BackendState{
		{Name: "prefill", Role: routing.RolePrefill, Health: routing.Healthy, UpdatedAt: now},
		{Name: "decode", Role: routing.RoleDecode, Health: routing.Healthy, UpdatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	d, err := NewPoolAware(PoolAwareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decodePick := func(tokens int) (*routing.Request, routing.Result) {
		req := &routing.Request{PromptTokens: tokens, Role: routing.RoleDecode}
		p, err := r.Pick(req)
		if err != nil {
			t.Fatal(err)
		}
		return req, p
	}
	req, p := decodePick(2048)
	if !d.Disaggregate(req, &p) {
		t.Error("an idle prefill pool: the prefill should go there")
	}
	p.Done(routing.DoneInfo{})
	// The prefill server now has 8,192 tokens of prefill in flight.
	busy, err := r.Pick(&routing.Request{PromptTokens: 8192, Role: routing.RolePrefill})
	if err != nil {
		t.Fatal(err)
	}
	req, p = decodePick(2048)
	if d.Disaggregate(req, &p) {
		t.Error("a prefill pool with 8,192 tokens queued against the decode server's 2,048: the decode server should prefill")
	}
	p.Done(routing.DoneInfo{})
	req, p = decodePick(300)
	if d.Disaggregate(req, &p) {
		t.Error("300 uncached tokens: below the minimum")
	}
	p.Done(routing.DoneInfo{})
	busy.Done(routing.DoneInfo{})
	if d.Disaggregate(&routing.Request{}, &routing.Result{UncachedTokens: 600}) != true {
		t.Error("a Result no router made: the prefix rule")
	}
	if n := testing.AllocsPerRun(100, func() { d.Disaggregate(req, &p) }); n != 0 {
		t.Errorf("Disaggregate allocates %v times", n)
	}
	if _, err := NewPoolAware(PoolAwareOptions{MinUncachedTokens: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("negative minimum: %v", err)
	}
}
