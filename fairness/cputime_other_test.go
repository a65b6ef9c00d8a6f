//go:build !linux

package fairness_test

// threadCPU is unavailable on this platform; benchmarks then report wall-clock time only.
func threadCPU() (int64, bool) { return 0, false }
