package flowcontroltest

// Timers returns the number of timers of c armed and not yet fired or stopped, for the
// package's tests.
func Timers(c *FakeClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
