package routing

import (
	"math"
	"testing"
	"time"
)

// TestAllFresh is columns_test.go's check of the snapshot's O(1) freshness test, which reads
// nothing but the package's internals.
func TestAllFresh(t *testing.T) {
	const sa = time.Second
	for _, tc := range []struct {
		name    string
		updated []int64
		now     int64
		stale   time.Duration
		want    bool
	}{
		{"all recent", []int64{100, 200}, 1000, 1000, true},
		{"oldest just in time", []int64{0 + 1, 500}, 1001, 1000, true},
		{"oldest too old", []int64{1, 500}, 1002, 1000, false},
		{"never observed", []int64{0, 500}, 600, sa, false},
		{"never stale", []int64{1, 500}, math.MaxInt64, -1, true},
		{"future", []int64{5000}, 1000, 10, true},
		{"overflowing age", []int64{math.MinInt64 + 1, 10}, math.MaxInt64 - 5, sa, false},
	} {
		s := &snapshot{backends: make([]backend, len(tc.updated))}
		for i, u := range tc.updated {
			s.backends[i].updated = u
		}
		s.summarise()
		if got := s.allFresh(tc.now, tc.stale); got != tc.want {
			t.Errorf("%s: allFresh = %v, want %v", tc.name, got, tc.want)
		}
		// allFresh may say false when every backend is fresh (an overflow), never true when
		// one is stale.
		p := candParams{nowNs: tc.now, staleAfter: tc.stale}
		cands := make([]Candidate, len(s.backends))
		for i := range s.backends {
			s.backends[i].load = new(inflight)
		}
		if stale := p.fill(cands, s.backends, 0); tc.want && stale != 0 {
			t.Errorf("%s: allFresh, but fill counts %d stale", tc.name, stale)
		}
	}
}
