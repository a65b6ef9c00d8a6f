//go:build race

package bench

// raceEnabled: the race detector slows the simulator about tenfold; the longest tests replay
// less under it.
const raceEnabled = true
