//go:build race

package extproc

// raceEnabled: the race detector is on, and allocates on its own account.
const raceEnabled = true
