//go:build linux

package benchcpu

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time (user and system) the calling OS thread has used.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1 // RUSAGE_THREAD, Linux only
	return rusage(rusageThread)
}

func rusage(who int) (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU returns the CPU time (user and system) the process has used.
func processCPU() (time.Duration, bool) { return rusage(syscall.RUSAGE_SELF) }
