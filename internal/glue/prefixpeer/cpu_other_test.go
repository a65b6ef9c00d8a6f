//go:build !unix

package prefixpeer

// processCPU is unavailable on this platform.
func processCPU() (int64, bool) { return 0, false }
