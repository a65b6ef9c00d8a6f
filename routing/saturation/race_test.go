//go:build race

package saturation_test

func init() { raceEnabled = true }
