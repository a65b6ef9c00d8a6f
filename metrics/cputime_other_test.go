//go:build !linux

package metrics

import "time"

// threadCPU is not available here; benchmarks then report wall-clock time only.
func threadCPU() (time.Duration, bool) { return 0, false }
