//go:build !unix

package benchcpu

import "time"

// The CPU clocks are unavailable here: a Meter reports nothing.
func threadCPU() (time.Duration, bool)  { return 0, false }
func processCPU() (time.Duration, bool) { return 0, false }
