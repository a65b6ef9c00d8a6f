//go:build !unix

package prefixcache

// processCPU is unavailable on this platform.
func processCPU() (int64, bool) { return 0, false }
