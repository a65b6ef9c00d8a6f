//go:build !race

package routingtest

// Race reports whether the test binary runs under the race detector.
const Race = false
