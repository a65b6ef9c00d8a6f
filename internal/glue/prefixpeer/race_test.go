//go:build race

package prefixpeer

const raceEnabled = true
