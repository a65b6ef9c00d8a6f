//go:build !linux

package disagg

// threadCPU is unavailable on this platform; benchmarks then report wall-clock time only.
func threadCPU() (int64, bool) { return 0, false }
