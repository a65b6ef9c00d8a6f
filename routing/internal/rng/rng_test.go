package rng

import "testing"

func TestRandRanges(t *testing.T) {
	g, _ := New(11)
	for range 10000 {
		if f := Float64(g); f < 0 || f >= 1 {
			t.Fatalf("Float64 = %v", f)
		}
		if n := IntN(g, 7); n < 0 || n >= 7 {
			t.Fatalf("IntN(7) = %d", n)
		}
	}
	a, _ := New(5)
	b, _ := New(5)
	for range 10 {
		if a.Uint64() != b.Uint64() {
			t.Fatal("same seed, different sequences")
		}
	}
}
