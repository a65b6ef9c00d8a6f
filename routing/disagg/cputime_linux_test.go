//go:build linux

package disagg

import "syscall"

// threadCPU returns the CPU time the calling OS thread has used, in nanoseconds, and true.
// Benchmarks lock their goroutine to its thread and report CPU ns/op beside wall-clock ns/op,
// which on a shared, oversubscribed machine measures the code rather than the queue for a core.
func threadCPU() (int64, bool) {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
