//go:build unix

package flowcontrol_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used so far. Benchmarks
// report it per op besides the wall time, because on a shared machine the wall time also
// counts the time spent waiting for a CPU.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
