package bench

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Spread summarises one metric of a configuration over its seeds: the median and the range.
//
// The range is min–max, not the interquartile range: at the three to five seeds a comparison
// can afford, quartiles are interpolations between the same few values, while min–max says
// plainly what every seed did. Two configurations whose ranges overlap are not separated by
// their seeds and count as a tie.
type Spread struct {
	Median, Min, Max float64
}

// SpreadOf returns the spread of xs: the median (for an even count the mean of the two middle
// values) and the smallest and largest value. It returns the zero Spread for no values and
// does not modify xs. O(n log n).
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[n-1]}
}

// Overlaps reports whether the closed ranges [Min, Max] of s and t intersect.
func (s Spread) Overlaps(t Spread) bool { return s.Min <= t.Max && t.Min <= s.Max }

// verdict is the outcome of comparing usher's spread with a peer's.
type verdict int8

const (
	lost verdict = iota - 1
	tie
	won
)

// versus compares usher's spread u with a peer's p on a metric where higher is better when
// higher is true (lower otherwise): a tie when the ranges overlap once each is widened by tol
// times its median's magnitude (tol 0 compares the ranges as they are; with one seed each,
// only equal values tie), else the medians decide.
func versus(u, p Spread, higher bool, tol float64) verdict {
	widen := func(s Spread) Spread {
		d := tol * max(s.Median, -s.Median)
		return Spread{s.Median, s.Min - d, s.Max + d}
	}
	if widen(u).Overlaps(widen(p)) {
		return tie
	}
	if (u.Median > p.Median) == higher {
		return won
	}
	return lost
}

// String returns the goal check's word for v: "met", "tie" or "NOT met".
func (v verdict) String() string {
	switch v {
	case won:
		return "met"
	case tie:
		return "tie"
	}
	return "NOT met"
}

// Cell is one configuration of a comparison — workload, load, policy and router — with its
// runs, one per seed.
type Cell struct {
	Workload, Policy, Router string
	Rate                     float64
	// Runs holds the configuration's results in the order they were given.
	Runs []*Result
}

// Cells groups results by configuration (Workload, Rate, Policy and Router): cells in the
// order of their first result, runs in the order given. A single-seed comparison has one run
// per cell. O(len(results)).
func Cells(results []*Result) []*Cell {
	type key struct {
		workload, policy, router string
		rate                     float64
	}
	at := make(map[key]*Cell, len(results))
	var out []*Cell
	for _, r := range results {
		k := key{r.Workload, r.Policy, r.Router, r.Rate}
		c, ok := at[k]
		if !ok {
			c = &Cell{Workload: r.Workload, Policy: r.Policy, Router: r.Router, Rate: r.Rate}
			at[k] = c
			out = append(out, c)
		}
		c.Runs = append(c.Runs, r)
	}
	return out
}

// Spread returns the spread of f over the cell's runs. O(runs log runs).
func (c *Cell) Spread(f func(*Result) float64) Spread {
	xs := make([]float64, len(c.Runs))
	for i, r := range c.Runs {
		xs[i] = f(r)
	}
	return SpreadOf(xs)
}

// paired compares u with p seed by seed on f (higher is better when higher is true; values
// within tol times the larger magnitude are level), over the seeds both cells ran: the paired
// view the ranges leave out, since on a synthetic workload a seed changes the workload for
// every router alike.
func paired(u, p *Cell, f func(*Result) float64, higher bool, tol float64) (ahead, level, behind int) {
	for _, a := range u.Runs {
		for _, b := range p.Runs {
			if a.Seed != b.Seed {
				continue
			}
			x, y := f(a), f(b)
			switch {
			case math.Abs(x-y) <= tol*max(math.Abs(x), math.Abs(y)):
				level++
			case (x > y) == higher:
				ahead++
			default:
				behind++
			}
			break
		}
	}
	return ahead, level, behind
}

// seedList returns the distinct seeds of results in increasing order, comma-separated.
func seedList(results []*Result) string {
	var seeds []uint64
	for _, r := range results {
		if !slices.Contains(seeds, r.Seed) {
			seeds = append(seeds, r.Seed)
		}
	}
	slices.Sort(seeds)
	s := make([]string, len(seeds))
	for i, x := range seeds {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ", ")
}

// fmtSpread formats s as "median (min–max)" with format, or as the median alone when the
// range vanishes at format's precision.
func fmtSpread(s Spread, format func(float64) string) string {
	m, lo, hi := format(s.Median), format(s.Min), format(s.Max)
	if lo == hi {
		return m
	}
	return m + " (" + lo + "–" + hi + ")"
}
