//go:build race

package prefixcache

const raceEnabled = true
