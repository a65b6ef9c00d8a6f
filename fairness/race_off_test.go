//go:build !race

package fairness_test

const raceEnabled = false
