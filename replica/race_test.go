//go:build race

package replica

func init() { raceEnabled = true }
