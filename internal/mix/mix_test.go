package mix

import "testing"

func TestMix64(t *testing.T) {
	// SplitMix64's first output for seed 0 is Mix64(0x9e3779b97f4a7c15).
	if got := Mix64(0x9e3779b97f4a7c15); got != 0xe220a8397b1dcdaf {
		t.Errorf("Mix64(golden) = %#x, want 0xe220a8397b1dcdaf", got)
	}
	seen := map[uint64]bool{}
	for i := range uint64(1000) {
		seen[Mix64(i)] = true
	}
	if len(seen) != 1000 {
		t.Errorf("Mix64 collided on small inputs: %d distinct of 1000", len(seen))
	}
}
