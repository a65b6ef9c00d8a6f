//go:build race

package routing_test

func init() { raceEnabled = true }
