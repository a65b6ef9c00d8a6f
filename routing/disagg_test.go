package routing

import (
	"errors"
	"testing"
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
