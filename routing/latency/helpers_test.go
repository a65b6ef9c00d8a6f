package latency

// linearStats is what a Linear has learned so far, as the tests read it.
type linearStats struct {
	// ttftSamples and tpotSamples count the outcomes learned; fits the refits.
	ttftSamples, tpotSamples, fits uint64
}

// stats returns the model's counts. O(1); it takes the model's mutex.
func (m *Linear) stats() linearStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return linearStats{ttftSamples: uint64(m.eqs[0].n), tpotSamples: uint64(m.eqs[1].n), fits: m.fits}
}
