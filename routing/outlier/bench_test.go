package outlier_test

import (
	"errors"
	"testing"
	"time"

	"github.com/usher-llm/usher/routing"
	"github.com/usher-llm/usher/routing/internal/routingtest"
	"github.com/usher-llm/usher/routing/outlier"
	"github.com/usher-llm/usher/routing/profiles"
)

var errBench = errors.New("bench")

// BenchmarkPickOutlier measures Pick and a successful Done at 100 backends in the Usher profile
// without and with the Detector (filter only, or filter and scorer at weight 1): with nothing
// failing (its fast paths), and with one backend ejected and a failure in the window (its slow
// paths: an O(n) filter and score). Every Done is a success, so the Outlier takes its lock in
// Completed. With the 128-block chain the index match and insert dominate; without a chain the
// figures are the router's and the outlier's own work.
func BenchmarkPickOutlier(b *testing.B) {
	for _, chain := range []struct {
		name string
		keep bool
	}{{"chain=128", true}, {"chain=none", false}} {
		for _, tc := range []struct {
			name    string
			weight  float64 // of the outlier's score; < 0: no outlier
			failing bool
		}{
			{"usher", -1, false},
			{"usher+outlier-filter-only", 0, false},
			{"usher+outlier", 1, false},
			{"usher+outlier/one-ejected", 1, true},
		} {
			b.Run(chain.name+"/"+tc.name, func(b *testing.B) {
				p := profiles.Usher(profiles.UsherOptions{})
				var o *outlier.Detector
				if tc.weight >= 0 {
					var err error
					if o, err = outlier.New(outlier.Options{Now: func() time.Time { return routingtest.T0 }}); err != nil {
						b.Fatal(err)
					}
					p = outlier.With(p, o, tc.weight)
				}
				r, req := routingtest.BenchRouter(b, 100, p)
				req.Session = "session-1"
				if !chain.keep {
					req.Chain = nil
				}
				if tc.failing {
					o.Completed(7, routingtest.T0, routing.DoneInfo{Err: errBench, Failure: routing.FailureConnect})
					o.Completed(8, routingtest.T0, routing.DoneInfo{Err: errBench, Failure: routing.FailureServer})
				}
				b.ReportAllocs()
				for b.Loop() {
					pk, err := r.Pick(req)
					if err != nil {
						b.Fatal(err)
					}
					pk.Done(routing.DoneInfo{})
				}
			})
		}
	}
}

// BenchmarkPickOutlierParallel is BenchmarkPickOutlier's success case from GOMAXPROCS
// goroutines, where the Outlier's lock in Completed is shared.
func BenchmarkPickOutlierParallel(b *testing.B) {
	for _, withOutlier := range []bool{false, true} {
		name := "usher"
		if withOutlier {
			name = "usher+outlier"
		}
		b.Run(name, func(b *testing.B) {
			p := profiles.Usher(profiles.UsherOptions{})
			if withOutlier {
				o, err := outlier.New(outlier.Options{Now: func() time.Time { return routingtest.T0 }})
				if err != nil {
					b.Fatal(err)
				}
				p = outlier.With(p, o, 1)
			}
			r, req := routingtest.BenchRouter(b, 100, p)
			req.Chain = nil // no insert: the router's and the outlier's own work
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					pk, err := r.Pick(req)
					if err != nil {
						b.Error(err)
						return
					}
					pk.Done(routing.DoneInfo{})
				}
			})
		})
	}
}
