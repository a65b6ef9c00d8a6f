// Package cand holds the arithmetic over routing.Candidate values that several capability
// packages share (routing/session's SessionAware and routing/profiles' DynamoCost), so that
// they agree on what a candidate's load is.
package cand

import "github.com/usher-llm/usher/routing"

// Load is a candidate's load as SessionAware sees it: the larger of its in-flight requests
// and, when either is fresh, its queued plus running requests. O(1).
func Load(c *routing.Candidate) float64 {
	l := float64(c.InFlight.Requests)
	polled, ok := 0, false
	if c.Fresh.Has(routing.SignalQueued) {
		polled += c.State.Queued
		ok = true
	}
	if c.Fresh.Has(routing.SignalRunning) {
		polled += c.State.Running
		ok = true
	}
	if ok {
		l = max(l, float64(polled))
	}
	return l
}

// UnderOthers reports whether a load l is within factor times the mean load of the other
// n−1 candidates plus one request, sum being the load of all n; false when n is 1. O(1).
func UnderOthers(l, sum float64, n int, factor float64) bool {
	return n > 1 && l <= factor*((sum-l)/float64(n-1)+1)
}

// Idle reports whether a candidate freshly reports no request waiting. O(1).
func Idle(c *routing.Candidate) bool { return c.Fresh.Has(routing.SignalQueued) && c.State.Queued == 0 }
