package routing

import (
	"errors"
	"testing"
	"time"
)

func TestPrefixDecider(t *testing.T) {
	running := func(n int) *BackendState {
		return &BackendState{Name: "d", Known: SignalRunning, Running: n}
	}
	tests := []struct {
		name     string
		o        PrefixDeciderOptions
		uncached int
		state    *BackendState
		want     bool
	}{
		{"default threshold: short suffix stays", PrefixDeciderOptions{}, 511, nil, false},
		{"default threshold: long suffix goes", PrefixDeciderOptions{}, 512, nil, true},
		{"own threshold", PrefixDeciderOptions{MinUncachedTokens: 64}, 64, nil, true},
		{"busy: idle server keeps a medium prefill", PrefixDeciderOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 900, running(0), false},
		{"busy: idle server sends a very long one", PrefixDeciderOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 1024, running(0), true},
		{"busy: two answers running halve the bar", PrefixDeciderOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 512, running(2), true},
		{"busy: a busy server sends at the minimum", PrefixDeciderOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 256, running(16), true},
		{"busy: never below the minimum", PrefixDeciderOptions{MinUncachedTokens: 256, BusyDecodes: 4}, 255, running(16), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewPrefixDecider(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			res := &Result{Backend: tt.state, UncachedTokens: tt.uncached}
			if got := d.Disaggregate(&Request{PromptTokens: 2048}, res); got != tt.want {
				t.Errorf("Disaggregate = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := NewPrefixDecider(PrefixDeciderOptions{MinUncachedTokens: -1}); !errors.Is(err, ErrInvalidDecider) {
		t.Errorf("negative threshold: %v, want ErrInvalidDecider", err)
	}
	if !Always.Disaggregate(&Request{}, &Result{}) || Never.Disaggregate(&Request{}, &Result{UncachedTokens: 1 << 20}) {
		t.Error("Always/Never")
	}
}

func TestPrefixDeciderAllocs(t *testing.T) {
	d, _ := NewPrefixDecider(PrefixDeciderOptions{BusyDecodes: 4})
	req, res := &Request{PromptTokens: 4096}, &Result{UncachedTokens: 700, Backend: &BackendState{Known: SignalRunning, Running: 3}}
	if n := testing.AllocsPerRun(1000, func() { d.Disaggregate(req, res) }); n != 0 {
		t.Errorf("Disaggregate allocates %v times, want 0", n)
	}
}

func BenchmarkPrefixDecider(b *testing.B) {
	d, _ := NewPrefixDecider(PrefixDeciderOptions{BusyDecodes: 4})
	req, res := &Request{PromptTokens: 4096}, &Result{UncachedTokens: 700, Backend: &BackendState{Known: SignalRunning, Running: 3}}
	b.ReportAllocs()
	for b.Loop() {
		d.Disaggregate(req, res)
	}
}

// TestPoolDecider: with the prefill pool idle a long prefill goes there; with the pool holding
// more prefill work than the decode server would, it stays on the decode server.
func TestPoolDecider(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r, err := New(Options{Profile: Usher(UsherOptions{}), Now: func() time.Time { return now }, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Update([]BackendState{
		{Name: "prefill", Role: RolePrefill, Health: Healthy, UpdatedAt: now},
		{Name: "decode", Role: RoleDecode, Health: Healthy, UpdatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	d, err := NewPoolDecider(PoolDeciderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decodePick := func(tokens int) (*Request, Result) {
		req := &Request{PromptTokens: tokens, Role: RoleDecode}
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
	p.Done(DoneInfo{})
	// The prefill server now has 8,192 tokens of prefill in flight.
	busy, err := r.Pick(&Request{PromptTokens: 8192, Role: RolePrefill})
	if err != nil {
		t.Fatal(err)
	}
	req, p = decodePick(2048)
	if d.Disaggregate(req, &p) {
		t.Error("a prefill pool with 8,192 tokens queued against the decode server's 2,048: the decode server should prefill")
	}
	p.Done(DoneInfo{})
	req, p = decodePick(300)
	if d.Disaggregate(req, &p) {
		t.Error("300 uncached tokens: below the minimum")
	}
	p.Done(DoneInfo{})
	busy.Done(DoneInfo{})
	if d.Disaggregate(&Request{}, &Result{UncachedTokens: 600}) != true {
		t.Error("a Result no router made: the prefix rule")
	}
	if n := testing.AllocsPerRun(100, func() { d.Disaggregate(req, &p) }); n != 0 {
		t.Errorf("Disaggregate allocates %v times", n)
	}
	if _, err := NewPoolDecider(PoolDeciderOptions{MinUncachedTokens: -1}); !errors.Is(err, ErrInvalidDecider) {
		t.Errorf("negative minimum: %v", err)
	}
}
