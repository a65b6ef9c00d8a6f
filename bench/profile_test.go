package bench

import (
	"errors"
	"testing"
	"time"
)

// TestEngineProfileInvalid checks that a Config.Profile the engine cannot run is an error
// wrapping ErrInvalidConfig, never a panic, and that the named profiles run.
func TestEngineProfileInvalid(t *testing.T) {
	w := Chat(ChatOptions{Sessions: 4, Rate: 2, Turns: 2, Think: time.Second, Seed: 1})
	for _, tc := range []struct {
		name   string
		modify func(*EngineProfile)
		ok     bool
	}{
		{"bench", func(*EngineProfile) {}, true},
		{"zero block size", func(p *EngineProfile) { p.BlockSize = 0 }, false},
		{"negative block size", func(p *EngineProfile) { p.BlockSize = -16 }, false},
		{"no blocks", func(p *EngineProfile) { p.NumBlocks = 0 }, false},
		{"negative cost", func(p *EngineProfile) { p.DecodePerContextToken = Picoseconds(-1) }, false},
		{"no cost", func(p *EngineProfile) { p.StepBase, p.PrefillPerToken, p.DecodePerSeq = 0, 0, 0 }, false},
	} {
		p := BenchProfile()
		tc.modify(&p)
		_, err := Run(w, Config{Servers: 1, Profile: p})
		if got := err == nil; got != tc.ok {
			t.Errorf("%s: Run error %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: error %v does not wrap ErrInvalidConfig", tc.name, err)
		}
	}
	for _, p := range []EngineProfile{Qwen3Profile(), DemoProfile()} {
		if _, err := Run(w, Config{Servers: 1, Profile: p}); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}
