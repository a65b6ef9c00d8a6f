//go:build race

package outlier_test

func init() { raceEnabled = true }
