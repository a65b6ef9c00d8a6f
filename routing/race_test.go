//go:build race

package routing

func init() { raceEnabled = true }
