//go:build !race

package prefixpeer

const raceEnabled = false
