//go:build race

package flowcontrol_test

const raceEnabled = true
