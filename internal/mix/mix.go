// Package mix holds the one integer mixer usher's simulators and load generators share:
// SplitMix64's finaliser, a bijection of uint64 whose output bits each depend on every input
// bit. It is for deriving well-spread values from counters and ids (seeds, synthetic block
// hashes, word choices), not for hashing untrusted input.
package mix

// Mix64 is SplitMix64's finaliser. O(1), pure, safe for concurrent use.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
