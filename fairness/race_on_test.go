//go:build race

package fairness_test

// raceEnabled: allocation counts are not meaningful under the race detector.
const raceEnabled = true
