//go:build linux

package metrics

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time (user and system) the calling OS thread has used. On a
// shared machine wall-clock benchmark times include waiting for a CPU; this does not.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1 // RUSAGE_THREAD, Linux only
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
