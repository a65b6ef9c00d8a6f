package benchcpu

import (
	"runtime"
	"testing"
)

// A meter counts the CPU its loop burns: a loop that spins reports a positive cpu-ns/op no
// larger than the wall-clock time per op (one thread), and Stop unlocks a thread meter.
func TestMeters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the thread clock is Linux only")
	}
	for _, start := range []func() Meter{StartThread, StartProcess} {
		r := testing.Benchmark(func(b *testing.B) {
			m := start()
			x := 1.0
			for b.Loop() {
				for range 1000 {
					x = x*1.0000001 + 1e-9
				}
			}
			if x == 0 {
				b.Fatal(x)
			}
			if per, ok := m.Stop(b); !ok || per <= 0 {
				b.Errorf("Stop: %v, %v; want a positive CPU time per op", per, ok)
			}
		})
		cpu, ok := r.Extra["cpu-ns/op"]
		if !ok || cpu <= 0 {
			t.Fatalf("no cpu-ns/op reported: %v", r.Extra)
		}
		if wall := float64(r.T.Nanoseconds()) / float64(r.N); cpu > 1.5*wall+1000 {
			t.Errorf("cpu %.0f ns/op against wall %.0f ns/op", cpu, wall)
		}
	}
}
