package outlier

import (
	"math"
	"testing"
	"time"
)

// The ejections double up to MaxEjection, which the n-th ejection in a row reaches and none
// before it, whatever the range.
func TestEjectionCap(t *testing.T) {
	o, err := New(Options{BaseEjection: time.Hour, MaxEjection: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.ejection(o.maxN); got != math.MaxInt64 || o.ejection(o.maxN-1) == math.MaxInt64 {
		t.Errorf("longest ejection %v at n = %d, want the cap, reached at that n and not before", time.Duration(got), o.maxN)
	}
}
