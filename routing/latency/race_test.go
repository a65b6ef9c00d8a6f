//go:build race

package latency

func init() { raceEnabled = true }
