// Package rng is the random source of a pick: SplitMix64, seeded from a Router's seed
// sequence and handed to Pickers as a *math/rand/v2.Rand, and the draws the built-in pickers
// make from it. IntN and Float64 take the generator's raw 64-bit outputs as the pickers always
// have, rather than math/rand/v2's methods of the same names (which use other bits and reject
// some draws), so that a seed gives the same picks as before the pickers left package routing.
package rng

import "math/rand/v2"

// Source is SplitMix64: a 64-bit state advanced by a fixed odd constant and mixed. Its zero
// value is a valid source seeded with 0. It is not safe for concurrent use, and need not be:
// each pick has its own.
type Source struct{ S uint64 }

var _ rand.Source = (*Source)(nil)

// Uint64 returns the next value. O(1).
func (g *Source) Uint64() uint64 {
	g.S += 0x9e3779b97f4a7c15
	z := g.S
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// New returns a generator over a fresh Source seeded with seed, and the source, so that the
// caller can reseed it. It allocates.
func New(seed uint64) (*rand.Rand, *Source) {
	s := &Source{S: seed}
	return rand.New(s), s
}

// Float64 returns a uniformly distributed value in [0, 1) from the top 53 bits of one draw.
// O(1).
func Float64(r *rand.Rand) float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// IntN returns a value in [0, n) from the top 32 bits of one draw, scaled without rejection;
// n must be > 0 and < 2³². O(1).
func IntN(r *rand.Rand, n int) int {
	return int((r.Uint64() >> 32) * uint64(n) >> 32)
}

// MaxIndex returns the index of the highest score (0 for none); ties are broken by reservoir sampling, so
// each of k tied maxima is chosen with probability 1/k.
func MaxIndex(scores []float64, g *rand.Rand) int {
	if len(scores) == 0 {
		return 0
	}
	best, ties, hi := 0, 1, scores[0] // hi is scores[best], kept in a register
	for i, v := range scores[1:] {
		if v > hi {
			best, ties, hi = i+1, 1, v
		} else if v == hi {
			ties++
			if IntN(g, ties) == 0 {
				best = i + 1
			}
		}
	}
	return best
}
