// Package simproc runs simulated vLLM-compatible servers (internal/glue/simfleet/cmd/simserver) as
// real processes, for fault tests in other packages: a test starts one, sends it requests,
// and then kills it with SIGKILL, freezes it with SIGSTOP, thaws it with SIGCONT or restarts
// it on the same address and KV-event ports, as an operator or a crash would, instead of
// closing an in-process server politely.
//
//	p := simproc.Start(t, simproc.Options{KVEvents: "tcp://127.0.0.1:0"})
//	// ... point a gateway at p.URL (and p.KVEvents) ...
//	p.Kill()
//	p.Restart(t)
//
// Build compiles the command once per test process; Start launches a process and waits for
// it to listen; the test's cleanup kills it. Everything but this doc is Unix-only (it needs
// job-control signals). A server also shuts down by itself when the test process dies
// (its stdin, a pipe from the test, reaches end of file), so a test binary killed by its
// timeout leaves no servers behind unless they were stopped with SIGSTOP at the time.
package simproc
