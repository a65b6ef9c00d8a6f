package bench

import "testing"

// BenchmarkSimulate measures the simulator itself: one run of a small synthetic chat workload
// on four servers with usher's router and prefix index, reporting simulated events per second
// of CPU (wall) time.
func BenchmarkSimulate(b *testing.B) {
	w := small()
	b.ReportAllocs()
	var events int64
	for b.Loop() {
		res, err := Run(w, Config{Servers: 4})
		if err != nil {
			b.Fatal(err)
		}
		events += res.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkSimulateTrace replays the first 1,000 requests of the Mooncake trace at ×4 on 16
// servers (skipped without the trace).
func BenchmarkSimulateTrace(b *testing.B) {
	w := trace(b).Head(1000).Scaled(4)
	b.ReportAllocs()
	var events int64
	for b.Loop() {
		res, err := Run(w, Config{})
		if err != nil {
			b.Fatal(err)
		}
		events += res.Events
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPrefixGroup measures the generator at its defaults (20,000 requests).
func BenchmarkPrefixGroup(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		PrefixGroup(PrefixGroupOptions{Seed: 1})
	}
}
